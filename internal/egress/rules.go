// Package egress is the policy of a sandbox whose network is `allow`: the
// allow-list's rules (this file), the decision for one destination made
// on the host with the host's resolver (policy.go), the HTTP proxy that
// applies it to one connection relayed out of the sandbox (proxy.go), and
// the network log where every decision is written (log.go). It knows
// nothing of engines or channels: the holder hands it connections.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one entry of an allow-list: a host name (exact, or "*.suffix"
// for any name under suffix), an address, or a CIDR prefix, each with an
// optional port (0: any).
type Rule struct {
	Text   string       // as written, for the log and refusals
	Name   string       // lower case, no trailing dot; "*.x" for a wildcard
	Prefix netip.Prefix // an address is a /32 or /128
	Port   int
}

// IsName says whether the rule names hosts rather than addresses.
func (r Rule) IsName() bool { return r.Name != "" }

// ParseRule reads one allow-list entry: example.com, *.example.com,
// 192.0.2.7, 10.0.0.0/8, [2001:db8::1], [2001:db8::/32], each optionally
// followed by :PORT (an IPv6 address or prefix with a port in brackets).
func ParseRule(s string) (Rule, error) {
	r := Rule{Text: s}
	t := strings.TrimSpace(s)
	if t == "" {
		return r, errors.New("an empty entry")
	}
	host, port := t, ""
	switch {
	case strings.HasPrefix(t, "["):
		end := strings.IndexByte(t, ']')
		if end < 0 {
			return r, fmt.Errorf("%q: an unclosed [", s)
		}
		host, port = t[1:end], t[end+1:]
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return r, fmt.Errorf("%q: want :PORT after ]", s)
			}
			port = port[1:]
		}
	case strings.Count(t, ":") > 1:
		// a bare IPv6 address or prefix, no port
	default:
		if h, p, ok := strings.Cut(t, ":"); ok {
			host, port = h, p
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return r, fmt.Errorf("%q: the port %q is not 1-65535", s, port)
		}
		r.Port = n
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return r, fmt.Errorf("%q: not a CIDR prefix: %w", s, err)
		}
		r.Prefix = p.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("%q: an address with a zone", s)
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name, err := normalName(host, true)
	if err != nil {
		return r, err // it names the host
	}
	r.Name = name
	return r, nil
}

// normalName lower-cases a host name and checks it is one: labels of
// letters, digits, '-' and '_', at most 253 bytes; wild allows a leading
// "*." (and nothing else wild).
func normalName(h string, wild bool) (string, error) {
	n := strings.TrimSuffix(strings.ToLower(h), ".")
	rest := n
	if wild && strings.HasPrefix(n, "*.") {
		rest = n[2:]
	}
	if rest == "" || len(n) > 253 {
		return "", fmt.Errorf("%q is not a host name", h)
	}
	for _, label := range strings.Split(rest, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("%q is not a host name", h)
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				if c == '*' {
					return "", fmt.Errorf("%q: a wildcard is only a leading \"*.\"", h)
				}
				return "", fmt.Errorf("%q is not a host name", h)
			}
		}
	}
	if !strings.Contains(rest, ".") && strings.HasPrefix(n, "*.") {
		return "", fmt.Errorf("%q: a wildcard needs a domain under it (*.example.com)", h)
	}
	return n, nil
}

// ParseRules reads an allow-list; the first bad entry is the error.
func ParseRules(list []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(list))
	for _, s := range list {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// matchName says whether rule name (maybe "*.x") covers host name h
// (normalised): "*.x" covers every name under x, not x itself.
func matchName(rule, h string) bool {
	if suffix, ok := strings.CutPrefix(rule, "*"); ok {
		return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
	}
	return rule == h
}

func (r Rule) port(p int) bool { return r.Port == 0 || r.Port == p }
