//go:build linux

package channel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agent"
	"github.com/hsbx/hsbx/internal/wire"
)

// stuckAgent greets over OS pipes (buffered, as an engine's exec stream
// is), then runs behave with the rest of both directions.
func stuckAgent(t *testing.T, b bounds, behave func(r *wire.Reader, w *wire.Writer, raw *os.File)) *Conn {
	t.Helper()
	toAgentR, toAgentW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromAgentR, fromAgentW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer fromAgentW.Close()
		w := wire.NewWriter(fromAgentW)
		_ = w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto})
		r := wire.NewReader(toAgentR)
		if _, err := r.Read(); err != nil { // the host's hello
			return
		}
		behave(r, w, fromAgentW)
	}()
	c, err := newConn(fromAgentR, toAgentW, multiCloser{toAgentW, fromAgentR}, 5*time.Second, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); toAgentR.Close() })
	return c
}

// A paused sandbox's agent takes nothing in and answers nothing: a command
// for it is not sent (the plain path, which unpauses, runs it), within the
// ping's bound, and the frozen agent never receives a Start.
func TestRunDoesNotSendToAnAgentThatDoesNotAnswer(t *testing.T) {
	thaw := make(chan struct{})
	got := make(chan []wire.Type, 1)
	c := stuckAgent(t, bounds{0, 300 * time.Millisecond, FrameWait, AgentDeadAfter}, func(r *wire.Reader, _ *wire.Writer, _ *os.File) {
		<-thaw
		var ts []wire.Type
		for {
			f, err := r.Read()
			if err != nil {
				break
			}
			ts = append(ts, f.Type)
		}
		got <- ts
	})
	start := time.Now()
	_, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"true"}}})
	if !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("Run on a frozen agent: %v, want ErrNotDelivered naming a pause", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s: the bound did not hold", d)
	}
	close(thaw)
	c.Close()
	select {
	case ts := <-got:
		for _, tt := range ts {
			if tt == wire.TStart {
				t.Fatalf("the frozen agent got a Start: %v", ts)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the frozen agent never saw the channel end")
	}
}

// An agent that answers its pings gets the command: the check costs one
// round trip, only after a quiet spell.
func TestRunPingsOnlyAfterQuiet(t *testing.T) {
	for _, tt := range []struct {
		quiet time.Duration
		pings uint64
	}{{time.Hour, 0}, {0, 2}} {
		c := pairWith(t, bounds{tt.quiet, PingWait, FrameWait, AgentDeadAfter})
		for _, word := range []string{"a", "b"} {
			if _, out, _ := run(t, c, []string{"echo", word}, nil); out != word+"\n" {
				t.Fatalf("out %q", out)
			}
		}
		c.pingMu.Lock()
		n := c.pingSeq
		c.pingMu.Unlock()
		if n != tt.pings {
			t.Fatalf("quiet bound %s: %d pings for 2 commands, want %d", tt.quiet, n, tt.pings)
		}
	}
}

// Half a frame (a header promising more than ever comes) must not wedge
// the channel: the running command fails as broken within the bound, and
// the channel is down so a new one is opened.
func TestCutFrameEndsTheChannel(t *testing.T) {
	c := stuckAgent(t, bounds{QuietBefore, PingWait, 300 * time.Millisecond, AgentDeadAfter}, func(r *wire.Reader, _ *wire.Writer, raw *os.File) {
		if _, err := r.Read(); err != nil { // the Start
			return
		}
		_, _ = raw.Write([]byte{byte(wire.TStdout), 0, 0, 0, 1, 0, 0, 0, 100, 'x', 'y'})
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	})
	start := time.Now()
	_, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"true"}}})
	var be *BrokenError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("Run with a cut frame: %v, want a BrokenError", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s", d)
	}
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("the channel is still up")
	}
}

// An agent whose hsbx went silent (the engine lost the exec stream but
// kept the sandbox, as docker's live-restore does on a daemon restart)
// kills what it runs and ends, within the bound hsbx's hello set.
func TestAgentEndsWhenHsbxGoesSilent(t *testing.T) {
	toAgentR, toAgentW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromAgentR, fromAgentW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toAgentW.Close(); fromAgentR.Close(); toAgentR.Close(); fromAgentW.Close() })
	done := make(chan error, 1)
	go func() { done <- agent.Serve(toAgentR, fromAgentW, "test") }()
	w, r := wire.NewWriter(toAgentW), wire.NewReader(fromAgentR)
	if f, err := r.Read(); err != nil || f.Type != wire.THello {
		t.Fatalf("no hello: %v %v", f.Type, err)
	}
	_ = w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto, DeadAfterMS: 300})
	_ = w.WriteJSON(wire.TStart, 1, wire.Start{Argv: []string{"sh", "-c", "echo $$; exec sleep 30"}})
	var pid atomic.Int64
	go func() { // keep reading, as the engine's buffers would
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			var n int64
			if f.Type == wire.TStdout && pid.Load() == 0 {
				if _, err := fmt.Sscan(string(f.Payload), &n); err == nil {
					pid.Store(n)
				}
			}
		}
	}()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "heard nothing from hsbx") {
			t.Fatalf("Serve ended with %v, want the silence named", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent still runs 10s after hsbx went silent (bound 300ms)")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("the agent gave up after %s, before its 300ms bound", d)
	}
	if pid.Load() == 0 {
		t.Fatal("the command never started")
	}
	p := int(pid.Load())
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(p, 0) == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); strings.Contains(string(b), ") Z ") {
			break // killed, not yet reaped by the test process
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) outlived its agent", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Conn keeps its promise: its agent, told to give up after 300ms of
// silence, lives through idle spells and quiet commands many times that.
func TestConnKeepsItsAgentAlive(t *testing.T) {
	c := pairWith(t, bounds{QuietBefore, PingWait, FrameWait, 300 * time.Millisecond})
	time.Sleep(1500 * time.Millisecond)
	if res, _, _ := run(t, c, []string{"sleep", "1.5"}, nil); res.Code != 0 {
		t.Fatalf("a quiet command through a kept-alive agent: %+v", res)
	}
	if res, out, _ := run(t, c, []string{"echo", "ok"}, nil); res.Code != 0 || out != "ok\n" {
		t.Fatalf("after: %+v %q", res, out)
	}
}

// A sandbox paused right after its agent took a command (it had answered
// within QuietBefore, so the command was sent unpinged) held the command
// with no word: exec waited 45 s and then said the sandbox was stopped or
// removed. Now a command that waits on an agent that stops answering its
// pings gets the Conn's OnStall (Open's unpauses a paused sandbox), and
// runs once the agent thaws.
func TestStalledCommandCallsOnStall(t *testing.T) {
	thaw := make(chan struct{})
	var stalls atomic.Int32
	c := stuckAgent(t, bounds{200 * time.Millisecond, 300 * time.Millisecond, FrameWait, AgentDeadAfter}, func(r *wire.Reader, w *wire.Writer, _ *os.File) {
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			switch f.Type {
			case wire.TPing:
				_ = w.Write(wire.TPong, 0, f.Payload)
			case wire.TStart:
				<-thaw // paused with the command in: nothing is read or answered
				_ = w.Write(wire.TStdout, f.Stream, []byte("ran\n"))
				_ = w.WriteJSON(wire.TExit, f.Stream, wire.Exit{Code: 0})
			}
		}
	})
	c.OnStall(func(context.Context) {
		if stalls.Add(1) == 1 {
			close(thaw)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	res, err := c.Run(ctx, Request{Start: wire.Start{Argv: []string{"echo", "ran"}}, Stdout: &out})
	if err != nil || res.Code != 0 || out.String() != "ran\n" {
		t.Fatalf("Run: %+v %q %v, want the command's exit after the thaw", res, out.String(), err)
	}
	if stalls.Load() == 0 {
		t.Fatal("OnStall was never called")
	}
}

// An agent whose sandbox died under the channel: the engine keeps the
// stream open (gVisor), the agent says nothing more. A command waiting on
// it ends as soon as OnStall (Open's asks the engine) aborts the channel;
// and an idle channel whose agent falls silent gets OnStall too, once in
// a while, not at every tick.
func TestAbortEndsACommandOnADeadAgent(t *testing.T) {
	silent := func(r *wire.Reader, w *wire.Writer, _ *os.File) {
		dead := false
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			switch {
			case f.Type == wire.TStart:
				dead = true // the sandbox dies with the command in
			case f.Type == wire.TPing && !dead:
				_ = w.Write(wire.TPong, 0, f.Payload)
			}
		}
	}
	c := stuckAgent(t, bounds{100 * time.Millisecond, 200 * time.Millisecond, FrameWait, AgentDeadAfter}, silent)
	c.OnStall(func(context.Context) { c.Abort(errors.New("the sandbox is exited: the agent went away")) })
	start := time.Now()
	_, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"sleep", "300"}}})
	var be *BrokenError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "exited") || time.Since(start) > 5*time.Second {
		t.Fatalf("Run on a dead agent: %v after %s, want the abort's error within seconds", err, time.Since(start))
	}

	idle := stuckAgent(t, bounds{100 * time.Millisecond, 200 * time.Millisecond, FrameWait, 3 * time.Second}, func(r *wire.Reader, _ *wire.Writer, _ *os.File) {
		for {
			if _, err := r.Read(); err != nil { // reads everything, answers nothing
				return
			}
		}
	})
	var stalls atomic.Int32
	idle.OnStall(func(context.Context) { stalls.Add(1) })
	time.Sleep(3 * time.Second) // idle and silent: past deadAfter/3 twice
	if n := stalls.Load(); n < 1 || n > 3 {
		t.Fatalf("an idle channel's silent agent: %d stall checks in 3s, want 1 to 3", n)
	}
}
