package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// The holder keeps one Conn open for many hsbx processes, the pattern of
// ssh's ControlMaster: it listens on a unix socket in a directory only its
// user can enter (on Windows a named pipe only its user can open: see
// transport_windows.go), checks each peer's user, and runs one command per
// connection. The client side is RunVia.

// Holder serves one Conn on a listener.
type Holder struct {
	Conn     *Conn
	Listener net.Listener // Listen's
	// Idle ends the holder after this long without a command.
	Idle time.Duration
	Log  *slog.Logger
	// Path is the socket's file: when it is removed or replaced, nobody
	// can reach this holder any more and it ends (a new one takes over).
	Path string

	active   atomic.Int64
	lastUsed atomic.Int64 // unix nanoseconds
	stop     chan End
	// closing is set once the holder has decided to end (a shutdown asked
	// for, idle, the channel down): from then on it takes no command, so
	// none it accepted is cut by its ending. mu orders it with a command's
	// start (active).
	mu      sync.Mutex
	closing bool
	// ended is closed once Serve has closed the Conn (its agent's exec is
	// over, or was killed past KillWait): a client that asked for the
	// shutdown is answered (hung up on) then, not before.
	ended chan struct{}
}

// EndKind is why a holder ended.
type EndKind int

// The reasons a holder ends.
const (
	EndSignalled    EndKind = iota + 1 // its context ended (a signal)
	EndChannelDown                     // the agent's channel ended (End.Err says why)
	EndAsked                           // a client asked it to shut down (stop, down)
	EndIdle                            // no command for its idle time
	EndSocketGone                      // its socket file was removed or replaced
	EndAcceptFailed                    // accepting on its socket failed (End.Err)
)

// End is why a holder ended, with the error behind it where there is one.
type End struct {
	Kind EndKind
	Err  error
	Idle time.Duration // EndIdle: the idle time
}

func (e End) String() string {
	switch e.Kind {
	case EndSignalled:
		return "signalled"
	case EndChannelDown:
		return fmt.Sprintf("the agent's channel ended: %v", e.Err)
	case EndAsked:
		return "asked to shut down"
	case EndIdle:
		return fmt.Sprintf("idle for %s", e.Idle)
	case EndSocketGone:
		return "its socket was removed or replaced"
	case EndAcceptFailed:
		return fmt.Sprintf("accepting on the socket failed: %v", e.Err)
	}
	return "ended"
}

// Orderly says the holder ended as holders are meant to (idle, asked, its
// socket taken over), leaving nothing a user would look into: its log can
// go.
func (e End) Orderly() bool {
	return e.Kind == EndIdle || e.Kind == EndAsked || e.Kind == EndSocketGone
}

// Serve runs until the holder is idle, the agent's channel goes down, a
// client asks for shutdown or ctx ends; it returns why. It closes the
// listener (removing the socket) and the Conn (ending the agent).
func (h *Holder) Serve(ctx context.Context) End {
	if h.Log == nil {
		h.Log = slog.New(slog.DiscardHandler)
	}
	h.stop = make(chan End, 1)
	h.ended = make(chan struct{})
	h.lastUsed.Store(time.Now().UnixNano())
	var sock os.FileInfo
	if h.Path != "" {
		sock, _ = os.Stat(h.Path)
	}
	go h.accept(ctx)
	tick := time.NewTicker(min(h.Idle/4+time.Millisecond, time.Second))
	defer tick.Stop()
	var why End
loop:
	for {
		select {
		case <-ctx.Done():
			why = End{Kind: EndSignalled}
			break loop
		case <-h.Conn.Done():
			why = End{Kind: EndChannelDown, Err: h.Conn.Err()}
			break loop
		case why = <-h.stop:
			break loop
		case <-tick.C:
			h.mu.Lock()
			idle := h.active.Load() == 0 && time.Since(time.Unix(0, h.lastUsed.Load())) >= h.Idle
			h.closing = h.closing || idle
			h.mu.Unlock()
			if idle {
				why = End{Kind: EndIdle, Idle: h.Idle}
				break loop
			}
			if sock != nil {
				if now, err := os.Stat(h.Path); err != nil || !os.SameFile(sock, now) {
					why = End{Kind: EndSocketGone}
					keepSocketFile(h.Listener) // not ours any more
					break loop
				}
			}
		}
	}
	h.endCommands()
	_ = h.Listener.Close()
	_ = h.Conn.Close()
	close(h.ended)
	return why
}

// endCommands sets closing: no command is taken from now on.
func (h *Holder) endCommands() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
}

// shutdown ends the holder: at once for new commands (closing), then
// through Serve's loop.
func (h *Holder) shutdown(why End) {
	h.endCommands()
	select {
	case h.stop <- why:
	default:
	}
}

func (h *Holder) accept(ctx context.Context) {
	for {
		nc, err := h.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				h.shutdown(End{Kind: EndAcceptFailed, Err: err})
			}
			return
		}
		go h.handle(ctx, nc)
	}
}

// handle runs one client's command.
func (h *Holder) handle(ctx context.Context, nc net.Conn) {
	defer nc.Close()
	if err := checkPeer(nc); err != nil {
		h.Log.Warn("refused a connection", "error", err)
		return
	}
	w := wire.NewWriter(nc)
	h.mu.Lock()
	down := h.Conn.Err() != nil || h.closing
	h.mu.Unlock()
	if w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto, Build: h.Conn.Build(), Down: down, AgentSinceMS: unixMilli(h.Conn.Opened())}) != nil || down {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	// The client's first bytes are its Start frame, with the files it
	// passes (if any) riding on them: read them with their ancillary data.
	first, passed, err := readFirst(nc)
	defer func() {
		for _, f := range passed {
			f.Close()
		}
	}()
	if err != nil {
		if !errors.Is(err, io.EOF) { // EOF: a client that only asked whether this holder serves (Alive)
			h.Log.Warn("a client's first frame could not be read; its command was not run", "error", err)
		}
		return
	}
	// Stdin frames come from a pool and go back to it once copied on
	// (clientFrames).
	r := wire.NewReader(io.MultiReader(bytes.NewReader(first), nc)).PoolPayloads()
	f, err := r.Read()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			h.Log.Warn("a client's start frame is malformed; its command was not run", "error", err)
		}
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	switch f.Type {
	case wire.TShutdown:
		h.shutdown(End{Kind: EndAsked})
		// Said at once (it takes no command from now on), then the
		// hang-up once the channel has ended.
		_ = w.Write(wire.TShutdown, 0, nil)
		if h.ended != nil { // Serve runs (a test may call handle alone)
			select {
			case <-h.ended:
			case <-time.After(KillWait + time.Second):
			}
		}
		return
	case wire.TStart:
	default:
		h.Log.Warn("a client sent a frame that is not a command; closed", "type", f.Type.String())
		return
	}
	var st wire.Start
	if err := wire.Decode(f, &st); err != nil {
		h.Log.Warn("a client's start frame is malformed; its command was not run", "error", err)
		return
	}
	h.mu.Lock()
	if h.closing {
		// Ending since the hello: the command was not sent anywhere, and
		// the client runs it another way (not an error, never twice).
		h.mu.Unlock()
		_ = w.WriteJSON(wire.TExit, 0, wire.Exit{Code: -1, NotDelivered: true, Error: "the holder is ending"})
		return
	}
	h.active.Add(1)
	h.mu.Unlock()
	defer func() {
		h.lastUsed.Store(time.Now().UnixNano())
		h.active.Add(-1)
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := Request{Start: st, Stdout: frameWriter{w, wire.TStdout}, Stderr: frameWriter{w, wire.TStderr}}
	var failed fileFailure
	if files, ok := outputFiles(st.FDs, passed); ok {
		// The client's own stdout and stderr: written here, not relayed.
		// A failed write (its reader went away) stops the command.
		for stream, f := range files {
			fw := &fileWriter{f: f, stream: stream, failed: &failed, stop: cancel}
			if stream == "stdout" {
				req.Stdout = fw
			} else {
				req.Stderr = fw
			}
		}
	}
	req.Start.FDs = nil
	// The client's frames: input, a kill, or its going away (which kills
	// the command: nobody is left to read its output). While there is
	// input, they are read by the Conn's goroutine that sends it on (no
	// hand-over between goroutines for every chunk); then by watch.
	in := &clientFrames{r: r, cancel: cancel}
	if st.Stdin {
		req.Stdin = in
	} else {
		go in.watch()
	}
	res, err := h.Conn.Run(runCtx, req)
	exit := wire.Exit{Code: res.Code, Killed: res.Killed, Session: res.Session,
		Failed: res.Failure.Msg, Exhausted: res.Failure.Exhausted, NoShell: res.Failure.NoShell,
		NoUser: res.Failure.NoUser, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, StdinBytes: res.StdinBytes}
	var be *BrokenError
	switch {
	case errors.Is(err, ErrNotDelivered):
		exit.NotDelivered = true
		exit.Error = err.Error()
	case errors.As(err, &be):
		exit.Error = be.Err.Error()
	case err != nil:
		exit.Error = err.Error()
	}
	if we := failed.get(); we != nil {
		exit.WriteFailed, exit.WriteError, exit.BrokenPipe = we.Stream, we.Err, we.BrokenPipe
	}
	_ = w.WriteJSON(wire.TExit, 0, exit)
}

// clientFrames reads what a client sends after its Start frame. As an
// io.Reader it is the command's stdin: the data of its Stdin frames, EOF
// at StdinEOF or a Signal (which also stops the command), an error when
// the client goes away; from then on (or from the start, for a command
// without input) watch reads on for a Signal or the client going away.
type clientFrames struct {
	r      *wire.Reader
	cancel context.CancelFunc
	frame  []byte // the last Stdin frame's payload (released once read)
	rest   []byte // of it, not read yet
	ended  bool
}

func (c *clientFrames) Read(p []byte) (int, error) {
	for len(c.rest) == 0 {
		if c.frame != nil {
			wire.Release(c.frame)
			c.frame = nil
		}
		if c.ended {
			return 0, io.EOF
		}
		f, err := c.r.Read()
		switch {
		case err != nil:
			c.ended = true
			c.cancel()
			return 0, io.ErrUnexpectedEOF
		case f.Type == wire.TStdin:
			c.frame, c.rest = f.Payload, f.Payload
		case f.Type == wire.TStdinEOF:
			c.ended = true
			go c.watch()
			return 0, io.EOF
		case f.Type == wire.TSignal:
			c.ended = true
			c.cancel()
			return 0, io.EOF
		}
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// watch reads the client's frames until a Signal or the client going
// away, and then stops the command (a no-op once it has ended).
func (c *clientFrames) watch() {
	defer c.cancel()
	for {
		f, err := c.r.Read()
		if err != nil || f.Type == wire.TSignal {
			return
		}
	}
}

// readFirst reads the first bytes a client sends with the files passed
// on them (SCM_RIGHTS; close-on-exec, as Go receives them): at most two.
// A connection that cannot carry files (a named pipe) passes none.
func readFirst(nc net.Conn) ([]byte, []*os.File, error) {
	buf := make([]byte, 4<<10)
	uc, ok := nc.(*net.UnixConn)
	if !ok || !canPassFiles {
		n, err := nc.Read(buf)
		if n == 0 && err != nil {
			return nil, nil, err
		}
		return buf[:n], nil, nil
	}
	oob := make([]byte, rightsSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	files := parseRights(oob[:oobn])
	if n == 0 && err != nil {
		return nil, files, err
	}
	return buf[:n], files, nil
}

// outputFiles pairs the files a client passed with the streams its Start
// names: exactly one each of stdout and stderr, or nothing is used.
func outputFiles(names []string, passed []*os.File) (map[string]*os.File, bool) {
	if len(names) != 2 || len(passed) != 2 || names[0] == names[1] {
		return nil, false
	}
	files := map[string]*os.File{}
	for i, n := range names {
		if n != "stdout" && n != "stderr" {
			return nil, false
		}
		files[n] = passed[i]
	}
	return files, true
}

// fileWriter writes a command's output to a file the client passed; the
// first failure is kept and stops the command.
type fileWriter struct {
	f      *os.File
	stream string
	failed *fileFailure
	stop   context.CancelFunc
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.failed.get() != nil {
		return len(p), nil // stopping: drop the rest
	}
	if _, err := w.f.Write(p); err != nil {
		w.failed.set(&WriteError{Stream: w.stream, Err: err.Error(), BrokenPipe: errors.Is(err, syscall.EPIPE)})
		w.stop()
	}
	return len(p), nil
}

type fileFailure struct {
	mu  sync.Mutex
	err *WriteError
}

func (f *fileFailure) set(e *WriteError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = e
	}
}

func (f *fileFailure) get() *WriteError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

type frameWriter struct {
	w *wire.Writer
	t wire.Type
}

func (f frameWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += wire.Chunk {
		if err := f.w.Write(f.t, 0, p[off:min(off+wire.Chunk, len(p))]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// unixMilli is t in unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
