package channel

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// The egress relay's host half: the agent accepts the sandbox's proxy
// connections on its loopback (wire.EgressOpListen) and announces each;
// the relay claims each as a stream of its own (wire.EgressOpConn) and
// hands it to the egress proxy, which applies the sandbox's allow-list
// here, on the host, and makes the connection. Nothing leaves the sandbox
// any other way: it has no network interface but loopback.

// relayMax bounds the connections a relay serves at once (the agent's
// own bound is the same).
const relayMax = 512

// RelaySpec is what Relay serves.
type RelaySpec struct {
	Addr  string // the loopback address inside the sandbox
	Proxy *egress.Proxy
	Log   *slog.Logger
	// Retry is how long to wait before listening again when another
	// channel's agent has the address (0: 2s).
	Retry time.Duration
}

// Relay serves the sandbox's proxy connections until ctx ends or the
// channel does. An address in use (another hsbx's channel relays) is
// tried again every Retry, so the relay passes from a process that ends
// to one that stays.
func Relay(ctx context.Context, c *Conn, rs RelaySpec) error {
	log := rs.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := rs.Retry
	if retry <= 0 {
		retry = 2 * time.Second
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// At most relayMax claimed at once: announcements past it (only a
	// forged stream could send them; the agent keeps to its own bound)
	// are dropped, and the agent closes what nobody claims.
	slots := make(chan struct{}, relayMax)
	for {
		stderr := &proc.TailBuffer{Max: 4096}
		lines := &lineWriter{fn: func(id string) {
			select {
			case slots <- struct{}{}:
			default:
				log.Info("egress relay: too many connections at once; one dropped", "max", relayMax)
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer func() { <-slots }(); claim(ctx, c, rs.Proxy, id, log) }()
		}}
		res, err := c.Run(ctx, Request{Start: wire.Start{Op: wire.EgressOpListen, Script: rs.Addr}, Stdout: lines, Stderr: stderr})
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("egress relay: %w", err)
		case res.Code == wire.EgressInUse:
			log.Debug("egress relay: the address is taken (another channel relays); trying again", "addr", rs.Addr)
		default:
			return fmt.Errorf("egress relay: the agent did not listen on %s (exit %d): %s", rs.Addr, res.Code, strings.TrimSpace(string(stderr.Bytes())+" "+res.Failure.Msg))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// claim relays announced connection id through the proxy.
func claim(ctx context.Context, c *Conn, p *egress.Proxy, id string, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fromSandbox, toHost := io.Pipe()
	toSandbox, fromHost := io.Pipe()
	rc := &relayConn{r: fromSandbox, w: fromHost, cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := c.Run(ctx, Request{Start: wire.Start{Op: wire.EgressOpConn, Script: id},
			Stdin: toSandbox, Stdout: toHost, Stderr: eofWriter{toHost}})
		if err != nil || res.Code != 0 && !res.Interrupted {
			log.Debug("egress relay: a connection's stream ended", "id", id, "code", res.Code, "error", err)
		}
		_ = toHost.Close()
		_ = toSandbox.Close()
	}()
	p.Serve(ctx, rc)
	<-done
}

// relayConn is a claimed connection as the proxy sees it.
type relayConn struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	cancel context.CancelFunc
	once   sync.Once
}

func (r *relayConn) Read(p []byte) (int, error)  { return r.r.Read(p) }
func (r *relayConn) Write(p []byte) (int, error) { return r.w.Write(p) }
func (r *relayConn) CloseWrite() error           { return r.w.Close() }

// Close ends both directions; a stream still running (the sandbox's side
// still open) is ended in the sandbox.
func (r *relayConn) Close() error {
	r.once.Do(func() {
		_ = r.w.Close()
		_ = r.r.Close()
		time.AfterFunc(wire.EgressClaimWait, r.cancel)
	})
	return nil
}

// eofWriter takes the conn stream's stderr: wire.EgressEOF (or anything
// else, which only an agent that failed would send) ends the sandbox's
// data.
type eofWriter struct{ w *io.PipeWriter }

func (e eofWriter) Write(p []byte) (int, error) {
	_ = e.w.Close()
	return len(p), nil
}

// lineWriter calls fn for each line written.
type lineWriter struct {
	buf []byte
	fn  func(string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		if line := string(l.buf[:i]); line != "" {
			l.fn(line)
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64 {
		l.buf = l.buf[:0] // not an id: the agent is broken or not ours
	}
	return len(p), nil
}

// EgressPolicy is container id's egress policy as the engine reports it
// (its egress.Label, never what a caller believes): ok is false for a
// container without that label, which has no relay to serve.
type EgressPolicy struct {
	Posture    egress.Posture
	Name, Task string
	// Secrets are its brokered secrets (egress.SecretsLabel), Nonce its
	// creation's nonce, which names its CA's files.
	Secrets []egress.Secret
	Nonce   string
}

// EgressHost is what only the relaying host has: the key's state
// directory (the sandbox's CA is kept there), the secrets' values, and
// the roots the broker verifies hosts with (nil: the host's).
type EgressHost struct {
	StateDir string
	Values   egress.Values
	RootCAs  *x509.CertPool
	// Declared are the hosts each secret may go to by the relaying
	// process's configuration (egress.Broker.Declared; nil: the label's).
	Declared map[string][]string
}

// ReadEgressPolicy inspects container id for its egress policy.
func ReadEgressPolicy(ctx context.Context, rt runtime.Runtime, id string) (EgressPolicy, bool, error) {
	cs, err := rt.Inspect(ctx, id)
	if err != nil {
		return EgressPolicy{}, false, fmt.Errorf("egress relay: reading the sandbox's policy: %w", err)
	}
	if len(cs) != 1 {
		return EgressPolicy{}, false, errors.New("egress relay: the sandbox is gone")
	}
	v := cs[0].Labels[egress.Label]
	if v == "" { // absent, or blanked in a snapshot's image the sandbox was made from
		return EgressPolicy{}, false, nil
	}
	p, err := egress.ParsePosture(v)
	if err != nil {
		return EgressPolicy{}, true, fmt.Errorf("egress relay: %w", err)
	}
	policy := EgressPolicy{Posture: p, Name: cs[0].Name, Task: cs[0].Labels[egress.TaskLabel], Nonce: cs[0].Labels[egress.NonceLabel]}
	if v := cs[0].Labels[egress.SecretsLabel]; v != "" {
		if policy.Secrets, err = egress.ParseSecrets(v); err != nil {
			return EgressPolicy{}, true, fmt.Errorf("egress relay: %w", err)
		}
	}
	return policy, true, nil
}

// ServeEgress serves policy's relay over conn until conn or ctx ends,
// writing its decisions to the network log at logPath ("" none).
func ServeEgress(ctx context.Context, conn *Conn, policy EgressPolicy, logPath string, host EgressHost, log *slog.Logger) error {
	var nlog *egress.Log
	if logPath != "" {
		if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err == nil {
			if nlog, err = egress.OpenLog(logPath); err != nil {
				log.Info("egress relay: no network log", "error", err)
			}
		}
	}
	if nlog != nil {
		defer nlog.Close()
	}
	px, err := NewProxy(policy.Posture, nlog, policy.Name, policy.Task, log)
	if err != nil {
		return err
	}
	if len(policy.Secrets) > 0 {
		b := &egress.Broker{Secrets: policy.Secrets, Values: host.Values, Declared: host.Declared}
		if b.Values == nil {
			b.Values = func(name string) (string, error) { return "", fmt.Errorf("no source for secret %s here", name) }
		}
		if b.CA, err = egress.ReadCA(host.StateDir, policy.Nonce); err != nil {
			// Its hosts are refused (never passed through with the
			// placeholder), and the log says why.
			log.Info("egress relay: the sandbox's secrets cannot be sent from here", "error", err)
			b.CA = nil
		}
		px.Broker, px.RootCAs = b, host.RootCAs
		rules, err := egress.ParseRules(append(slices.Clone(policy.Posture.Allow), b.HostRules()...))
		if err != nil {
			return err
		}
		px.Policy.Rules = rules
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-conn.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return Relay(ctx, conn, RelaySpec{Addr: policy.Posture.Addr, Proxy: px, Log: log})
}

// NewProxy is the proxy for posture p, logging to log (nil: nowhere) with
// the sandbox's name and task in each record.
func NewProxy(p egress.Posture, log *egress.Log, name, task string, slogger *slog.Logger) (*egress.Proxy, error) {
	rules, err := egress.ParseRules(p.Allow)
	if err != nil {
		return nil, err
	}
	px := &egress.Proxy{Policy: &egress.Policy{Rules: rules}}
	px.Log = func(r egress.Record) {
		r.Sandbox, r.Task = name, task
		if slogger != nil {
			slogger.Debug("egress", "method", r.Method, "host", r.Host, "port", r.Port, "allowed", r.Allowed, "rule", r.Rule, "reason", r.Reason)
		}
		if log != nil {
			_ = log.Write(r)
		}
	}
	return px, nil
}
