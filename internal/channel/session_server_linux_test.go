package channel

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agent"
	"github.com/hsbx/hsbx/internal/wire"
)

func TestSessionIdleLimit(t *testing.T) {
	sc := sessionShells(t)[0]
	sessionEnv(t, sc)
	c := pair(t)
	first := srun(t, c, "idle", "cd /", func(r *Request) { r.Start.SessionIdleMS = 1500 })
	if first.runErr != nil {
		t.Fatal(first.runErr)
	}
	time.Sleep(4 * time.Second)
	r := srun(t, c, "idle", "pwd", nil)
	if !r.Session.New || !strings.Contains(r.Session.Reset, "idle") {
		t.Fatalf("after the idle limit: %+v", r.Session)
	}
	closeSession(t, c, "idle")
}

func BenchmarkSessionBuiltin(b *testing.B) {
	t := &testing.T{}
	_ = t
	b.Setenv(SessionsDirVarForTest, b.TempDir())
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() { _ = agent.Serve(toAgentR, fromAgentW, "bench"); fromAgentW.Close() }()
	c, err := newConn(fromAgentR, toAgentW, toAgentW, 5*time.Second, defaultBounds())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	run := func() {
		res, err := c.Run(context.Background(), Request{Start: wire.Start{Session: "bench", Script: "cd /tmp"}})
		if err != nil || res.Code != 0 {
			b.Fatal(err, res.Code)
		}
	}
	run()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.StopTimer()
	_, _ = c.Run(context.Background(), Request{Start: wire.Start{Session: "bench", Op: wire.SessionOpClose}})
}

// A run queued behind a script that ends the shell is not delivered to
// that keeper; the agent runs it on the next one — with all of its stdin,
// which had already gone to the first keeper.
func TestSessionStdinSurvivesRetry(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			srun(t, c, "retry", "true", nil)
			ender := make(chan sres, 1)
			go func() { ender <- srun(t, c, "retry", "sleep 1; exit 3", nil) }()
			time.Sleep(300 * time.Millisecond) // the ender holds the shell
			r := srun(t, c, "retry", `cat; echo "[$?]"`, func(q *Request) { q.Stdin = strings.NewReader("line one\nline two\n") })
			if r.runErr != nil || r.Code != 0 || r.out != "line one\nline two\n[0]\n" || r.Session == nil || !r.Session.New {
				t.Fatalf("the queued run: %+v %q %q", r, r.out, r.err)
			}
			if e := <-ender; e.Code != 3 || e.Session == nil || e.Session.Ended == "" {
				t.Fatalf("the ender: %+v", e)
			}
			closeSession(t, c, "retry")
		})
	}
}

// A process of the sandbox's user holding the session server's socket,
// accepting and never answering: every wait on it is bounded. A run
// with a deadline ends soon after it (interrupted, the channel intact),
// one without is hsbx's failure after the server's bound, and a listing
// fails within its own bound instead of hanging.
func TestSessionServerThatNeverAnswers(t *testing.T) {
	sc := sessionShells(t)[0]
	sessionEnv(t, sc)
	base := filepath.Join(os.Getenv(SessionsDirVarForTest), ".hsbx-sessions2-"+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(base, ".server.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	c := pair(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	r := srunCtx(ctx, t, c, "s", "true", nil)
	if d := time.Since(start); r.runErr != nil || !r.Interrupted || d > KillWait {
		t.Fatalf("a run with a 1s deadline: %+v %v after %s, want interrupted within %s", r.Result, r.runErr, d, KillWait)
	}

	start = time.Now()
	r = srun(t, c, "s", "true", nil)
	if d := time.Since(start); r.runErr != nil || r.Code != 125 || !strings.Contains(r.Failure.Msg, "did not answer within") || d > 15*time.Second {
		t.Fatalf("a run without a deadline: %+v %v after %s", r.Result, r.runErr, d)
	}

	start = time.Now()
	l := srun(t, c, "", "", func(q *Request) { q.Start.Op = wire.SessionOpList })
	if d := time.Since(start); l.runErr != nil || l.Code != 125 || !strings.Contains(l.err, "did not answer within") || d > 8*time.Second {
		t.Fatalf("listing: %+v %q %v after %s", l.Result, l.err, l.runErr, d)
	}
	// The channel is whole: a plain command runs.
	if r, err := c.Run(context.Background(), Request{Start: wire.Start{Argv: []string{"true"}}}); err != nil || r.Code != 0 {
		t.Fatalf("a command after all that: %+v %v", r, err)
	}
}

// Closing a session ends everything it started, however it detached: a
// background job, a setsid one, one that ignores SIGHUP in a child shell
// and in a subshell.
func TestSessionCloseEndsItsJobs(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			tag := strconv.Itoa(7000 + os.Getpid()%1000)
			script := `sleep ` + tag + `1 & setsid sleep ` + tag + `2 & sh -c 'trap "" HUP; exec sleep ` + tag + `3' & (trap "" HUP; sleep ` + tag + `4) & true`
			if r := srun(t, c, "jobs", script, nil); r.runErr != nil || r.Code != 0 {
				t.Fatalf("starting the jobs: %+v %q", r.Result, r.err)
			}
			running := func() []string {
				var found []string
				ents, _ := os.ReadDir("/proc")
				for _, e := range ents {
					b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
					if err == nil && strings.Contains(string(b), "sleep\x00"+tag) {
						found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
					}
				}
				return found
			}
			for deadline := time.Now().Add(5 * time.Second); len(running()) < 4 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			}
			if n := len(running()); n != 4 {
				t.Fatalf("%d of the 4 jobs started: %q", n, running())
			}
			closeSession(t, c, "jobs")
			for deadline := time.Now().Add(5 * time.Second); len(running()) > 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			}
			if left := running(); len(left) > 0 {
				t.Fatalf("after close, still running: %q", left)
			}
		})
	}
}
