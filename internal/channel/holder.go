package channel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/wire"
)

// The holder keeps one Conn open for many hsbx processes, the pattern of
// ssh's ControlMaster: it listens on a unix socket in a directory only its
// user can enter (on Windows a named pipe only its user can open: see
// transport_windows.go), checks each peer's user, and runs one command per
// connection. The client side is RunVia.

// OpenSocketDir opens (making it if needed) the directory holder sockets
// live in: base/hsbx, mode 0700, this user's, with every directory above
// it changeable by no other user — checked on the opened directories
// (internal/privdir). Keep it open while its sockets are used, and name
// them under its FDPath: they then resolve through the checked directory.
func OpenSocketDir(base string) (*privdir.Dir, error) {
	if base == "" {
		return nil, errors.New("no runtime directory")
	}
	return privdir.Open(filepath.Join(base, "hsbx"), privdir.Options{Create: true, Private: true})
}

// SocketPath names the holder socket for one sandbox channel: a digest of
// everything that decides which agent it reaches (engine binary and
// endpoint, container id, user) and of the protocol, so no two channels
// share a socket and a client never reaches a holder of another protocol
// (RunVia sends its command before the hello).
func SocketPath(dir string, parts ...string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("proto %d\x00", wire.Proto) + strings.Join(parts, "\x00")))
	return filepath.Join(dir, hex.EncodeToString(h[:])[:24]+".sock")
}

// SocketPathFits says whether holders' sockets in dir (SocketPath) fit a
// unix socket's address (maxSocketPath, per OS); macOS's long $TMPDIR can
// exceed it. On Windows the holder's pipe has a name of its own.
func SocketPathFits(dir string) error {
	if p := SocketPath(dir, ""); len(p) > maxSocketPath {
		return fmt.Errorf("the exec channel's socket path %s is %d bytes, more than a unix socket takes (%d); set XDG_RUNTIME_DIR or TMPDIR to a shorter directory", p, len(p), maxSocketPath)
	}
	return nil
}

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
	stop     chan string
	// closing is set once the holder has decided to end (a shutdown asked
	// for, idle, the channel down): from then on it takes no command, so
	// none it accepted is cut by its ending. mu orders it with a command's
	// start (active).
	mu      sync.Mutex
	closing bool
}

// Serve runs until the holder is idle, the agent's channel goes down, a
// client asks for shutdown or ctx ends; it returns why. It closes the
// listener (removing the socket) and the Conn (ending the agent).
func (h *Holder) Serve(ctx context.Context) string {
	if h.Log == nil {
		h.Log = slog.New(slog.DiscardHandler)
	}
	h.stop = make(chan string, 1)
	h.lastUsed.Store(time.Now().UnixNano())
	var sock os.FileInfo
	if h.Path != "" {
		sock, _ = os.Stat(h.Path)
	}
	go h.accept(ctx)
	tick := time.NewTicker(min(h.Idle/4+time.Millisecond, time.Second))
	defer tick.Stop()
	var why string
loop:
	for {
		select {
		case <-ctx.Done():
			why = "signalled"
			break loop
		case <-h.Conn.Done():
			why = fmt.Sprintf("the agent's channel ended: %v", h.Conn.Err())
			break loop
		case why = <-h.stop:
			break loop
		case <-tick.C:
			h.mu.Lock()
			idle := h.active.Load() == 0 && time.Since(time.Unix(0, h.lastUsed.Load())) >= h.Idle
			h.closing = h.closing || idle
			h.mu.Unlock()
			if idle {
				why = fmt.Sprintf("idle for %s", h.Idle)
				break loop
			}
			if sock != nil {
				if now, err := os.Stat(h.Path); err != nil || !os.SameFile(sock, now) {
					why = "its socket was removed or replaced"
					keepSocketFile(h.Listener) // not ours any more
					break loop
				}
			}
		}
	}
	h.endCommands()
	_ = h.Listener.Close()
	_ = h.Conn.Close()
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
func (h *Holder) shutdown(why string) {
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
				h.shutdown(fmt.Sprintf("accepting on the socket failed: %v", err))
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
		return
	}
	// Stdin frames come from a pool and go back to it once copied on
	// (clientFrames).
	r := wire.NewReader(io.MultiReader(bytes.NewReader(first), nc)).PoolPayloads()
	f, err := r.Read()
	if err != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	switch f.Type {
	case wire.TShutdown:
		h.shutdown("asked to shut down")
		return
	case wire.TStart:
	default:
		return
	}
	var st wire.Start
	if wire.Decode(f, &st) != nil {
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
	exit := wire.Exit{Code: res.Code, Killed: res.Killed, Session: res.Session}
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

// RunVia runs req through the holder listening at socket. ErrNotDelivered
// means no holder took the command (none is there, or its channel is
// down): run it another way. After the command was sent, a broken
// connection is a *BrokenError: it may have run.
func RunVia(ctx context.Context, socket string, req Request) (_ Result, err error) {
	var h wire.Hello
	defer func() { // a broken command says when the holder's agent answered
		var be *BrokenError
		if errors.As(err, &be) && be.AgentSince.IsZero() && h.AgentSinceMS > 0 {
			be.AgentSince = time.UnixMilli(h.AgentSinceMS)
		}
	}()
	nc, err := dial(ctx, socket)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	defer nc.Close()
	w := wire.NewWriter(nc)
	// Small: a client reads the hello, the exit and, from a holder that
	// did not take its files, output frames (read past the buffer).
	r := wire.NewReaderSize(nc, 4<<10)
	// The command goes out at once, not after the holder's hello: a round
	// trip less on every command. The peer check has proved the socket is
	// this user's, and a holder of another protocol listens under another
	// name (SocketPath). A holder takes a command only after its hello, so
	// the hello says what became of it.
	req.Start.Stdin = req.Stdin != nil
	if err := sendStart(nc, w, &req); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	if req.AfterSend != nil {
		// A signal that ends this process before its handlers are in
		// closes the connection: the holder kills the command.
		req.AfterSend()
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := r.Read()
	switch {
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		// Closed without a hello (its peer check, or it is gone): it never
		// read the command.
		return Result{}, fmt.Errorf("%w: the holder did not greet (%v)", ErrNotDelivered, err)
	case err != nil:
		return Result{}, &BrokenError{Err: fmt.Errorf("the holder did not greet within 5s of the command (%w)", err)}
	case f.Type != wire.THello || wire.DecodeHello(f.Payload, &h) != nil || h.Proto != wire.Proto:
		return Result{}, &BrokenError{Err: fmt.Errorf("the holder greeted in another protocol (frame %d)", f.Type)}
	case h.Down:
		// Its channel is down, or it is ending: it closes without
		// reading the command.
		return Result{}, fmt.Errorf("%w: the holder's channel is down", ErrNotDelivered)
	}
	_ = nc.SetReadDeadline(time.Time{})
	if req.Stdin != nil {
		go func() {
			// Frames of wire.Chunk (io.Copy would read 32 KiB at a
			// time, and *os.File's WriteTo would pick that size).
			_, err := io.CopyBuffer(frameWriter{w, wire.TStdin}, struct{ io.Reader }{req.Stdin}, make([]byte, wire.Chunk))
			if err == nil {
				_ = w.Write(wire.TStdinEOF, 0, nil)
			}
		}()
	}
	// The frames are read here, not in a goroutine of their own (one
	// hand-over fewer at the end of every command). An interruption sends
	// the kill from context.AfterFunc's goroutine and bounds the wait for
	// its confirmation with a read deadline.
	var interrupted atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		interrupted.Store(true)
		_ = nc.SetReadDeadline(time.Now().Add(KillWait + time.Second))
		_ = w.Write(wire.TSignal, 0, []byte{byte(syscall.SIGKILL)})
	})
	defer stop()
	var res Result
	for {
		f, err := r.Read()
		if err != nil {
			res.Interrupted = interrupted.Load()
			if res.Interrupted && errors.Is(err, os.ErrDeadlineExceeded) {
				return res, &BrokenError{Err: fmt.Errorf("the holder did not confirm the kill within %s", KillWait)}
			}
			return res, &BrokenError{Err: fmt.Errorf("the holder went away: %w", err)}
		}
		switch f.Type {
		case wire.TStdout, wire.TStderr:
			out := req.Stdout
			if f.Type == wire.TStderr {
				out = req.Stderr
			}
			if out != nil {
				_, _ = out.Write(f.Payload)
			}
			continue
		case wire.TExit:
		default:
			continue
		}
		res.Interrupted = interrupted.Load()
		var e wire.Exit
		if err := wire.DecodeExit(f.Payload, &e); err != nil {
			return res, &BrokenError{Err: err}
		}
		res.Code, res.Killed, res.Session = e.Code, e.Killed, e.Session
		if e.WriteFailed != "" {
			res.Interrupted = true
			res.WriteErr = &WriteError{Stream: e.WriteFailed, Err: e.WriteError, BrokenPipe: e.BrokenPipe}
		}
		switch {
		case e.NotDelivered:
			return res, fmt.Errorf("%w: %s", ErrNotDelivered, e.Error)
		case e.Error != "":
			return res, &BrokenError{Err: errors.New(e.Error)}
		}
		return res, nil
	}
}

// sendStart sends req's Start frame, passing the caller's stdout and
// stderr files with it when it has both (the holder then writes to them
// itself). A holder that does not take them receives none (the kernel
// closes what a plain read leaves) and sends the output in frames.
func sendStart(nc net.Conn, w *wire.Writer, req *Request) error {
	uc, ok := nc.(*net.UnixConn)
	if req.StdoutFile == nil || req.StderrFile == nil || !canPassFiles || !ok {
		return w.Write(wire.TStart, 0, wire.EncodeStart(req.Start))
	}
	st := req.Start
	st.FDs = []string{"stdout", "stderr"}
	var frame bytes.Buffer
	if err := wire.NewWriter(&frame).Write(wire.TStart, 0, wire.EncodeStart(st)); err != nil {
		return err
	}
	// The descriptors through RawConn, not Fd, which would make a
	// non-blocking one blocking (and the caller's caller's with it).
	var err error
	cerr := withFD(req.StdoutFile, func(out int) {
		err = withFD(req.StderrFile, func(errFD int) {
			var n int
			n, _, err = uc.WriteMsgUnix(frame.Bytes(), unixRights(out, errFD), nil)
			if err == nil && n < frame.Len() {
				_, err = nc.Write(frame.Bytes()[n:])
			}
		})
	})
	return errors.Join(cerr, err)
}

// withFD runs fn with f's descriptor, valid for the call.
func withFD(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// Shutdown asks the holder at socket to end (stop and down do, so no
// holder outlives its sandbox by its idle time). No holder: nothing to do.
func Shutdown(ctx context.Context, socket string) {
	nc, err := dial(ctx, socket)
	if err != nil {
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
	r := wire.NewReader(nc)
	if f, err := r.Read(); err != nil || f.Type != wire.THello {
		return
	}
	_ = wire.NewWriter(nc).Write(wire.TShutdown, 0, nil)
	_, _ = r.Read() // wait for the holder to hang up
}

// Alive reports whether a holder of this protocol answers at socket with
// its channel up (another version's holder serves nobody of this one).
func Alive(socket string, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := dial(ctx, socket)
	if err != nil {
		return false
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(wait))
	f, err := wire.NewReader(nc).Read()
	var h wire.Hello
	return err == nil && f.Type == wire.THello && wire.DecodeHello(f.Payload, &h) == nil && !h.Down && h.Proto == wire.Proto
}

// unavailableFor is how long a holder's verdict that the agent cannot run
// in a sandbox stops hsbx from trying again.
const unavailableFor = 10 * time.Minute

// dial connects to the holder at socket and proves, before anything is
// sent, that the listener is this user's (peer credentials): a socket
// someone else put there never receives a command or its environment.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	nc, err := dialSocket(ctx, socket)
	if err != nil {
		return nil, err
	}
	if err := checkPeer(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("refusing the holder at %s: %w", socket, err)
	}
	return nc, nil
}

// MarkUnavailable records why no holder can serve socket's sandbox (in
// the socket's checked directory, never through a link).
func MarkUnavailable(socket, reason string) {
	f, err := privdir.OpenFile(socket+".unavailable", os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Truncate(0) == nil {
		_, _ = f.WriteString(reason)
	}
}

// UnavailableReason is a recent MarkUnavailable verdict for socket.
func UnavailableReason(socket string) (string, bool) {
	f, err := privdir.OpenFile(socket+".unavailable", os.O_RDONLY, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || time.Since(fi.ModTime()) > unavailableFor {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// unixMilli is t in unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Holders is how the hsbx command shares a channel between its processes
// (sandbox.Config.Holders): the private directory of the holders' sockets
// and how to start a holder (a detached hsbx).
type Holders struct {
	Dir   string
	Start func(HolderSpec)
}

// HolderSpec is what a holder process needs to serve one sandbox.
type HolderSpec struct {
	Socket string
	ID     string // the verified container id
	User   string // exec --user for the agent ("" = the container's)
}
