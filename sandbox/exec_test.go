package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// brokenPipe fails every write, as a pipe whose reader went away does.
type brokenPipe struct{ writes int }

func (b *brokenPipe) Write(p []byte) (int, error) { b.writes++; return 0, syscall.EPIPE }

// When the reader goes away, the command is stopped in the sandbox and
// Exec says the writer failed (it used to return 141 with no error while
// the command ran on).
func TestFailedWriterStopsTheCommand(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.shared(t, false)
		w := &brokenPipe{}
		_, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo first; sleep 303"}, Stdout: w})
		var ie *sandbox.InterruptedError
		var we *sandbox.WriterError
		if !errors.As(err, &ie) || !errors.As(err, &we) || !errors.Is(err, syscall.EPIPE) || ie.KillErr != nil || ie.Killed < 1 {
			t.Fatalf("Exec with a broken stdout: %v", err)
		}
		var ps bytes.Buffer
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"ps"}, Stdout: &ps}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ps.String(), "sleep 303") {
			t.Errorf("the command runs on after its reader went away:\n%s", ps.String())
		}
	})
}

// A non-nil Stdin is passed to the command without Interactive.
func TestStdinIsPassed(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var out bytes.Buffer
		code, err := e.shared(t, false).Exec(context.Background(),
			sandbox.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("fed in\n"), Stdout: &out})
		if err != nil || code != 0 || out.String() != "fed in\n" {
			t.Fatalf("cat with Stdin: %d %v %q", code, err, out.String())
		}
	})
}

// Command env: values verbatim (commas, =); the kill marker refused
// before any engine call; names the engine client reads itself
// (DOCKER_HOST, HOME, PATH, LD_*) reach the command and steer nothing —
// docker and podman pass them in an env file, kubectl on the exec's stdin
// — with no channel to carry them (here it is off); on docker and podman
// such a name whose value an env file cannot hold (a line break) is
// refused before any engine call.
func TestCommandEnv(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.shared(t, false)
		var out bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo [$X]"}, Env: map[string]string{"X": "a,b=c"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "[a,b=c]\n" {
			t.Fatalf("env with a comma: %d %v %q", code, err, out.String())
		}
		out.Reset()
		code, err = sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `echo "$DOCKER_HOST|$HOME|$LD_LIBRARY_PATH|$PATH"`}, Stdout: &out,
			Env: map[string]string{"DOCKER_HOST": "tcp://evil:1", "HOME": "/h", "LD_LIBRARY_PATH": "/nowhere", "PATH": "/usr/bin:/bin:/x"}})
		if err != nil || code != 0 || out.String() != "tcp://evil:1|/h|/nowhere|/usr/bin:/bin:/x\n" {
			t.Fatalf("env DOCKER_HOST, HOME, LD_LIBRARY_PATH and PATH: %d %v %q", code, err, out.String())
		}
		e.log.reset()
		refused := []map[string]string{{"HSBX_EXEC_ID": "x"}}
		if !e.kube() {
			refused = append(refused, map[string]string{"PATH": "/bin\n/x"})
		}
		for _, env := range refused {
			_, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}, Env: env})
			var se *sandbox.SpecError
			if !errors.As(err, &se) {
				t.Errorf("env %q accepted: %v", env, err)
			}
		}
		if len(e.log.all()) != 0 {
			t.Errorf("refused env still reached the engine: %v", e.log.all())
		}
	})
}

// Output, CombinedOutput and Lines on every engine; leaving Lines early
// stops the command in the sandbox.
func TestOutputHelpers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.shared(t, false)
		if out, err := sb.Output(ctx, "sh", "-c", "echo out; echo err >&2"); err != nil || string(out) != "out\n" {
			t.Fatalf("Output: %q %v", out, err)
		}
		_, err := sb.Output(ctx, "sh", "-c", "echo why >&2; exit 4")
		var ee *sandbox.ExitError
		if !errors.As(err, &ee) || ee.Code != 4 || string(ee.Stderr) != "why\n" {
			t.Fatalf("Output exit 4: %v", err)
		}
		if out, err := sb.CombinedOutput(ctx, "sh", "-c", "echo a; echo b >&2"); err != nil || !strings.Contains(string(out), "a\n") || !strings.Contains(string(out), "b\n") {
			t.Fatalf("CombinedOutput: %q %v", out, err)
		}
		var lines []string
		for line, err := range sb.Lines(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo one; echo two; exit 2"}}) {
			if err != nil {
				if !errors.As(err, &ee) || ee.Code != 2 {
					t.Fatalf("Lines error: %v", err)
				}
				continue
			}
			lines = append(lines, line)
		}
		if strings.Join(lines, ",") != "one,two" {
			t.Fatalf("Lines: %q", lines)
		}
		endless := "endless-" + e.base // the sandbox is shared: this test's own
		for range sb.Lines(ctx, sandbox.Command{Argv: []string{"yes", endless}}) {
			break
		}
		if out, _ := sb.Output(ctx, "ps"); strings.Contains(string(out), endless) {
			t.Errorf("yes runs on after the loop stopped:\n%s", out)
		}
	})
}

// Exec calls its context's WithBeforeStart hook before anything that
// starts: on a cold
// exec before its first engine call, on a warm one whose holder is not
// there before the plain exec and the holder's start (the CLI waits there
// for its signal handlers).
func TestExecCallsBeforeStartFirst(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var events []string
		note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
		ctx := sandbox.WithBeforeStart(context.Background(), func() {
			note(fmt.Sprintf("before start, %d engine calls made", len(e.log.all())))
		})
		m := sandbox.New(sandbox.Config{
			Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {},
			Channel: true, Agent: enginetest.AgentBinary(t),
			Holders: channel.Holders{Dir: t.TempDir(), OnStart: func(channel.HoldSpec) { note("holder started") }},
		})
		for _, run := range []string{"cold", "warm"} {
			sb := m.Sandbox(e.key("before-start"), e.spec())
			e.log.reset()
			mu.Lock()
			events = nil
			mu.Unlock()
			if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
				t.Fatalf("%s exec: %d, %v", run, code, err)
			}
			mu.Lock()
			got := slices.Clone(events)
			mu.Unlock()
			if len(got) == 0 || got[0] != "before start, 0 engine calls made" || len(e.log.all()) == 0 {
				t.Errorf("%s exec: events %q, %d engine calls; want BeforeStart first, before any engine call", run, got, len(e.log.all()))
			}
			if run == "warm" && !slices.Contains(got, "holder started") {
				t.Errorf("warm exec: events %q; want the holder started after the plain exec", got)
			}
		}
	})
}
