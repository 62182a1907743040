package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
)

// Egress is the network `allow`: what a sandbox's processes may reach.
// The sandbox has no network interface but loopback; hsbx's agent listens
// there (Addr, the address the proxy variables name) and carries each
// connection over the exec channel to the host, where the allow-list is
// applied and the connection made. A process that ignores the proxy
// variables, a raw connect, UDP and DNS have no route anywhere.
type Egress struct {
	// Allow lists what may be reached: host names (example.com, or
	// *.example.com for any name under it), addresses (192.0.2.7,
	// [2001:db8::1]) or CIDRs (10.0.0.0/8), each with an optional :PORT.
	// A name that resolves (on the host) to a loopback, link-local,
	// private or the host's own address is refused unless an entry names
	// that address. Empty: everything is refused, and logged.
	Allow []string
	// Addr is where the relay listens in the sandbox ("" is
	// 127.0.0.1:3128).
	Addr string
}

func (e *Egress) posture() egress.Posture {
	addr := e.Addr
	if addr == "" {
		addr = egress.DefaultAddr
	}
	return egress.Posture{Addr: addr, Allow: e.Allow}
}

// egressPosture is LabelEgress's value for an allow-listed sandbox: not
// Hermes's "off" nor a digest of Hermes's own proxy settings, so neither
// tool takes the other's sandbox for one of its posture.
func egressPosture(p egress.Posture) string {
	sum := sha256.Sum256([]byte(p.Encode()))
	return "hsbx-allow-" + hex.EncodeToString(sum[:12])
}

// egressSetting is the egress posture as drift compares it: "" for on
// and off (network tells them apart), else the allow-list, sorted.
func (s Spec) egressSetting() string {
	if s.Egress == nil {
		return ""
	}
	p := s.Egress.posture()
	allow := slices.Clone(p.Allow)
	slices.Sort(allow)
	return "allow " + p.Addr + " " + strings.Join(allow, "\x00")
}

// EgressLog is the network log of the key's sandbox on this host (in the
// state dir): what `hsbx netlog` reads.
func (s *Sandbox) EgressLog() string { return EgressLogFile(s.stateDir(), s.key) }

// EgressLogFile is key's network log under stateDir ("" without one):
// one JSON object a line, each a decision of its relay.
func EgressLogFile(stateDir string, key Key) string {
	if stateDir == "" {
		return ""
	}
	return keystate.EgressLogFile(stateDir, key.Hash())
}

// keepRelay makes sure a relay serves container id, an allow-listed
// sandbox: the CLI's holder (which stays while the sandbox runs, so the
// relay outlives this process), or, in the Go package and for a
// per-process sandbox, a channel this handle holds until Close.
func (s *Sandbox) keepRelay(ctx context.Context, id string) {
	if s.spec.Egress == nil || !s.m.c.Channel {
		return
	}
	if s.m.c.Holders.Dir != "" && !s.ephemeral {
		sock := s.m.holderSocket(id, s.execUser())
		if channel.Alive(sock, time.Second) {
			return
		}
		s.m.log.Debug("network = allow: starting the holder that relays", "id", id)
		s.m.c.Holders.Start(channel.HolderSpec{Socket: sock, ID: id, User: s.execUser(), Egress: true, EgressLog: s.EgressLog()})
		return
	}
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.relay != nil && cs.relayID == id && cs.relay.Err() == nil || cs.relayFailed == id {
		return
	}
	if cs.relay != nil {
		_ = cs.relay.Close()
		cs.relay = nil
	}
	conn, err := channel.Open(ctx, channel.Agent{Runtime: s.rt(), ID: id, User: s.execUser(), Binary: s.m.c.Agent, Log: s.m.log})
	if err != nil {
		// Said once for this handle: every command would try again.
		cs.relayFailed = id
		s.m.c.Warn("network = allow: the relay could not start (" + err.Error() + "); nothing leaves the sandbox until it does")
		return
	}
	cs.relay, cs.relayID = conn, id
	policy, ok, err := channel.ReadEgressPolicy(ctx, s.rt(), id)
	if !ok || err != nil {
		_ = conn.Close()
		cs.relay = nil
		if err != nil {
			s.m.c.Warn("network = allow: the relay could not start (" + err.Error() + "); nothing leaves the sandbox until it does")
		}
		return
	}
	go func() {
		if err := channel.ServeEgress(context.Background(), conn, policy, s.EgressLog(), s.m.log); err != nil {
			s.m.log.Info("egress relay ended", "id", id, "error", err)
		}
	}()
}

// relays says whether a holder for this key's sandbox relays egress: its
// network is allow, as asked, or as this host verified it (the marker; a
// sandbox kept under on_drift = warn). The holder reads the policy itself.
func (s *Sandbox) relays() bool {
	if s.spec.Egress != nil {
		return true
	}
	mk, ok := readMarker(s.engineDir())
	return ok && mk.Network == "allow"
}

// closeRelay ends the relay this handle holds (Close).
func (s *Sandbox) closeRelay() {
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.relay != nil {
		_ = cs.relay.Close()
		cs.relay = nil
	}
}

// markedPosture says whether a marker's network ("any", "none", "allow")
// is what spec asks for, so a warm command may skip verifying it: off
// wants none, allow wants allow, on takes any (drift judges the rest).
func markedPosture(spec Spec, network string) bool {
	switch {
	case spec.Network:
		return true
	case spec.Egress != nil:
		return network == "allow"
	}
	return network == "none"
}
