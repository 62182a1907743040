package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// Port forwards: connections to a listener on the host, each relayed to a
// TCP port in the sandbox by hsbx's agent (its `forward` mode, through
// the exec channel when it is up, else one plain exec a connection), as
// `kubectl port-forward` does. It needs no network in the sandbox (the
// agent connects to its loopback), so it works with network = off, on
// every engine and on Kubernetes.

// ForwardOptions say where a forward goes.
type ForwardOptions struct {
	// Port is the TCP port in the sandbox.
	Port int
	// Host is the address in the sandbox to connect to (default
	// 127.0.0.1).
	Host string
	// User connects as this sandbox user (Command.User's forms).
	User string
	// OnConn, when set, is told of each connection when it ends: its
	// bytes each way and its error (nil: it ended cleanly).
	OnConn func(in, out int64, err error)
}

// ErrSandboxStopped ends a forward whose sandbox stopped or went.
var ErrSandboxStopped = errors.New("the sandbox stopped")

// forwardCheck is how often a forward asks the engine whether its sandbox
// still runs (one inspect).
const forwardCheck = 5 * time.Second

// Forward relays every connection ln accepts to o.Port in the sandbox
// (brought up first, as Exec does) until ctx ends (nil), ln fails, or the
// sandbox stops or goes (ErrSandboxStopped); ln is closed then, and the
// connections open are ended. Connections run at once, each its own.
func (s *Sandbox) Forward(ctx context.Context, ln net.Listener, o ForwardOptions) error {
	if o.Port < 1 || o.Port > 65535 {
		return &SpecError{Setting: "port", Msg: fmt.Sprintf("%d is not a TCP port", o.Port)}
	}
	if err := validUser(o.User); err != nil {
		return err
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(o.Port))
	res, err := s.Ensure(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() { // the sandbox stopping ends the forward
		t := time.NewTicker(forwardCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, err := s.inspectOwn(ctx, res.ID)
			if err == nil && (cur == nil || cur.State != runtime.StateRunning) {
				cancel(fmt.Errorf("%w: forwarding to port %d of sandbox %s", ErrSandboxStopped, o.Port, s.name))
				return
			}
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				if errors.Is(cause, context.Canceled) && !errors.Is(cause, ErrSandboxStopped) {
					return nil
				}
				return cause
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("forwarding to port %d of sandbox %s: %w", o.Port, s.name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			err := s.forwardOne(ctx, conn, addr, o)
			if errors.Is(err, runtime.ErrNotRunning) || errors.Is(err, runtime.ErrNotFound) {
				cancel(fmt.Errorf("%w: forwarding to port %d of sandbox %s: %v", ErrSandboxStopped, o.Port, s.name, err))
			}
		}()
	}
}

// forwardOne relays one connection.
func (s *Sandbox) forwardOne(ctx context.Context, conn net.Conn, addr string, o ForwardOptions) error {
	began := time.Now()
	st := &execStats{in: -1, out: -1, err: -1}
	// The connection's bytes go to the mode's input through a pipe that
	// ends when the agent says anything on stderr (its end, or why it
	// could not connect): an engine client (kubectl's, the plain path)
	// does not end while its input is open, and the client's side may
	// send nothing more until it sees the end.
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, conn)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	ended := writerFunc(func(p []byte) (int, error) {
		pw.Close()
		return len(p), nil
	})
	code, errb, err := s.agentRun(ctx, agentReq{args: []string{"forward", addr}, user: o.User, stdin: pr, stdout: conn, stderr: ended}, st)
	if err == nil && code != 0 {
		err = fmt.Errorf("hsbx's agent could not reach %s in sandbox %s (exit %d): %s", addr, s.name, code, trimAgent(errb.Bytes()))
	}
	if ctx.Err() != nil {
		err = nil // ended with the forward
	}
	if !s.m.c.NoRecord {
		r := s.newRecord(began, code, err)
		r.Kind, r.Path, r.User = "forward", addr, o.User
		r.Via, r.BytesIn, r.BytesOut, r.BytesErr = st.via, st.in, st.out, st.err
		s.appendRecord(r)
	}
	if o.OnConn != nil {
		o.OnConn(st.in, st.out, err)
	}
	return err
}

// writerFunc is a function as an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
