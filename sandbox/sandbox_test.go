package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

// argvLog records every engine argv (the runner logs each call at debug).
type argvLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *argvLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *argvLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "argv" {
			l.mu.Lock()
			l.lines = append(l.lines, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
func (l *argvLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *argvLog) WithGroup(string) slog.Handler      { return l }

func (l *argvLog) reset() { l.mu.Lock(); l.lines = nil; l.mu.Unlock() }
func (l *argvLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// env is one target with a manager factory and cleanup of every key used.
type env struct {
	t    *testing.T
	tg   enginetest.Target
	rt   runtime.Runtime
	log  *argvLog
	base string // unique task prefix
}

func (e *env) manager(environ ...string) *sandbox.Manager {
	return sandbox.New(sandbox.Config{
		Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
		Environ: append(e.tg.Env, environ...), UID: 0, GID: 0, StopGrace: 5 * time.Second,
		Warn: func(string) {},
	})
}

// openWith opens the target's engine with extra client environment (fake
// engine knobs), logging calls to the same argv log.
func (e *env) openWith(environ []string) runtime.Runtime {
	tg := e.tg
	tg.Env = append(append([]string{}, tg.Env...), environ...)
	return tg.OpenWith(e.t, &proc.Runner{Log: slog.New(e.log)})
}

func (e *env) spec() sandbox.Spec {
	s := sandbox.DefaultSpec()
	s.Image = e.tg.Image
	return s
}

// kube reports whether the target is the Kubernetes cluster.
func (e *env) kube() bool { return e.tg.Dialect() == runtime.Kubectl }

// airgap is the run flags a test's own containers get: --network none,
// except on Kubernetes, where it would make a NetworkPolicy as well.
func (e *env) airgap(args ...string) []string {
	if e.kube() {
		return args
	}
	return append(args, "--network", "none")
}

// skipOnKube skips a behaviour that docs/kubernetes.md says does not apply to
// the kubectl runtime.
func (e *env) skipOnKube(why string) {
	if e.kube() {
		e.t.Skip("not on Kubernetes (docs/kubernetes.md): " + why)
	}
}

func (e *env) key(task string) sandbox.Key {
	return sandbox.Key{Profile: "hsbx-test", Task: e.base + task}
}

// each runs fn on every target: the fakes, the real engines and the real
// Kubernetes cluster (where a behaviour differs there by design, the test
// says so with kube). The targets run side by side (go test's -parallel
// of them at once): they are different engines, and one after another
// the real ones took the package past go test's timeout. A test's targets
// share nothing on the host but what each names with its own e.base.
// (One pool for every test's targets, the tests side by side too, was
// tried: on this project's 2-core machine the engines' own work is the
// limit, and the pool only made every test slower.)
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	targets := enginetest.Targets(t)
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		targets = append(targets, kt)
	}
	eachOf(t, targets, fn)
}

// eachWithSSH is each with the engines reached over ssh too
// (enginetest.SSHTargets), for a promise whose parts are on both
// machines: the relay and the broker on this one, the sandbox on the
// engine's.
func eachWithSSH(t *testing.T, fn func(t *testing.T, e *env)) {
	targets := enginetest.Targets(t)
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		targets = append(targets, kt)
	}
	if st, ok := enginetest.SSHTargetsIfConfigured(t); ok {
		targets = append(targets, st...)
	}
	eachOf(t, targets, fn)
}

func eachOf(t *testing.T, targets []enginetest.Target, fn func(t *testing.T, e *env)) {
	for i, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			log := &argvLog{}
			rt := tg.OpenWith(t, &proc.Runner{Log: slog.New(log)})
			e := &env{t: t, tg: tg, rt: rt, log: log, base: fmt.Sprintf("t%d%d-", i, time.Now().UnixNano()%1e9)}
			t.Cleanup(func() {
				cs, _ := rt.List(context.Background(), runtime.ListOptions{Labels: []string{"hsbx.profile=hsbx-test"}})
				var ids []string
				for _, c := range cs {
					if strings.HasPrefix(c.Labels["hsbx.task"], e.base) {
						ids = append(ids, c.ID)
					}
				}
				_ = rt.Remove(context.Background(), true, ids...)
				if vr, ok := rt.(runtime.Volumes); ok && tg.Remote { // storage = auto keeps a key's files there
					vs, _ := vr.ListVolumes(context.Background(), map[string]string{"hsbx.profile": "hsbx-test"})
					var names []string
					for _, v := range vs {
						if strings.HasPrefix(v.Labels["hsbx.task"], e.base) {
							names = append(names, v.Name)
						}
					}
					_ = vr.RemoveVolumes(context.Background(), names...)
				}
			})
			fn(t, e)
		})
	}
}

func TestLifecycle(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.manager().Sandbox(e.key("life"), e.spec())
		res, err := sb.Ensure(ctx)
		if err != nil || res.Action != sandbox.Created || (len(res.ID) != 64 && !e.kube()) {
			t.Fatalf("first Ensure: %+v %v", res, err)
		}
		// Another process (a fresh manager) attaches with one engine call.
		e.log.reset()
		other := e.manager().Sandbox(e.key("life"), e.spec())
		res2, err := other.Ensure(ctx)
		if err != nil || res2.Action != sandbox.Reused || res2.ID != res.ID {
			t.Fatalf("second Ensure: %+v %v", res2, err)
		}
		if calls := e.log.all(); len(calls) != 1 {
			t.Errorf("warm Ensure made %d engine calls: %v", len(calls), calls)
		}
		// A warm exec is one call too.
		e.log.reset()
		var out bytes.Buffer
		code, err := other.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo hi"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "hi\n" {
			t.Fatalf("exec: %d %q %v", code, out.String(), err)
		}
		if calls := e.log.all(); len(calls) != 1 {
			t.Errorf("warm exec made %d engine calls: %v", len(calls), calls)
		}
		if !e.tg.Fake { // the fakes' shell has no background jobs
			// Persist mode: a background process one "process" started
			// survives its end (Close is a no-op) and the next one sees it.
			if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "sleep 1234 >/dev/null 2>&1 &"}}); err != nil {
				t.Fatal(err)
			}
			if err := sb.Close(ctx); err != nil {
				t.Fatal(err)
			}
			next := e.manager().Sandbox(e.key("life"), e.spec())
			if res, err := next.Ensure(ctx); err != nil || res.Action != sandbox.Reused {
				t.Fatalf("Ensure after Close: %+v %v", res, err)
			}
			var ps bytes.Buffer
			if _, err := next.Exec(ctx, sandbox.Command{Argv: []string{"ps"}, Stdout: &ps}); err != nil || !strings.Contains(ps.String(), "sleep 1234") {
				t.Errorf("the background process did not survive the session's end: %v\n%s", err, ps.String())
			}
		}
		// Stop keeps it; Ensure starts the same container again. On
		// Kubernetes a Pod cannot be stopped and kept: stop deletes it,
		// and Ensure makes a new one.
		if sr, err := sb.Stop(ctx); sr != sandbox.Stopped || err != nil {
			t.Fatalf("Stop: %v %v", sr, err)
		}
		again := sandbox.AlreadyStopped
		if e.kube() {
			again = sandbox.NoSandbox
		}
		if sr, err := sb.Stop(ctx); sr != again || err != nil {
			t.Fatalf("Stop again: %v %v", sr, err)
		}
		res3, err := sb.Ensure(ctx)
		switch {
		case e.kube() && (err != nil || res3.Action != sandbox.Created || res3.ID == res.ID):
			t.Fatalf("Ensure after Stop (Kubernetes: a new Pod): %+v %v", res3, err)
		case !e.kube() && (err != nil || res3.Action != sandbox.Started || res3.ID != res.ID):
			t.Fatalf("Ensure after Stop: %+v %v", res3, err)
		}
		res.ID = res3.ID
		// Exec on a stopped sandbox starts it and runs the command once.
		if _, err := sb.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		code, err = other.Exec(ctx, sandbox.Command{Argv: []string{"echo", "once"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "once\n" {
			t.Fatalf("exec on a stopped sandbox: %d %q %v", code, out.String(), err)
		}
		removed, err := sb.Down(ctx)
		if err != nil || len(removed.Containers) != 1 || (removed.Containers[0].ID != res.ID && !e.kube()) {
			t.Fatalf("Down: %+v %v", removed, err)
		}
		if cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: e.key("life").Filters()}); len(cs) != 0 {
			t.Errorf("after Down: %+v", cs)
		}
		if removed, err := sb.Down(ctx); err != nil || len(removed.Containers) != 0 {
			t.Errorf("second Down: %+v %v", removed, err)
		}
	})
}

func TestConcurrentEnsure(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const n = 8
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.manager().Sandbox(e.key("race"), e.spec()).Ensure(context.Background())
				ids[i], errs[i] = res.ID, err
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Errorf("Ensure %d: %s %v (first %s)", i, ids[i], errs[i], ids[0])
			}
		}
		cs, err := e.rt.List(context.Background(), runtime.ListOptions{Labels: e.key("race").Filters()})
		if err != nil || len(cs) != 1 {
			t.Errorf("%d containers for one key after %d concurrent Ensures: %v", len(cs), n, err)
		}
	})
}

func TestExecExitCodesPassThrough(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		sb := e.manager().Sandbox(e.key("codes"), e.spec())
		for _, want := range []int{0, 1, 2, 125, 126, 127, 255} {
			code, err := sb.Exec(context.Background(), sandbox.Command{Argv: []string{"sh", "-c", fmt.Sprintf("exit %d", want)}})
			if err != nil || code != want {
				t.Errorf("exit %d: got %d %v", want, code, err)
			}
		}
	})
}

func TestTimeoutKillsTheCommandInTheSandbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.manager().Sandbox(e.key("timeout"), e.spec())
		if _, err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		ie := interruptStarted(t, time.Second, func(wait time.Duration, out io.Writer) error {
			_, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo up; sleep 300 & sleep 301"}, Timeout: wait, Stdout: out})
			return err
		})
		if !errors.Is(ie, sandbox.ErrCommandTimeout) || ie.KillErr != nil || ie.Killed < 1 {
			t.Fatalf("Exec with timeout: %v", ie)
		}
		var ps bytes.Buffer
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"ps"}, Stdout: &ps}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ps.String(), "sleep 30") {
			t.Errorf("processes left in the sandbox after the timeout:\n%s", ps.String())
		}
		// The caller's context (a signal) kills the same way.
		ie = interruptStarted(t, time.Second, func(wait time.Duration, out io.Writer) error {
			cctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go func() { time.Sleep(wait); cancel(errors.New("test signal")) }()
			_, err := sb.Exec(cctx, sandbox.Command{Argv: []string{"sh", "-c", "echo up; exec sleep 302"}, Stdout: out})
			return err
		})
		if ie.Killed != 1 || ie.Cause.Error() != "test signal" {
			t.Fatalf("Exec cancelled: %v", ie)
		}
	})
}

// interruptStarted runs a command that prints "up" first and then runs on,
// stopped by run after wait, until an attempt shows the command had started
// before it was stopped (the wait grows: 1×, 3×, 9×). A command the engine
// had not started yet has nothing to kill — Killed 0 is then right and
// proves nothing; rootless podman on a loaded machine takes over a second to
// start an exec, and a client killed before that leaves nothing to run.
func interruptStarted(t *testing.T, wait time.Duration, run func(wait time.Duration, stdout io.Writer) error) *sandbox.InterruptedError {
	t.Helper()
	for _, w := range []time.Duration{wait, 3 * wait, 9 * wait} {
		var out bytes.Buffer
		start := time.Now()
		err := run(w, &out)
		var ie *sandbox.InterruptedError
		if !errors.As(err, &ie) {
			t.Fatalf("the command was not interrupted: %v", err)
		}
		if d := time.Since(start); d > w+20*time.Second {
			t.Errorf("stopping the command took %s after its %s", d-w, w)
		}
		if strings.HasPrefix(out.String(), "up\n") {
			return ie
		}
		t.Logf("the command had not started in %s (%v): waiting longer", w, err)
	}
	t.Fatalf("the command did not start in %s", 9*wait)
	return nil
}

func TestSecretsNeverOnArgv(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.spec()
		spec.Env = map[string]string{"API_KEY": "literal-s3cret"}
		spec.ForwardEnv = []string{"GITHUB_TOKEN"}
		if !e.kube() { // extra_args are docker/podman run flags
			// extra_args' values too (they were on the client's argv)
			spec.ExtraArgs = []string{"--env", "ARGS_KEY=args-s3cret", "-eSHORT_KEY=short-s3cret"}
		}
		sb := e.manager("GITHUB_TOKEN=forwarded-s3cret").Sandbox(e.key("secrets"), spec)
		var out bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo $API_KEY $GITHUB_TOKEN $EXTRA $ARGS_KEY $SHORT_KEY"},
			Env: map[string]string{"EXTRA": "exec-s3cret"}, Stdout: &out})
		want := "literal-s3cret forwarded-s3cret exec-s3cret args-s3cret short-s3cret\n"
		if e.kube() {
			want = "literal-s3cret forwarded-s3cret exec-s3cret\n"
		}
		if err != nil || code != 0 || out.String() != want {
			t.Fatalf("exec: %d %q %v", code, out.String(), err)
		}
		argv := e.log.all()
		if len(argv) < 3 {
			t.Fatalf("argv log too short: %v", argv)
		}
		for _, a := range argv {
			if strings.Contains(a, "s3cret") {
				t.Errorf("a secret value is on an engine argv: %s", a)
			}
		}
	})
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.spec()
		// An unknown user fails at start, after the engine made the
		// container: all three real engines leave it "created" (measured).
		spec.ExtraArgs = []string{"--user", "hsbx-no-such-user"}
		if e.tg.Fake {
			t.Skip("the fakes model a failed start with FAKEENGINE_RUN_START_FAILS (up_create_fails_cleanup.txtar)")
		}
		_, err := e.manager().Sandbox(e.key("fail"), spec).Ensure(ctx)
		if err == nil {
			t.Fatal("Ensure with an unknown user succeeded")
		}
		cs, lerr := e.rt.List(ctx, runtime.ListOptions{Labels: e.key("fail").Filters()})
		if lerr != nil || len(cs) != 0 {
			t.Errorf("a failed create left %d container(s): %+v (%v)", len(cs), cs, err)
		}
	})
}

func TestForeignNameIsLeftAlone(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		k := e.key("foreign")
		id, err := e.rt.Run(ctx, runtime.RunSpec{Name: k.Name(), Image: e.tg.Image, Cmd: []string{"sleep", "infinity"},
			Labels: map[string]string{"hsbx.profile": "hsbx-test", "hsbx.task": k.Task}, Args: e.airgap()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.manager().Sandbox(k, e.spec()).Ensure(ctx); !errors.Is(err, sandbox.ErrForeignName) {
			t.Fatalf("Ensure over a foreign container: %v", err)
		}
		cs, err := e.rt.Inspect(ctx, id)
		if err != nil || cs[0].State != runtime.StateRunning {
			t.Errorf("the foreign container was touched: %+v %v", cs, err)
		}
	})
}

func TestPerProcessSandboxes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.spec()
		spec.PersistAcrossProcesses = false
		a := e.manager().Sandbox(e.key("pp"), spec)
		b := e.manager().Sandbox(e.key("pp"), spec)
		ra, err := a.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Ensure(ctx)
		if err != nil || rb.ID == ra.ID {
			t.Fatalf("two processes share a per-process sandbox: %s %s %v", ra.ID, rb.ID, err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if cs, _ := e.rt.Inspect(ctx, ra.ID); len(cs) != 0 {
			t.Errorf("Close left the per-process sandbox: %+v", cs)
		}
		if cs, _ := e.rt.Inspect(ctx, rb.ID); len(cs) != 1 || cs[0].State != runtime.StateRunning {
			t.Errorf("Close of one process's sandbox touched the other's: %+v", cs)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A persistent sandbox's /workspace and /root survive stop: on docker and
// podman in the key's host dirs, on Kubernetes in the key's claim
// (kubernetes.storage_class). down removes the claim and says so; the
// host dirs stay (Hermes's layout, shared with it).
func TestPersistentFilesSurviveStop(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes keep no files")
		}
		if e.tg.Rootless {
			t.Skip("the test runs as root: the key's host dirs it makes are not writable for a rootless engine's container root")
		}
		spec := e.spec()
		if e.kube() {
			if e.tg.StorageClass == "" {
				t.Skip("no storage class (HSBX_IT_KUBE_STORAGE_CLASS): scripts/kube.sh makes hsbx-local")
			}
			spec.StorageClass, spec.StorageSize = e.tg.StorageClass, "1g"
		}
		ctx := context.Background()
		sb := e.manager().Sandbox(e.key("keep"), spec)
		sh := func(script string) string {
			var out, errb bytes.Buffer
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
			if err != nil || code != 0 {
				t.Fatalf("%s: exit %d %v %s", script, code, err, errb.String())
			}
			return out.String()
		}
		sh("echo kept > /workspace/f && echo home > /root/g")
		if sr, err := sb.Stop(ctx); sr != sandbox.Stopped || err != nil {
			t.Fatalf("Stop: %v %v", sr, err)
		}
		next := e.manager().Sandbox(e.key("keep"), spec) // another process
		var out bytes.Buffer
		if code, err := next.Exec(ctx, sandbox.Command{Argv: []string{"cat", "/workspace/f", "/root/g"}, Stdout: &out}); err != nil || code != 0 || out.String() != "kept\nhome\n" {
			t.Fatalf("after stop: exit %d %v %q, want the files", code, err, out.String())
		}
		removed, err := next.Down(ctx)
		if err != nil || len(removed.Containers) != 1 {
			t.Fatalf("Down: %+v %v", removed, err)
		}
		if e.kube() != (len(removed.Claims) == 1 && removed.Claims[0] == e.key("keep").Name()) {
			t.Errorf("Down removed claims %v (want the key's on Kubernetes only)", removed.Claims)
		}
		out.Reset()
		code, _ := sb.Exec(ctx, sandbox.Command{Argv: []string{"cat", "/workspace/f"}, Stdout: &out})
		if e.kube() && code == 0 {
			t.Errorf("after down, /workspace/f is still there (%q): the claim was not removed", out.String())
		}
		if !e.kube() && (code != 0 || out.String() != "kept\n") {
			t.Errorf("after down: exit %d %q: the host dir should keep the file", code, out.String())
		}
		if _, err := sb.Down(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
