// Package channel runs commands in a sandbox through hsbx's agent instead
// of an engine call each: Conn multiplexes commands over one open channel
// to an agent (the engine's `exec -i` stdio), Open starts that agent
// (installing it with the engine's cp when it is missing), and the holder
// (Serve, Dial) keeps one Conn open for many short-lived hsbx processes
// behind a unix socket.
//
// A command runs at most once: a failure is reported as ErrNotDelivered
// (the command provably never reached the agent; the caller may run it
// another way) or as *BrokenError (it may have run; report, never retry).
package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// ErrNotDelivered says a command never reached the agent.
var ErrNotDelivered = errors.New("the exec channel is not available; the command was not sent")

// BrokenError says the channel broke after the command was sent: it may
// have run, so it must not be run again.
type BrokenError struct {
	Err error
	// AgentSince is when the agent the command went to had answered (zero:
	// unknown, an older holder): a sandbox started after it and before
	// the command was sent had ended that agent already (the sandbox
	// package's rule).
	AgentSince time.Time
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("the exec channel broke while the command was running (it may have run; not retried): %v", e.Err)
}
func (e *BrokenError) Unwrap() error { return e.Err }

// Request is one command.
type Request struct {
	Start  wire.Start
	Stdin  io.Reader // nil: the command gets no input
	Stdout io.Writer // nil: discarded
	Stderr io.Writer
	// StdoutFile and StderrFile, when set, are the files behind Stdout
	// and Stderr. RunVia then passes them to the holder, which writes the
	// output to them itself: one hop fewer for every byte. Both or none.
	StdoutFile, StderrFile *os.File
	// AfterSend, when set, is called by RunVia as soon as it has sent the
	// command, before it waits for the holder (the CLI waits there for its
	// signal handlers; a holder kills the command of a client that goes
	// away, so the command need not wait for them).
	AfterSend func()
}

// Result is how a command ended.
type Result struct {
	Code int
	// Interrupted: the context ended first and the command's processes
	// were killed in the sandbox (Killed of them).
	Interrupted bool
	Killed      int
	// WriteErr says the holder could not write the output to a passed
	// file (and so stopped the command, like Interrupted).
	WriteErr *WriteError
	// Session reports on the shell a session's script ran in.
	Session *wire.SessionNote
	// Failure: the agent could not run what was asked (wire.Exit.Failed);
	// Code is then hsbx's, not the command's.
	Failure Failure
	// The bytes of the command's output delivered, and of its input sent.
	StdoutBytes, StderrBytes, StdinBytes int64
}

// Failure is the agent's word that its own machinery, not the command,
// failed (wire.Exit's Failed, Exhausted, NoShell, NoUser).
type Failure struct {
	Msg       string
	Exhausted bool
	NoShell   bool
	NoUser    bool
}

func failure(e wire.Exit) Failure {
	return Failure{Msg: e.Failed, Exhausted: e.Exhausted, NoShell: e.NoShell, NoUser: e.NoUser}
}

// WriteError is a holder's failed write to a file the client passed.
type WriteError struct {
	Stream     string // "stdout" or "stderr"
	Err        string
	BrokenPipe bool // the reader went away (EPIPE)
}

func (e *WriteError) Error() string { return "write " + e.Stream + ": " + e.Err }

// Unwrap is syscall.EPIPE for a broken pipe.
func (e *WriteError) Unwrap() error {
	if e.BrokenPipe {
		return syscall.EPIPE
	}
	return nil
}

// KillWait bounds how long Run waits for the agent to confirm a kill.
const KillWait = 5 * time.Second

// Liveness bounds. A command goes to an agent that has been silent for
// QuietBefore only after a Ping answered within PingWait; otherwise it is
// not sent (ErrNotDelivered: the plain path, which unpauses a paused
// sandbox, runs it). A frame the agent began and did not finish within
// FrameWait ends the channel: nothing after it could be read.
const (
	QuietBefore = time.Second
	PingWait    = 5 * time.Second
	FrameWait   = 60 * time.Second
)

// AgentDeadAfter is how long an agent waits without a frame from hsbx
// before it takes hsbx for gone, kills what it runs and exits (a Conn
// pings every AgentDeadAfter/6 while it is open). It is what frees a
// sandbox of an agent and its commands when the engine lost the exec
// stream but kept the sandbox (docker's live-restore, a killed engine
// client that left the stream half-open).
const AgentDeadAfter = time.Minute

// Conn is an open channel to an agent. It is safe for concurrent use.
type Conn struct {
	w      *wire.Writer
	closer io.Closer
	build  string
	opened time.Time // when the agent answered (a restart after it ended the agent)

	mu      sync.Mutex
	streams map[uint32]*cstream
	next    uint32
	err     error         // why the channel is down
	done    chan struct{} // closed when the reader stops

	heard   atomic.Int64 // when the agent's last frame arrived (unix nanoseconds)
	pingMu  sync.Mutex
	pingSeq uint64
	pings   map[uint64]chan struct{}
	rd      *wire.Reader
	bounds

	// onStall is called when a command waits and the agent has not
	// answered a ping within pingWait (see OnStall).
	onStall atomic.Pointer[func(context.Context)]
}

// OnStall sets what the Conn does when a command it sent waits on an agent
// that has stopped answering (its pings go unanswered for PingWait), or
// when an idle channel's agent has not answered for AgentDeadAfter/3: a
// sandbox paused after the command was sent, whose frozen agent holds it
// without a word, or one that died under the channel. f may resume the sandbox (Open's unpauses a paused
// one); the command keeps waiting either way, and runs at most once. f is
// called again while the stall lasts, at most once per PingWait, with a
// context that closing the Conn does not cancel: f bounds itself.
func (c *Conn) OnStall(f func(ctx context.Context)) { c.onStall.Store(&f) }

// waiting says whether a command sent on the Conn has not ended yet.
func (c *Conn) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams) > 0
}

type cstream struct {
	out    *wire.Queue
	in     *wire.Flow
	exit   chan wire.Exit
	broken chan struct{}
	// deliver starts the goroutine that writes the output, at the
	// first output frame (the reader's goroutine calls it): a command
	// that prints nothing costs no goroutine and no wake-up at its end.
	deliver   func()
	delivered chan struct{} // closed when that goroutine is done
	started   bool          // set by the reader before it sends exit
	// The bytes delivered (written by deliver, read once delivered is
	// closed) and sent as input.
	outN, errN int64
	inN        atomic.Int64
}

// NewConn opens the protocol on r/w: it sends Hello and waits (up to
// wait) for the peer's. closer is closed by Close.
func NewConn(r io.Reader, w io.Writer, closer io.Closer, wait time.Duration) (*Conn, error) {
	return newConn(r, w, closer, wait, defaultBounds())
}

func newConn(r io.Reader, w io.Writer, closer io.Closer, wait time.Duration, b bounds) (*Conn, error) {
	c := &Conn{w: wire.NewWriter(w), closer: closer, streams: map[uint32]*cstream{}, done: make(chan struct{}),
		pings: map[uint64]chan struct{}{}, bounds: b}
	rd := wire.NewReaderSize(r, connReadSize)
	c.rd = rd
	type helloRes struct {
		h   wire.Hello
		err error
	}
	got := make(chan helloRes, 1)
	go func() {
		f, err := rd.Read()
		var h wire.Hello
		if err == nil && (f.Type != wire.THello || wire.Decode(f, &h) != nil) {
			err = fmt.Errorf("the agent opened with a %s frame, not hello", f.Type)
		}
		got <- helloRes{h, err}
	}()
	if err := c.w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto, DeadAfterMS: b.deadAfter.Milliseconds()}); err != nil {
		return nil, fmt.Errorf("opening the exec channel: %w", err)
	}
	select {
	case res := <-got:
		if res.err != nil {
			return nil, fmt.Errorf("no hello from the agent: %w", res.err)
		}
		if res.h.Proto != wire.Proto {
			return nil, fmt.Errorf("the agent speaks protocol %d, not %d", res.h.Proto, wire.Proto)
		}
		c.build = res.h.Build
	case <-time.After(wait):
		return nil, fmt.Errorf("no hello from the agent within %s", wait)
	}
	c.opened = time.Now()
	c.heard.Store(c.opened.UnixNano())
	go c.read(rd)
	go c.watch()
	return c, nil
}

// Build is the agent's build identity from its hello.
func (c *Conn) Build() string { return c.build }

// Opened is when the agent answered: a restart of the sandbox after it
// ended this agent.
func (c *Conn) Opened() time.Time { return c.opened }

// Done is closed when the channel is down.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the channel is down (nil while it is up).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the channel; the agent kills what still runs and exits.
func (c *Conn) Close() error {
	c.fail(errors.New("closed"))
	if c.closer != nil {
		return c.closer.Close()
	}
	return nil
}

// Abort ends the channel with err as its cause: every command waiting on
// it ends at once with a *BrokenError, and the engine client carrying it
// is stopped (for an exec stream the engine never ends: a sandbox whose
// runtime died under it).
func (c *Conn) Abort(err error) {
	c.fail(err)
	if c.closer != nil {
		go c.closer.Close() // waits for the client up to KillWait, then kills it
	}
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	for _, s := range c.streams {
		s.out.Close()
		s.in.Close()
		close(s.broken)
	}
	close(c.done)
}

// read dispatches the agent's frames until the channel ends. Anything
// out of protocol ends the channel.
func (c *Conn) read(rd *wire.Reader) {
	err := c.dispatch(rd)
	if err == io.EOF {
		err = errors.New("the agent went away")
	}
	c.fail(err)
}

func (c *Conn) dispatch(rd *wire.Reader) error {
	for {
		f, err := rd.Read()
		if err != nil {
			return err
		}
		c.heard.Store(time.Now().UnixNano())
		if f.Type == wire.TPong && f.Stream == 0 {
			c.pong(f.Payload)
			continue
		}
		c.mu.Lock()
		s := c.streams[f.Stream]
		if f.Type == wire.TExit {
			delete(c.streams, f.Stream)
		}
		c.mu.Unlock()
		if s == nil && f.Type == wire.TCredit {
			continue // stdin credit that crossed the command's exit
		}
		if s == nil {
			return fmt.Errorf("agent sent a %s frame for unknown stream %d", f.Type, f.Stream)
		}
		switch f.Type {
		case wire.TStdout, wire.TStderr:
			if err := s.out.Push(f.Type, f.Payload); err != nil {
				return err
			}
			if !s.started {
				s.started = true
				s.deliver()
			}
		case wire.TCredit:
			n, err := wire.ParseCredit(f.Payload)
			if err != nil {
				return err
			}
			if err := s.in.Give(n); err != nil {
				return err
			}
		case wire.TExit:
			var e wire.Exit
			if err := wire.Decode(f, &e); err != nil {
				return err
			}
			s.out.End()
			s.in.Close()
			s.exit <- e
		default:
			return fmt.Errorf("unexpected %s frame from the agent", f.Type)
		}
	}
}
