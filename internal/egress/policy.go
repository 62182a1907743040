package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Policy decides whether a sandbox may reach a destination. Names are
// resolved here, on the host, never in the sandbox: a refused name is
// refused before it is looked up, so resolving it teaches the sandbox
// nothing, and an allowed one is dialled at the address checked here (no
// second lookup a rebinding server could answer differently).
type Policy struct {
	Rules []Rule
	// Resolve looks a name up (nil: the host's resolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Own lists the host's own addresses (nil: its interfaces'), which a
	// name may not lead to unless the list names the address.
	Own func() []netip.Addr
	// ResolveTimeout bounds a lookup (0: 5s).
	ResolveTimeout time.Duration
}

// Decision is the policy's answer for one destination.
type Decision struct {
	Allowed bool
	// Rule is the entry that allowed it ("" when refused).
	Rule string
	// Reason says why it was refused, in words for the 403 and the log.
	Reason string
	// Addr is where to connect when allowed.
	Addr netip.AddrPort
}

// Decide answers for host (a name or an address literal) and port.
func (p *Policy) Decide(ctx context.Context, host string, port int) Decision {
	if port < 1 || port > 65535 {
		return Decision{Reason: fmt.Sprintf("port %d is not a port", port)}
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		a = a.Unmap()
		if a.Zone() != "" {
			return Decision{Reason: fmt.Sprintf("%s: an address with a zone is never allowed", host)}
		}
		if r, ok := p.addressRule(a, port); ok {
			return Decision{Allowed: true, Rule: r.Text, Addr: netip.AddrPortFrom(a, uint16(port))}
		}
		return Decision{Reason: fmt.Sprintf("no entry of the allow-list names the address %s port %d", a, port)}
	}
	name, err := normalName(host, false)
	if err != nil {
		return Decision{Reason: fmt.Sprintf("%q is neither a host name nor an address", host)}
	}
	var rule *Rule
	for i := range p.Rules {
		if r := &p.Rules[i]; r.IsName() && matchName(r.Name, name) && r.port(port) {
			rule = r
			break
		}
	}
	if rule == nil {
		return Decision{Reason: fmt.Sprintf("no entry of the allow-list names %s port %d", name, port)}
	}
	addrs, err := p.resolve(ctx, name)
	if err != nil {
		return Decision{Reason: fmt.Sprintf("%s (allowed by %q) did not resolve on the host: %v", name, rule.Text, err)}
	}
	own := p.own()
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if why := special(a, own); why != "" {
			if r, ok := p.addressRule(a, port); ok {
				return Decision{Allowed: true, Rule: r.Text, Addr: netip.AddrPortFrom(a, uint16(port))}
			}
			refused = append(refused, a.String()+" ("+why+")")
			continue
		}
		return Decision{Allowed: true, Rule: rule.Text, Addr: netip.AddrPortFrom(a, uint16(port))}
	}
	if len(refused) == 0 {
		return Decision{Reason: fmt.Sprintf("%s (allowed by %q) has no address", name, rule.Text)}
	}
	return Decision{Reason: fmt.Sprintf("%s (allowed by %q) resolves to %s, which a name may not lead to unless the allow-list names the address itself",
		name, rule.Text, strings.Join(refused, ", "))}
}

// addressRule finds an address or CIDR entry covering a and port.
func (p *Policy) addressRule(a netip.Addr, port int) (Rule, bool) {
	for _, r := range p.Rules {
		if !r.IsName() && r.Prefix.Contains(a) && r.port(port) {
			return r, true
		}
	}
	return Rule{}, false
}

func (p *Policy) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	d := p.ResolveTimeout
	if d <= 0 {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if p.Resolve != nil {
		return p.Resolve(ctx, name)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
}

func (p *Policy) own() []netip.Addr {
	if p.Own != nil {
		return p.Own()
	}
	return HostAddrs()
}

// HostAddrs are the addresses of this host's interfaces.
func HostAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// cgnat is the shared address space (RFC 6598), private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// special says why a resolved address is one a name may not lead to
// ("" when it is an ordinary public address): the host's own services,
// its networks, cloud metadata.
func special(a netip.Addr, own []netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsPrivate(), cgnat.Contains(a):
		return "private"
	case a.IsMulticast():
		return "multicast"
	case a.Is4() && a.As4()[0] == 0:
		return "this network"
	}
	for _, o := range own {
		if o == a {
			return "this host"
		}
	}
	return ""
}
