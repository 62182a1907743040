package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/wire"
)

// The holder's clients: hsbx processes that send it a command (RunVia),
// ask it to end (Shutdown) or ask whether it serves (Alive).

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
		res.Code, res.Killed, res.Session, res.Failure = e.Code, e.Killed, e.Session, failure(e)
		res.StdoutBytes, res.StderrBytes, res.StdinBytes = e.StdoutBytes, e.StderrBytes, e.StdinBytes
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
// holder outlives its sandbox by its idle time), and every holder of it
// asked for until now not to serve. No holder: nothing to do. It returns
// once the holder takes no command; ShutdownWait waits for the end.
func Shutdown(ctx context.Context, socket string) {
	markEnded(socket)
	shutdown(ctx, socket, false)
}

// ShutdownWait is Shutdown, then waits until no holder of socket is left:
// the one serving has closed its channel (the engine runs no exec of its
// agent any more), and one that was starting (its lock taken, its channel
// opening) has ended too, as it does on seeing the mark. Bounded: KillWait
// and a little more. A replacement that must see no command in the
// sandbox asks this way.
func ShutdownWait(ctx context.Context, socket string) {
	deadline := time.Now().Add(KillWait + 2*time.Second)
	markEnded(socket)
	shutdown(ctx, socket, true)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		release, ok, err := privdir.TryLock(socket + ".lock")
		if err != nil {
			return
		}
		if ok {
			release()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func shutdown(ctx context.Context, socket string, wait bool) {
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
	if wire.NewWriter(nc).Write(wire.TShutdown, 0, nil) != nil {
		return
	}
	// The holder says it takes no command from now on (an older one hangs
	// up instead), then hangs up once its channel has ended.
	if f, err := r.Read(); err != nil || f.Type != wire.TShutdown || !wait {
		return
	}
	_ = nc.SetDeadline(time.Now().Add(KillWait + 2*time.Second))
	_, _ = r.Read()
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
