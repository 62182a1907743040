package channel

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
	c := stuckAgent(t, bounds{0, 300 * time.Millisecond, FrameWait}, func(r *wire.Reader, _ *wire.Writer, _ *os.File) {
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
		c := pairWith(t, bounds{tt.quiet, PingWait, FrameWait})
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
	c := stuckAgent(t, bounds{QuietBefore, PingWait, 300 * time.Millisecond}, func(r *wire.Reader, _ *wire.Writer, raw *os.File) {
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
