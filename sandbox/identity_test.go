package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// A command whose own stderr reads like the engine's "no such container /
// not running / paused" runs once; its stderr and status are delivered
// unchanged (the engine confirms the sandbox is running).
func TestEngineWordsFromTheCommandRunOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.shared(t, false)
		type tc struct {
			msg  string
			code int
		}
		cases := []tc{
			{"Error response from daemon: No such container: x", 1},
			{"Error response from daemon: Container x is not running", 1},
			{"Error response from daemon: Container x is paused, unpause the container before exec", 1},
		}
		if e.tg.Dialect() == runtime.Podman {
			cases = []tc{
				{"Error: no container with name or ID x found: no such container", 125},
				{"Error: can only create exec sessions on running containers: container state improper", 255},
				{"Error: no such container", 125},
			}
		}
		for i, c := range cases {
			var out, errb bytes.Buffer
			count := fmt.Sprintf("/tmp/%scount%d", e.base, i) // the sandbox is shared: this test's own
			script := fmt.Sprintf(`echo run; echo run >> %s; echo "%s" >&2; exit %d`, count, c.msg, c.code)
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
			if err != nil || code != c.code {
				t.Errorf("%q: exit %d, err %v; want %d, nil", c.msg, code, err, c.code)
			}
			if out.String() != "run\n" || errb.String() != c.msg+"\n" {
				t.Errorf("%q: stdout %q stderr %q", c.msg, out.String(), errb.String())
			}
			if !e.tg.Fake { // the fakes' shell drops file redirections
				out.Reset()
				sb.Exec(ctx, sandbox.Command{Argv: []string{"cat", count}, Stdout: &out})
				if out.String() != "run\n" {
					t.Errorf("%q: the command ran %d times", c.msg, strings.Count(out.String(), "run"))
				}
			}
		}
	})
}

// A sandbox removed behind hsbx's back: the exec cannot have started, the
// engine confirms it is gone, and the command runs once in a new sandbox.
func TestExecAfterRemovalRunsOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.manager().Sandbox(e.key("gone"), e.spec())
		first, err := sb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rt.Remove(ctx, true, first.ID); err != nil {
			t.Fatal(err)
		}
		e.log.reset()
		var out bytes.Buffer
		code, err := e.manager().Sandbox(e.key("gone"), e.spec()).Exec(ctx, sandbox.Command{Argv: []string{"echo", "once"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "once\n" {
			t.Fatalf("exec: %d %v %q", code, err, out.String())
		}
		if n := count(e.log.all(), " exec "); n != 2 {
			t.Errorf("%d exec calls, want 2 (the failed one, the one that ran): %v", n, e.log.all())
		}
	})
}

// A container that squats on the derived name never receives a command:
// exec refuses it as up does, and it is left running.
func TestSquatterNeverReceivesCommands(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		k := e.key("squat")
		id, err := e.rt.Run(ctx, runtime.RunSpec{Name: k.Name(), Image: e.tg.Image, Cmd: []string{"sleep", "infinity"},
			Labels: map[string]string{"hermes-agent": "1", "hsbx.profile": "hsbx-test", "hsbx.task": k.Task}, Args: e.airgap()})
		if err != nil {
			t.Fatal(err)
		}
		e.log.reset()
		var out bytes.Buffer
		_, err = e.manager("SECRET=s3cret").Sandbox(k, e.spec()).Exec(ctx, sandbox.Command{Argv: []string{"echo", "ran"}, Stdout: &out,
			Env: map[string]string{"SECRET": "s3cret"}})
		if !errors.Is(err, sandbox.ErrForeignName) || out.Len() > 0 {
			t.Fatalf("exec over a squatter: %v, output %q", err, out.String())
		}
		if n := count(e.log.all(), " exec "); n != 0 {
			t.Errorf("an exec reached the engine: %v", e.log.all())
		}
		if cs, err := e.rt.Inspect(ctx, id); err != nil || cs[0].State != runtime.StateRunning {
			t.Errorf("the squatter was touched: %+v %v", cs, err)
		}
		if c, ok := e.manager().Sandbox(k, e.spec()).Squatter(ctx); !ok || c.ID != id {
			t.Errorf("Squatter() = %v %v", c.ID, ok)
		}
	})
}

// A "created" sandbox whose creator died on this host (a killed up) is
// recovered at once instead of being waited out as a create in progress.
func TestDeadCreatorIsNotWaitedFor(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no boot id on this host")
	}
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("a Pod is made in one step (kubectl create) and Run removes one that does not start: no creator leaves one half-made")
		ctx := context.Background()
		k := e.key("dead-creator")
		labels := k.Labels()
		labels[sandbox.LabelCreator] = strings.TrimSpace(string(boot)) + "/4194303" // no such pid
		args := []string{"create", "--name", k.Name()}
		for name, v := range labels {
			args = append(args, "--label", name+"="+v)
		}
		args = append(args, "--network", "none", e.tg.Image, "sleep", "infinity")
		if out, err := runEngine(e, args...); err != nil {
			t.Fatalf("create: %v %s", err, out)
		}
		e.log.reset()
		spec := e.spec()
		spec.Network = false
		res, err := e.manager().Sandbox(k, spec).Ensure(ctx)
		if err != nil || res.Action != sandbox.Started {
			t.Fatalf("Ensure: %+v %v", res, err)
		}
		// Waiting would show as repeated probes.
		if n := count(e.log.all(), " ps "); n != 1 {
			t.Errorf("%d probes, want 1 (no waiting for a dead creator): %v", n, e.log.all())
		}
	})
}

// runEngine runs the target's engine CLI directly (setup the Runtime
// interface does not offer).
func runEngine(e *env, args ...string) (string, error) {
	res, err := (&proc.Runner{}).Run(context.Background(), proc.Cmd{Argv: append([]string{e.tg.Bin}, args...), Env: e.tg.Env, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	return string(res.Stdout) + string(res.Stderr), err
}

func count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// stopOnInspect stops the container before the first Inspect answers:
// the sandbox goes down between the exec's end and hsbx's question.
type stopOnInspect struct {
	runtime.Runtime
	once sync.Once
}

func (r *stopOnInspect) Inspect(ctx context.Context, ids ...string) ([]runtime.Container, error) {
	r.once.Do(func() { _ = r.Stop(ctx, ids[0], 0) })
	return r.Runtime.Inspect(ctx, ids...)
}

// The review's double run: a command prints the engine's "not running"
// words and exits with the engine's status while its sandbox stops. The
// engine then confirms "not running", yet the command ran: hsbx must
// report it (the stderr kept), never start the sandbox and run it again.
func TestStoppedDuringExecIsNotRunAgain(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("stop deletes the Pod: there is no stopped sandbox to ask")
		ctx := context.Background()
		if _, err := e.manager().Sandbox(e.key("stopping"), e.spec()).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		msg, code := "Error response from daemon: Container x is not running", 1
		if e.tg.Dialect() == runtime.Podman {
			msg, code = "Error: can only create exec sessions on running containers: container state improper", 255
		}
		m := sandbox.New(sandbox.Config{Runtime: &stopOnInspect{Runtime: e.rt}, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}})
		sb := m.Sandbox(e.key("stopping"), e.spec())
		e.log.reset()
		var out, errb bytes.Buffer
		script := fmt.Sprintf(`echo run; echo "%s" >&2; exit %d`, msg, code)
		got, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
		var sd *sandbox.StoppedDuringExecError
		if !errors.As(err, &sd) || !errors.Is(err, runtime.ErrNotRunning) || sd.Code != code {
			t.Fatalf("exit %d, err %v: want a StoppedDuringExecError with status %d", got, err, code)
		}
		if out.String() != "run\n" || errb.String() != msg+"\n" {
			t.Fatalf("ran %d time(s); stderr %q", strings.Count(out.String(), "run"), errb.String())
		}
		for _, l := range e.log.all() {
			if strings.Contains(l, " start ") || strings.Contains(l, " run ") {
				t.Fatalf("hsbx started the sandbox again: %s", l)
			}
		}
	})
}
