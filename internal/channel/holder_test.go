package channel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agent"
	"github.com/hsbx/hsbx/internal/wire"
)

// listenSocket listens on a unix socket named name in a fresh temporary
// directory, closed when the test ends; it returns the socket's path.
func listenSocket(t *testing.T, name string) (*net.UnixListener, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, sock
}

// serve runs a Holder for an in-process agent on a socket in a private
// directory and returns the socket.
func serve(t *testing.T) string {
	t.Helper()
	ln, sock := listenSocket(t, "h.sock")
	h := &Holder{Conn: pair(t), Listener: ln, Idle: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

// outputPipes are the files a CLI's stdout and stderr would be, read
// into buffers until the write ends close.
func outputPipes(t *testing.T) (outW, errW *os.File, wait func() (string, string)) {
	t.Helper()
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(&out, outR); done <- struct{}{} }()
	go func() { _, _ = io.Copy(&errb, errR); done <- struct{}{} }()
	return outW, errW, func() (string, string) {
		outW.Close()
		errW.Close()
		<-done
		<-done
		return out.String(), errb.String()
	}
}

// The CLI passes its own stdout and stderr: the holder writes the output
// there itself, byte for byte and in order, and nothing comes back
// through the socket.
func TestRunViaPassesTheCallersFiles(t *testing.T) {
	sock := serve(t)
	outW, errW, wait := outputPipes(t)
	var relayed bytes.Buffer
	big := strings.Repeat("0123456789abcde\n", 1<<16) // 1 MiB
	res, err := RunVia(context.Background(), sock, Request{
		Start:  wire.Start{Argv: []string{"sh", "-c", "printf out; printf err >&2; yes 0123456789abcde | head -c 1048576; exit 3"}},
		Stdout: &relayed, Stderr: &relayed, StdoutFile: outW, StderrFile: errW,
	})
	if err != nil || res.Code != 3 {
		t.Fatalf("RunVia: code %d, %v; want 3, nil", res.Code, err)
	}
	out, errs := wait()
	if out != "out"+big || errs != "err" {
		t.Errorf("stdout %d bytes (want %d), stderr %q (want \"err\")", len(out), len("out"+big), errs)
	}
	if relayed.Len() != 0 {
		t.Errorf("%d bytes came back through the socket; want none (the holder writes to the passed files)", relayed.Len())
	}
}

// A reader that goes away (| head) makes the holder's write fail: it
// stops the command and says which stream broke and that it was a
// broken pipe, as the CLI's own write would have (exit 141).
func TestRunViaPassedFileBrokenPipeStopsTheCommand(t *testing.T) {
	sock := serve(t)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_, errW, wait := outputPipes(t)
	defer wait()
	go func() {
		buf := make([]byte, 5)
		_, _ = io.ReadFull(outR, buf)
		outR.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := RunVia(ctx, sock, Request{
		Start:      wire.Start{Argv: []string{"sh", "-c", "while :; do echo y; done"}},
		StdoutFile: outW, StderrFile: errW, Stdout: io.Discard, Stderr: io.Discard,
	})
	outW.Close()
	if err != nil {
		t.Fatalf("RunVia: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the command ran on after its reader went away")
	}
	if res.WriteErr == nil || res.WriteErr.Stream != "stdout" || !errors.Is(res.WriteErr, syscall.EPIPE) || !res.Interrupted || res.Killed < 1 {
		t.Errorf("result %+v (write error %v); want the stdout write failing with EPIPE and the command killed", res, res.WriteErr)
	}
}

// A holder that reads without taking passed files (an hsbx from before
// they were passed) gets none — the kernel closes them — and sends the
// output in frames, which the client writes to Stdout and Stderr.
func TestRunViaToAHolderThatTakesNoFiles(t *testing.T) {
	ln, sock := listenSocket(t, "old.sock")
	gotFDs := make(chan []string, 1)
	go func() {
		nc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer nc.Close()
		w, r := wire.NewWriter(nc), wire.NewReader(nc) // plain reads, as before
		_ = w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto})
		f, err := r.Read()
		var st wire.Start
		if err != nil || wire.Decode(f, &st) != nil {
			gotFDs <- nil
			return
		}
		gotFDs <- st.FDs
		_ = w.Write(wire.TStdout, 0, []byte("framed out"))
		_ = w.Write(wire.TStderr, 0, []byte("framed err"))
		_ = w.WriteJSON(wire.TExit, 0, wire.Exit{Code: 0})
	}()
	outW, errW, wait := outputPipes(t)
	var out, errb bytes.Buffer
	res, err := RunVia(context.Background(), sock, Request{Start: wire.Start{Argv: []string{"true"}},
		Stdout: &out, Stderr: &errb, StdoutFile: outW, StderrFile: errW})
	if err != nil || res.Code != 0 {
		t.Fatalf("RunVia: %d, %v", res.Code, err)
	}
	if fds := <-gotFDs; len(fds) != 2 {
		t.Errorf("the Start named %q; want the two passed streams", fds)
	}
	if out.String() != "framed out" || errb.String() != "framed err" {
		t.Errorf("relayed stdout %q, stderr %q; want the framed output", out.String(), errb.String())
	}
	if o, e := wait(); o != "" || e != "" {
		t.Errorf("the passed files got %q / %q; want nothing (that holder did not take them)", o, e)
	}
}

// Input through the holder arrives byte for byte, past the agent's input
// window, to a command that reads it only later (the window is what may
// wait in the agent meanwhile).
func TestRunViaStdinIsExact(t *testing.T) {
	sock := serve(t)
	in := make([]byte, wire.InputWindow+3*wire.Chunk+17)
	for i := range in {
		in[i] = byte(i*7 + i>>11)
	}
	var out bytes.Buffer
	res, err := RunVia(context.Background(), sock, Request{
		Start: wire.Start{Argv: []string{"sh", "-c", "sleep 0.3; cat"}},
		Stdin: bytes.NewReader(in), Stdout: &out, Stderr: io.Discard,
	})
	if err != nil || res.Code != 0 {
		t.Fatalf("RunVia: code %d, %v", res.Code, err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatalf("the command read %d bytes back; want the %d sent, identical", out.Len(), len(in))
	}
}

// endless is input that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

// An interrupted client whose command reads none of its endless input
// (the window is full, the client's writes block, its kill frame waits
// behind them) gets an answer within the kill's bound, not when the
// command ends by itself. (The sandbox package then kills the command by
// its marker, through the engine.)
func TestRunViaInterruptWhileInputWaits(t *testing.T) {
	sock := serve(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := RunVia(ctx, sock, Request{
			Start: wire.Start{Argv: []string{"sleep", "120"}},
			Stdin: endless{}, Stdout: io.Discard, Stderr: io.Discard,
		})
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		var be *BrokenError
		if !o.res.Interrupted || (o.res.Killed < 1 && !errors.As(o.err, &be)) {
			t.Fatalf("RunVia: %+v, %v; want the command interrupted: killed, or the kill unconfirmed", o.res, o.err)
		}
	case <-time.After(KillWait + 30*time.Second):
		t.Fatal("RunVia waited for the command to end by itself after it was interrupted")
	}
}

// A holder asked to shut down takes no command from then on, even one
// whose client connected before its socket closed: that command is not
// delivered (the client runs it another way), never cut by the holder's
// ending ("may have run", exit 125). Serve's loop is not running here, so
// the socket stays open after the request, as it does for a moment.
func TestHolderEndingTakesNoCommand(t *testing.T) {
	ln, sock := listenSocket(t, "h.sock")
	h := &Holder{Conn: pair(t), Listener: ln, Idle: time.Minute, stop: make(chan End, 1)}
	h.Log = slog.New(slog.DiscardHandler)
	ctx := context.Background()
	go h.accept(ctx)
	Shutdown(ctx, sock)
	if why := <-h.stop; why.Kind != EndAsked {
		t.Fatalf("stop: %v", why)
	}
	var out bytes.Buffer
	_, err := RunVia(ctx, sock, Request{Start: wire.Start{Argv: []string{"echo", "ran"}}, Stdout: &out})
	if !errors.Is(err, ErrNotDelivered) || out.Len() != 0 {
		t.Fatalf("a command after the shutdown: %v, output %q (want not delivered, nothing run)", err, out.String())
	}
}

// oneConn listens on a socket in a temporary directory and hands its
// first connection to fn.
func oneConn(t *testing.T, fn func(nc *net.UnixConn)) string {
	t.Helper()
	ln, sock := listenSocket(t, "h.sock")
	go func() {
		nc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer nc.Close()
		fn(nc)
	}()
	return sock
}

// RunVia sends the command without waiting for the hello (a round trip
// less), then calls AfterSend (the CLI waits there for its signal
// handlers): a holder that reads the Start before it greets has it while
// AfterSend still waits.
func TestRunViaSendsBeforeTheHello(t *testing.T) {
	got := make(chan wire.Start, 1)
	sock := oneConn(t, func(nc *net.UnixConn) {
		var st wire.Start
		if f, err := wire.NewReader(nc).Read(); err == nil && f.Type == wire.TStart && wire.Decode(f, &st) == nil {
			got <- st
		}
		w := wire.NewWriter(nc)
		_ = w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto})
		_ = w.WriteJSON(wire.TExit, 0, wire.Exit{Code: 7})
	})
	waited := false
	res, err := RunVia(context.Background(), sock, Request{Start: wire.Start{Argv: []string{"x"}}, AfterSend: func() {
		select {
		case st := <-got:
			waited = len(st.Argv) == 1 && st.Argv[0] == "x"
		case <-time.After(10 * time.Second):
		}
	}})
	if err != nil || res.Code != 7 || !waited {
		t.Fatalf("RunVia: %d, %v (the holder had the command during AfterSend: %v); want 7, nil, true", res.Code, err, waited)
	}
}

// What the hello (or its absence) says of a command sent before it: not
// delivered only when the holder cannot have read it.
func TestRunViaHelloVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		holder        func(nc *net.UnixConn)
		notDelivered  bool
		wantBrokenErr bool
	}{
		{"closed without a hello", func(nc *net.UnixConn) {}, true, false},
		{"down", func(nc *net.UnixConn) {
			_ = wire.NewWriter(nc).WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto, Down: true})
		}, true, false},
		{"another protocol", func(nc *net.UnixConn) {
			_ = wire.NewWriter(nc).WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto + 1})
			time.Sleep(time.Second)
		}, false, true},
		{"no hello in time", func(nc *net.UnixConn) {
			_, _ = wire.NewReader(nc).Read() // takes the command, never greets
			time.Sleep(7 * time.Second)
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := oneConn(t, tc.holder)
			_, err := RunVia(context.Background(), sock, Request{Start: wire.Start{Argv: []string{"true"}}})
			var be *BrokenError
			if errors.Is(err, ErrNotDelivered) != tc.notDelivered || errors.As(err, &be) != tc.wantBrokenErr {
				t.Fatalf("RunVia: %v; want not delivered %v, broken (it may have run) %v", err, tc.notDelivered, tc.wantBrokenErr)
			}
		})
	}
}

// A holder's socket name carries the protocol: a client never reaches a
// holder of another one, which could read its command before the hello.
func TestSocketPathCarriesTheProtocol(t *testing.T) {
	a := SocketPath("/d", "docker", "id", "")
	h := sha256.Sum256([]byte(strings.Join([]string{"docker", "id", ""}, "\x00")))
	if old := filepath.Join("/d", hex.EncodeToString(h[:])[:24]+".sock"); a == old {
		t.Errorf("SocketPath %s is the name without the protocol", a)
	}
	if b := SocketPath("/d", "docker", "id", ""); a != b {
		t.Errorf("SocketPath not stable: %s, %s", a, b)
	}
}

// gatedCloser closes its writer only once the test opens the gate: an
// agent whose exec takes a while to end.
type gatedCloser struct {
	w      io.Closer
	gate   chan struct{}
	closed chan struct{}
}

func (g *gatedCloser) Close() error {
	<-g.gate
	err := g.w.Close()
	close(g.closed)
	return err
}

// Shutdown returns once the holder takes no command (its channel may
// still be ending); ShutdownWait only once the channel has ended — what a
// replacement needs before it asks the engine whether any exec runs.
func TestShutdownWaitsForTheChannelsEnd(t *testing.T) {
	for _, wait := range []bool{false, true} {
		toAgentR, toAgentW := io.Pipe()
		fromAgentR, fromAgentW := io.Pipe()
		go func() { _ = agent.Serve(toAgentR, fromAgentW, "test"); fromAgentW.Close() }()
		g := &gatedCloser{w: toAgentW, gate: make(chan struct{}), closed: make(chan struct{})}
		c, err := newConn(fromAgentR, toAgentW, g, 5*time.Second, defaultBounds())
		if err != nil {
			t.Fatal(err)
		}
		ln, sock := listenSocket(t, "h.sock")
		h := &Holder{Conn: c, Listener: ln, Idle: time.Minute}
		served := make(chan End, 1)
		go func() { served <- h.Serve(context.Background()) }()
		returned := make(chan struct{})
		go func() {
			if wait {
				ShutdownWait(context.Background(), sock)
			} else {
				Shutdown(context.Background(), sock)
			}
			close(returned)
		}()
		if !wait {
			<-returned // with the channel's end still held back
			h.mu.Lock()
			closing := h.closing
			h.mu.Unlock()
			if !closing {
				t.Fatal("Shutdown returned before the holder stopped taking commands")
			}
			close(g.gate)
		} else {
			select {
			case <-returned:
				t.Fatal("ShutdownWait returned while the holder's channel was still ending")
			case <-time.After(300 * time.Millisecond):
			}
			close(g.gate)
			<-returned
			select {
			case <-g.closed:
			default:
				t.Fatal("ShutdownWait returned before the channel was closed")
			}
		}
		if why := <-served; why.Kind != EndAsked {
			t.Fatalf("the holder ended: %v", why)
		}
	}
}
