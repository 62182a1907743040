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
	"encoding/binary"
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

// bounds are a Conn's liveness bounds: QuietBefore, PingWait, FrameWait,
// AgentDeadAfter (tests use less).
type bounds struct{ quiet, pingWait, frameMax, deadAfter time.Duration }

// defaultBounds are the bounds of every Conn outside tests.
func defaultBounds() bounds { return bounds{QuietBefore, PingWait, FrameWait, AgentDeadAfter} }

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

// watch ends the channel when the agent stops half-way through a frame
// for longer than frameMax: the reader would wait forever, and every
// command behind it with it. It also keeps the agent's deadAfter promise:
// a ping every deadAfter/6, written aside (to an agent that reads nothing
// a write can block) and never more than one at a time.
func (c *Conn) watch() {
	tick := time.NewTicker(min(c.frameMax/4+time.Millisecond, c.deadAfter/12+time.Millisecond, time.Second))
	defer tick.Stop()
	var writing, checking atomic.Bool
	last := time.Now()
	var idleChecked time.Time // an idle channel's last stall check
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
			if c.deadAfter > 0 && time.Since(last) >= c.deadAfter/6 && !writing.Swap(true) {
				last = time.Now()
				go func() {
					defer writing.Store(false)
					if err := c.w.Write(wire.TPing, 0, make([]byte, 8)); err != nil {
						c.fail(err)
					}
				}()
			}
			// A command waits on a quiet agent, or an idle channel's
			// pings have gone unanswered twice (its sandbox may have died
			// with nothing running: a forward's listener, a holder).
			if f := c.onStall.Load(); f != nil && !checking.Load() {
				quiet := c.silent()
				waiting := quiet > c.quiet && c.waiting()
				// Idle: at most once every deadAfter/3 (a paused
				// sandbox's agent stays silent, and stays paused).
				idle := !waiting && c.deadAfter > 0 && quiet > c.deadAfter/3 && time.Since(idleChecked) > c.deadAfter/3
				if waiting || idle {
					if idle {
						idleChecked = time.Now()
					}
					checking.Store(true)
					go c.checkStall(*f, &checking)
				}
			}
			if t := c.rd.PartialSince(); !t.IsZero() && time.Since(t) > c.frameMax {
				c.fail(fmt.Errorf("the agent began a frame and did not finish it within %s", c.frameMax))
				if c.closer != nil {
					_ = c.closer.Close() // unblocks the reader
				}
				return
			}
		}
	}
}

// checkStall pings a quiet agent while a command waits on it, and calls
// onStall when it does not answer within pingWait.
func (c *Conn) checkStall(onStall func(context.Context), checking *atomic.Bool) {
	defer checking.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.Ping(ctx, c.pingWait); err != nil && c.Err() == nil && ctx.Err() == nil {
		// Not cancelled when the Conn closes meanwhile: an engine client
		// killed half-way through an unpause can leave the engine's record
		// and the container apart (podman 4.3: "paused" in its database,
		// thawed in runc, and then neither unpaused nor removable).
		onStall(context.WithoutCancel(ctx))
	}
}

// Ping checks that the agent answers within wait.
func (c *Conn) Ping(ctx context.Context, wait time.Duration) error {
	c.pingMu.Lock()
	c.pingSeq++
	seq := c.pingSeq
	ch := make(chan struct{})
	c.pings[seq] = ch
	c.pingMu.Unlock()
	defer func() {
		c.pingMu.Lock()
		delete(c.pings, seq)
		c.pingMu.Unlock()
	}()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	// Written aside: to an agent that reads nothing, even a write can
	// block once the pipes are full, and the bound must hold.
	go func() {
		if err := c.w.Write(wire.TPing, 0, b[:]); err != nil {
			c.fail(err)
		}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return fmt.Errorf("the agent did not answer within %s (is the sandbox paused or frozen?)", wait)
	}
}

// pong matches an answer to its Ping.
func (c *Conn) pong(p []byte) {
	if len(p) != 8 {
		return
	}
	c.pingMu.Lock()
	defer c.pingMu.Unlock()
	if ch, ok := c.pings[binary.BigEndian.Uint64(p)]; ok {
		close(ch)
		delete(c.pings, binary.BigEndian.Uint64(p))
	}
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

// silent is how long the agent has sent nothing.
func (c *Conn) silent() time.Duration { return time.Since(time.Unix(0, c.heard.Load())) }

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

// Run runs one command and waits for it. When ctx ends first, the
// command's processes are killed in the sandbox and Result.Interrupted is
// set. Errors: ErrNotDelivered (never sent) or *BrokenError (may have run).
func (c *Conn) Run(ctx context.Context, req Request) (Result, error) {
	if time.Since(time.Unix(0, c.heard.Load())) > c.quiet {
		// Quiet for a while: a paused or frozen sandbox would take the
		// command and never answer. Ask first.
		if err := c.Ping(ctx, c.pingWait); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
		}
	}
	s := &cstream{out: wire.NewQueue(wire.Window), in: wire.NewFlow(wire.InputWindow), exit: make(chan wire.Exit, 1), broken: make(chan struct{}),
		delivered: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	c.next++
	id := c.next
	stdout, stderr := req.Stdout, req.Stderr
	s.deliver = func() {
		go func() { defer close(s.delivered); c.deliver(id, s, stdout, stderr) }()
	}
	c.streams[id] = s
	c.mu.Unlock()
	req.Start.Stdin = req.Stdin != nil
	if err := c.w.WriteJSON(wire.TStart, id, req.Start); err != nil {
		// One write holds the whole frame: a failed one never started
		// anything (a cut frame is a protocol error to the agent).
		c.fail(err)
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	if req.Stdin != nil {
		go c.sendStdin(id, s, req.Stdin)
	}

	var res Result
	select {
	case e := <-s.exit:
		res.Code, res.Session, res.Failure = e.Code, e.Session, failure(e)
		if e.Error != "" {
			return res, &BrokenError{Err: errors.New(e.Error)}
		}
	case <-s.broken:
		return res, &BrokenError{Err: c.Err()}
	case <-ctx.Done():
		res.Interrupted = true
		_ = c.w.Write(wire.TSignal, id, []byte{byte(syscall.SIGKILL)})
		select {
		case e := <-s.exit:
			res.Code, res.Killed, res.Session, res.Failure = e.Code, e.Killed, e.Session, failure(e)
		case <-s.broken:
			return res, &BrokenError{Err: c.Err()}
		case <-time.After(KillWait):
			return res, &BrokenError{Err: fmt.Errorf("the agent did not confirm the kill within %s", KillWait)}
		}
	}
	if s.started { // the exit came after every output frame, and after this was set
		<-s.delivered
		res.StdoutBytes, res.StderrBytes = s.outN, s.errN
	}
	res.StdinBytes = s.inN.Load()
	return res, nil
}

// deliver writes the command's output in order and returns credit.
func (c *Conn) deliver(id uint32, s *cstream, stdout, stderr io.Writer) {
	var credits wire.Credits
	for {
		t, p, ok := s.out.PopRun()
		if !ok {
			return
		}
		w := stdout
		if t == wire.TStderr {
			w = stderr
			s.errN += int64(len(p))
		} else {
			s.outN += int64(len(p))
		}
		if w != nil {
			_, _ = w.Write(p) // a failing writer is the caller's to notice
		}
		if n := credits.Consumed(len(p)); n > 0 {
			_ = c.w.Write(wire.TCredit, id, wire.Credit(n))
		}
	}
}

// sendStdin streams r to the command within the window, then EOF.
func (c *Conn) sendStdin(id uint32, s *cstream, r io.Reader) {
	buf := make([]byte, wire.Chunk)
	for {
		n, err := r.Read(buf)
		for off := 0; off < n; {
			k := s.in.Take(n - off)
			if k == 0 {
				return // the command ended
			}
			if c.w.Write(wire.TStdin, id, buf[off:off+k]) != nil {
				return
			}
			s.inN.Add(int64(k))
			off += k
		}
		if err != nil {
			_ = c.w.Write(wire.TStdinEOF, id, nil)
			return
		}
	}
}

// connReadSize is how much a Conn reads of the engine client's output at
// once: several whole frames, so the client, writing into a pipe that is
// emptied in big pieces, blocks less (measured on docker, 300 MB: CPU of
// dockerd, its client and the holder 10–20 % lower than at 64 KiB; 1 MiB
// did no better).
const connReadSize = 256 << 10
