package proc

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRunOutcomes(t *testing.T) {
	r := &Runner{WaitDelay: 200 * time.Millisecond}
	ctx := context.Background()

	// A non-zero exit is data, not an error; stdout captured, stderr tailed.
	res, err := r.Run(ctx, Cmd{Argv: sh("echo out; echo err >&2; exit 3")})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("exit 3: %+v %v", res, err)
	}
	// Killed by a signal: 128+N.
	res, err = r.Run(ctx, Cmd{Argv: sh("kill -TERM $$")})
	if err != nil || res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Fatalf("signalled: %d %v", res.ExitCode, err)
	}
	// Our timeout: *TimeoutError, errors.Is ErrProcessTimeout and DeadlineExceeded.
	res, err = r.Run(ctx, Cmd{Argv: sh("sleep 5"), Timeout: 100 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrProcessTimeout) || !errors.Is(err, context.DeadlineExceeded) || te.Timeout != 100*time.Millisecond {
		t.Fatalf("timeout: %v", err)
	}
	// The caller gives up: its context's error, not a TimeoutError.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = r.Run(cctx, Cmd{Argv: sh("sleep 5"), Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
		t.Fatalf("cancel: %v", err)
	}
	// Could not start at all.
	_, err = r.Run(ctx, Cmd{Argv: []string{filepath.Join(t.TempDir(), "nope")}})
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("start failure: %v", err)
	}
	if _, err := r.Run(ctx, Cmd{}); err == nil {
		t.Fatal("empty argv accepted")
	}
}

// A grandchild holding the output pipe open cannot hold Run past WaitDelay.
func TestWaitDelayBoundsAGrandchild(t *testing.T) {
	r := &Runner{WaitDelay: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), Cmd{Argv: sh("sleep 30 & echo started"), Timeout: 100 * time.Millisecond})
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a hang guard, not a speed assertion
		t.Fatal("Run waited for the grandchild that holds stdout")
	}
}

// The environment is exactly what is given: nil is empty, never the process's.
func TestEnvIsExplicit(t *testing.T) {
	t.Setenv("HSBX_PROC_TEST_LEAK", "leaked")
	r := &Runner{}
	res, err := r.Run(context.Background(), Cmd{Argv: []string{"/usr/bin/env"}})
	if err != nil || strings.Contains(string(res.Stdout), "leaked") {
		t.Fatalf("nil env inherited the process's: %q %v", res.Stdout, err)
	}
	res, _ = r.Run(context.Background(), Cmd{Argv: []string{"/usr/bin/env"}, Env: []string{"A=b,c=d"}})
	if string(res.Stdout) != "A=b,c=d\n" {
		t.Fatalf("env: %q", res.Stdout)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	tb := &TailBuffer{Max: 8}
	for _, w := range []string{"abc", "defgh", "ij", "0123456789xyz"} {
		tb.Write([]byte(w))
	}
	if string(tb.Bytes()) != "56789xyz" {
		t.Fatalf("tail %q", tb.Bytes())
	}
	tb = &TailBuffer{Max: 8}
	tb.Write([]byte("abcdef"))
	tb.Write([]byte("ghij"))
	if string(tb.Bytes()) != "cdefghij" {
		t.Fatalf("tail %q, want cdefghij", tb.Bytes())
	}
}

func TestQuoteIsForHumans(t *testing.T) {
	if got := Quote([]string{"docker", "exec", "-e", "K", "sh", "-c", "echo $X; exit 1", ""}); got != `docker exec -e K sh -c "echo $X; exit 1" ""` {
		t.Errorf("Quote = %s", got)
	}
}

// Stdout and Stderr writers receive the output as it streams.
func TestStreams(t *testing.T) {
	var out, errb bytes.Buffer
	res, err := (&Runner{}).Run(context.Background(), Cmd{Argv: sh("echo a; echo b >&2"), Stdout: &out, Stderr: &errb})
	if err != nil || out.String() != "a\n" || errb.String() != "b\n" || string(res.Stderr) != "b\n" || len(res.Stdout) != 0 {
		t.Fatalf("streams: %q %q %+v %v", out.String(), errb.String(), res, err)
	}
}

// A Graceful command that is cancelled gets SIGTERM and time to finish
// (podman run's case); without Graceful it is SIGKILLed at once.
func TestGracefulCancel(t *testing.T) {
	script := `trap 'sleep 0.3; echo finished; kill $!; exit 0' TERM; echo started; sleep 30 >/dev/null 2>&1 & wait`
	for _, grace := range []time.Duration{0, 5 * time.Second} {
		ctx, cancel := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan error, 1)
		go func() {
			_, err := (&Runner{}).Run(ctx, Cmd{Argv: []string{"sh", "-c", script}, Stdout: &out, Graceful: grace})
			done <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "started"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("never started")
			}
		}
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) {
			t.Errorf("grace %s: %v, want the caller's cancellation", grace, err)
		}
		if finished := strings.Contains(out.String(), "finished"); finished != (grace > 0) {
			t.Errorf("grace %s: output %q", grace, out.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
