// Package forward forwards ports of a sandbox: connections to a listener on the host, each relayed to a
// TCP port in the sandbox by hsbx's agent (its `forward` mode, through
// the exec channel when it is up, else one plain exec a connection), as
// `kubectl port-forward` does. It needs no network in the sandbox (the
// agent connects to its loopback), so it works with network = off, on
// every engine and on Kubernetes.
//
//	ln, _ := net.Listen("tcp", "127.0.0.1:0")
//	err := forward.Run(ctx, sb, ln, forward.Options{Port: 8080})
package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Options say where a forward goes.
type Options struct {
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

// Run relays every connection ln accepts to o.Port in sandbox sb (brought
// up first, as Exec does) until ctx ends (nil), ln fails, or the sandbox
// stops or goes (ErrSandboxStopped); ln is closed then, and the
// connections open are ended. Connections run at once, each its own.
func Run(ctx context.Context, sb *sandbox.Sandbox, ln net.Listener, o Options) error {
	d := sb.Door()
	if o.Port < 1 || o.Port > 65535 {
		return &sandbox.SpecError{Setting: "port", Msg: fmt.Sprintf("%d is not a TCP port", o.Port)}
	}
	if err := d.Check(o.User); err != nil {
		return err
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(o.Port))
	res, err := d.Ensure(ctx)
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
			running, err := d.Running(ctx, res.ID)
			if err == nil && !running {
				cancel(fmt.Errorf("%w: forwarding to port %d of sandbox %s", ErrSandboxStopped, o.Port, d.Name()))
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
			return fmt.Errorf("forwarding to port %d of sandbox %s: %w", o.Port, d.Name(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			err := one(ctx, d, conn, addr, o)
			if errors.Is(err, runtime.ErrNotRunning) || errors.Is(err, runtime.ErrNotFound) {
				cancel(fmt.Errorf("%w: forwarding to port %d of sandbox %s: %v", ErrSandboxStopped, o.Port, d.Name(), err))
			}
		}()
	}
}

// one relays one connection.
func one(ctx context.Context, d sandbox.Door, conn net.Conn, addr string, o Options) error {
	began := time.Now()
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
	res, err := d.Run(ctx, sandbox.AgentRun{Args: agentapi.Forward{Addr: addr}.Args(), User: o.User, Stdin: pr, Stdout: conn, Stderr: ended})
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("hsbx's agent could not reach %s in sandbox %s (exit %d): %s", addr, d.Name(), res.Code, res.Message())
	}
	if ctx.Err() != nil {
		err = nil // ended with the forward
	}
	d.Record(sandbox.Ran{Kind: "forward", Path: addr, User: o.User, Began: began, Res: res, Err: err})
	if o.OnConn != nil {
		o.OnConn(res.In, res.Out, err)
	}
	return err
}

// writerFunc is a function as an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
