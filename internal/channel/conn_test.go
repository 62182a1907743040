package channel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agent"
	"github.com/hsbx/hsbx/internal/wire"
)

// pair connects a Conn to an in-process agent over two pipes.
func pair(t *testing.T) *Conn {
	t.Helper()
	return pairWith(t, defaultBounds())
}

// pairWith is pair with the liveness bounds b.
func pairWith(t *testing.T, b bounds) *Conn {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- agent.Serve(toAgentR, fromAgentW, "test")
		fromAgentW.Close()
	}()
	c, err := newConn(fromAgentR, toAgentW, toAgentW, 5*time.Second, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("agent did not exit after the channel closed")
		}
	})
	return c
}

func run(t *testing.T, c *Conn, argv []string, mod func(*Request)) (Result, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	req := Request{Start: wire.Start{Argv: argv}, Stdout: &out, Stderr: &errb}
	if mod != nil {
		mod(&req)
	}
	res, err := c.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return res, out.String(), errb.String()
}

func TestConnRunsCommands(t *testing.T) {
	c := pair(t)
	tests := []struct {
		name        string
		argv        []string
		mod         func(*Request)
		code        int
		out, errOut string
	}{
		{"exit status", []string{"sh", "-c", "exit 7"}, nil, 7, "", ""},
		{"streams apart", []string{"sh", "-c", "echo out; echo err >&2"}, nil, 0, "out\n", "err\n"},
		{"engine words are data", []string{"sh", "-c", "echo 'Error: no such container: x' >&2; exit 1"}, nil, 1, "", "Error: no such container: x\n"},
		{"env with commas and =", []string{"sh", "-c", `printf %s "$V"`}, func(r *Request) { r.Start.Env = []string{"V=a,b=c"} }, 0, "a,b=c", ""},
		{"workdir", []string{"pwd"}, func(r *Request) { r.Start.Dir = "/tmp" }, 0, "/tmp\n", ""},
		{"not found", []string{"no-such-cmd-hsbx"}, nil, 127, "", "hsbx: exec: \"no-such-cmd-hsbx\": executable file not found in $PATH\n"},
		{"not executable", []string{"/etc/passwd"}, nil, 126, "", "hsbx: exec: \"/etc/passwd\": permission denied\n"},
		{"no stdin means empty", []string{"cat"}, nil, 0, "", ""},
		{"stdin", []string{"cat"}, func(r *Request) { r.Stdin = strings.NewReader("hello\n") }, 0, "hello\n", ""},
		{"killed by signal", []string{"sh", "-c", "kill -9 $$"}, nil, 137, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out, errOut := run(t, c, tt.argv, tt.mod)
			if res.Code != tt.code || out != tt.out || errOut != tt.errOut {
				t.Errorf("got (%d, %q, %q), want (%d, %q, %q)", res.Code, out, errOut, tt.code, tt.out, tt.errOut)
			}
		})
	}
}

func TestConnStreamsLargeDataBothWays(t *testing.T) {
	c := pair(t)
	data := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 3<<20/18) // binary, 3 MB
	want := sha256.Sum256(data)
	h := sha256.New()
	res, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"cat"}}, Stdin: bytes.NewReader(data), Stdout: h})
	if err != nil || res.Code != 0 {
		t.Fatal(res, err)
	}
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("output differs from input")
	}
}

func TestConnKillsTheGroupAndMarkedProcesses(t *testing.T) {
	c := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	// A child in a session of its own leaves the group; the marker finds it.
	start := time.Now()
	res, err := c.Run(ctx, Request{Start: wire.Start{Argv: []string{"sh", "-c", "setsid sleep 30 & sleep 30"}, Marker: "HSBX_EXEC_ID=t1"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Code != 137 || res.Killed < 2 {
		t.Fatalf("got %+v, want interrupted, 137, >=2 killed", res)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("kill took too long: output pipe held open by a survivor?")
	}
}

func TestConnMultiplexesConcurrentCommands(t *testing.T) {
	c := pair(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			res, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"sh", "-c", "echo $N; exit $N"}, Env: []string{"N=" + string(rune('0'+i%10))}}, Stdout: &out})
			if err != nil {
				errs <- err
				return
			}
			if res.Code != i%10 || out.String() != string(rune('0'+i%10))+"\n" {
				errs <- errors.New("mixed up: " + out.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConnAfterTheAgentDiesIsNotDelivered(t *testing.T) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() { _ = agent.Serve(toAgentR, fromAgentW, "test"); fromAgentW.Close() }()
	c, err := NewConn(fromAgentR, toAgentW, toAgentW, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A running command when the agent's output dies: it may have run.
	got := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"sleep", "30"}}})
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	fromAgentW.CloseWithError(io.ErrClosedPipe)
	var be *BrokenError
	if err := <-got; !errors.As(err, &be) {
		t.Fatalf("running command: got %v, want *BrokenError", err)
	}
	// Later commands never reach it.
	if _, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"true"}}}); !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("after: got %v, want ErrNotDelivered", err)
	}
	toAgentW.Close()
}
