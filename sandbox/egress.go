package sandbox

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
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
	// Secrets are brokered through the relay: the sandbox sees
	// placeholders, the hosts each is for get the values (Secret).
	Secrets []Secret
	// RootCAs verify the hosts the relay brokers secrets to (nil: the
	// host's roots; the hsbx command honours SSL_CERT_FILE).
	RootCAs *x509.CertPool
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
func egressPosture(p egress.Posture, secrets string) string {
	sum := sha256.Sum256([]byte(p.Encode() + "\x00" + secrets))
	if secrets != "" {
		// a broker: Hermes's credential proxy is another thing again
		return "hsbx-broker-" + hex.EncodeToString(sum[:12])
	}
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

// secretsSetting is the secrets as drift compares them ("" none).
func (s Spec) secretsSetting() string {
	if s.Egress == nil {
		return ""
	}
	return s.Egress.secretsSetting()
}

// egressLog is the network log of the key's sandbox on this host (in the
// state dir): what `hsbx netlog` reads (EgressLogFile).
func (s *Sandbox) egressLog() string { return EgressLogFile(s.stateDir(), s.key) }

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
// per-process sandbox, a channel this handle holds until Close. A relay
// it starts accepts in the sandbox before it returns (awaitRelay): the
// first command after `up` finds the proxy there.
func (s *Sandbox) keepRelay(ctx context.Context, id string) {
	if s.startRelay(ctx, id) {
		s.awaitRelay(ctx, id)
	}
}

// relayWait bounds how long a relay just started may take to listen in
// the sandbox before hsbx says so and goes on.
const relayWait = 15 * time.Second

// awaitRelay waits until the relay accepts connections at its address in
// sandbox id (asked from inside, through the agent), relayWait at most.
func (s *Sandbox) awaitRelay(ctx context.Context, id string) {
	addr := s.spec.Egress.posture().Addr
	deadline := time.Now().Add(relayWait)
	for {
		open, err := channel.Unreachable(ctx, s.agent(ctx, id, s.execUser()), 0, []string{addr})
		if err == nil && len(open) == 1 {
			return
		}
		if errors.Is(err, runtime.ErrNotRunning) || errors.Is(err, runtime.ErrNotFound) || ctx.Err() != nil {
			return // the sandbox's state, not the relay's: the command says
		}
		if time.Now().After(deadline) || sleepCtx(ctx, 100*time.Millisecond) != nil {
			why := "it did not listen"
			if err != nil {
				why = err.Error()
			}
			s.m.c.Warn(fmt.Sprintf("network = allow: the relay was not listening at %s in the sandbox %s after starting (%s); commands that use the proxy may fail until it is", addr, relayWait, why))
			return
		}
	}
}

// startRelay is keepRelay's start: true when it started a relay.
func (s *Sandbox) startRelay(ctx context.Context, id string) bool {
	if s.spec.Egress == nil || !s.m.c.Channel {
		return false
	}
	if s.m.c.Holders.Dir != "" && !s.ephemeral {
		sock := s.m.holderSocket(id, s.execUser())
		if channel.Alive(sock, time.Second) {
			return false
		}
		s.m.log.Debug("network = allow: starting the holder that relays", "id", id)
		s.m.c.Holders.Start(sock, s.holderSpec(id, true))
		return true
	}
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.relay != nil && cs.relayID == id && cs.relay.Err() == nil || cs.relayFailed == id {
		return false
	}
	if cs.relay != nil {
		_ = cs.relay.Close()
		cs.relay = nil
	}
	conn, err := channel.Open(ctx, s.agent(ctx, id, s.execUser()))
	if err != nil {
		// Said once for this handle: every command would try again.
		cs.relayFailed = id
		s.m.c.Warn("network = allow: the relay could not start (" + err.Error() + "); nothing leaves the sandbox until it does")
		return false
	}
	cs.relay, cs.relayID = conn, id
	policy, ok, err := channel.ReadEgressPolicy(ctx, s.rt(), id)
	if !ok || err != nil {
		_ = conn.Close()
		cs.relay = nil
		if err != nil {
			s.m.c.Warn("network = allow: the relay could not start (" + err.Error() + "); nothing leaves the sandbox until it does")
		}
		return false
	}
	go func() {
		host := channel.EgressHost{StateDir: s.keyStateDir(), Values: s.secretValues(), RootCAs: s.spec.Egress.RootCAs, Declared: s.spec.Egress.declared()}
		if err := channel.ServeEgress(context.Background(), conn, policy, s.egressLog(), host, s.m.log); err != nil {
			s.m.log.Info("egress relay ended", "id", id, "error", err)
		}
	}()
	return true
}

// holderSpec is what a holder for container id is told: whether it
// relays, where its network log and the sandbox's CA are, and where the
// secrets' values are on this host.
func (s *Sandbox) holderSpec(id string, relays bool) channel.HoldSpec {
	h := channel.HoldSpec{ID: id, User: s.execUser(), Engine: s.rt().Binary(), Egress: relays, EgressLog: s.egressLog()}
	if relays {
		h.EgressState = s.keyStateDir()
		if s.spec.Egress != nil {
			h.Secrets = s.spec.Egress.sources()
		}
	}
	return h
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

// offlineWait is how long a new sandbox on a policy-kept network may take
// to lose its reach (the cluster applies a NetworkPolicy a moment after
// the Pod starts) before hsbx takes it that nothing enforces the policy.
const offlineWait = 10 * time.Second

// proveOffline proves that id, just made without a network on a runtime
// that keeps it off by a policy (runtime.PolicyNetwork: a NetworkPolicy),
// cannot reach what it could without one, from inside and before anything
// but hsbx has run in it. When it can, or when that cannot be tested, the
// sandbox is removed (it is this call's own: the id pins it) and the error
// says why: a sandbox that looks air-gapped but is not is never handed
// out.
func (s *Sandbox) proveOffline(ctx context.Context, id, name string) error {
	pn, ok := s.rt().(runtime.PolicyNetwork)
	if !ok {
		return nil
	}
	targets, err := pn.ReachTargets(ctx, id)
	var open []string
	if err == nil {
		open, err = channel.Unreachable(ctx, s.agent(ctx, id, s.execUser()), offlineWait, targets)
	}
	if err == nil && len(open) == 0 {
		s.m.log.Debug("network policy enforced", "id", id, "unreachable", targets)
		return nil
	}
	ue := &NetworkUnenforcedError{Name: name, Reached: open, Err: err}
	if rerr := s.rt().Remove(context.WithoutCancel(ctx), true, id); rerr != nil {
		ue.RemoveErr = rerr
	} else if cs, ierr := s.rt().Inspect(context.WithoutCancel(ctx), id); ierr == nil && len(cs) > 0 && cs[0].State != runtime.StateRemoving {
		ue.RemoveErr = fmt.Errorf("it is still there (%s) after its removal", cs[0].State)
	}
	return ue
}

// NetworkUnenforcedError is a sandbox asked for without a network (off or
// allow) on a cluster that did not keep it off: from inside, it could
// still connect to Reached (its node's kubelet) after the NetworkPolicy
// hsbx made for it had had time to apply, or the test could not be run
// (Err). The sandbox was removed (RemoveErr says when that failed). It is
// ErrIsolation.
type NetworkUnenforcedError struct {
	Name      string
	Reached   []string
	Err       error
	RemoveErr error
}

func (e *NetworkUnenforcedError) Error() string {
	var msg string
	if e.Err != nil {
		msg = fmt.Sprintf("network: could not prove that sandbox %s is off the network (%v); it was not kept", e.Name, e.Err)
	} else {
		msg = fmt.Sprintf("network: the cluster does not enforce the NetworkPolicy that keeps sandbox %s off the network: from inside it still reached %s after %s; it was not kept", e.Name, strings.Join(e.Reached, ", "), offlineWait)
	}
	if e.RemoveErr != nil {
		msg += fmt.Sprintf(" (and removing it failed: %v)", e.RemoveErr)
	}
	return msg
}

// Unwrap makes it ErrIsolation, and the test's own error.
func (e *NetworkUnenforcedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrIsolation, e.Err}
	}
	return []error{ErrIsolation}
}

// Hint says how to go on.
func (e *NetworkUnenforcedError) Hint() string {
	if e.Err != nil {
		return "the test runs hsbx's agent in the sandbox (the exec channel's): check that the image has sh or tar, or set network = on"
	}
	return "network = off and allow need a CNI that enforces NetworkPolicy (Calico, Cilium, ...) in the sandbox's namespace; install one, or set network = on"
}
