package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Drift through the Go package on every engine and the cluster: a sandbox
// made from other settings is reported (Result.Drift, one warning), used
// (warn), refused (error), replaced when idle and kept while a command
// runs (recreate, Recreate), and List marks it; the warm path spends no
// engine call on it.
func TestDriftEveryEngine(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		state := e.tg.StateDir
		if state == "" {
			state = t.TempDir()
		}
		var mu sync.Mutex
		var warnings []string
		m := sandbox.New(sandbox.Config{
			Runtime: e.rt, StateDir: state, CacheDir: t.TempDir(), Environ: e.tg.Env, StopGrace: 5 * time.Second,
			Warn: func(s string) { mu.Lock(); warnings = append(warnings, s); mu.Unlock() },
		})
		said := func() []string { mu.Lock(); defer mu.Unlock(); w := warnings; warnings = nil; return w }
		key := e.key("drift")
		spec := e.spec()
		first, err := m.Sandbox(key, spec).Ensure(ctx)
		if err != nil || first.Action != sandbox.Created || first.Drift != nil {
			t.Fatalf("first Ensure: %+v %v", first, err)
		}
		said() // what creating it said (Kubernetes: its defaults left off)
		changed := spec
		changed.Env = map[string]string{"NEWVAR": "a,b=c"}

		// warn: used as it is, said once, named in Result.Drift.
		res, err := m.Sandbox(key, changed).Ensure(ctx)
		if err != nil || res.ID != first.ID || !slices.Equal(res.Drift, []string{"env"}) || !res.DriftWarned {
			t.Fatalf("Ensure with a new env name: %+v %v", res, err)
		}
		if w := said(); len(w) != 1 || !strings.Contains(w[0], "(env) and is used as it is") || res.DriftWarning() != w[0] {
			t.Fatalf("warnings: %q (Result says %q)", w, res.DriftWarning())
		}
		// ... naming the remedy in Go terms: a program has no hsbx command.
		if w := res.DriftWarning(); !strings.Contains(w, "; Sandbox.Recreate replaces it") || strings.Contains(w, "hsbx ") {
			t.Fatalf("the drift warning %q names no Go remedy", w)
		}
		e.log.reset()
		var out bytes.Buffer
		if code, err := m.Sandbox(key, changed).Exec(ctx, sandbox.Command{Argv: []string{"true"}, Stdout: &out}); err != nil || code != 0 {
			t.Fatalf("warm exec: %d %v", code, err)
		}
		if n := len(e.log.all()); n != 1 {
			t.Errorf("a warm exec of a drifted sandbox made %d engine calls, want 1:\n%s", n, strings.Join(e.log.all(), "\n"))
		}
		if w := said(); len(w) != 0 {
			t.Errorf("said again: %q", w)
		}
		ls, err := m.List(ctx, key.Scope(), false, &changed)
		if err != nil || !slices.ContainsFunc(ls, func(l sandbox.Listing) bool { return l.ID == first.ID && slices.Equal(l.Drift, []string{"env"}) }) {
			t.Fatalf("List: %+v %v", ls, err)
		}

		// error: refused.
		refuse := changed
		refuse.OnDrift = sandbox.DriftFail
		var de *sandbox.DriftError
		if _, err := m.Sandbox(key, refuse).Ensure(ctx); !errors.As(err, &de) || !errors.Is(err, sandbox.ErrDrift) || !slices.Equal(de.Settings, []string{"env"}) {
			t.Fatalf("on_drift = error: %v", err)
		}

		// recreate while a command runs (this process's): kept. The
		// command runs until the test says (a file appears), not for a
		// time: on a loaded machine the checks below outlasted a 3 s one.
		replace := changed
		replace.OnDrift = sandbox.DriftRecreate
		running := make(chan struct{})
		done := make(chan error, 1)
		gate := "/tmp/hsbx-drift-go-" + e.base // a fake sandbox's processes are the host's
		if e.tg.Fake {
			t.Cleanup(func() { _ = os.Remove(gate) })
		}
		script := `echo started; while [ ! -e "$G" ]; do sleep 1; done`
		if e.tg.Fake {
			script = "echo started; sleep 15" // the fake engine's shell has no loops: a time that outlasts the checks
		}
		go func() {
			pr := &signalWriter{once: running}
			_, err := m.Sandbox(key, spec).Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script},
				Env: map[string]string{"G": gate}, Stdout: pr})
			done <- err
		}()
		select {
		case <-running:
		case err := <-done:
			t.Fatalf("the command ended early: %v", err)
		case <-time.After(90 * time.Second):
			t.Fatal("the command never started")
		}
		if res, err := m.Sandbox(key, replace).Ensure(ctx); err != nil || res.ID != first.ID || !slices.Equal(res.Drift, []string{"env"}) {
			t.Fatalf("on_drift = recreate while a command runs: %+v %v", res, err)
		}
		if w := said(); len(w) != 1 || !strings.Contains(w[0], "a process on this host runs a command in it, so it is used as it is") {
			t.Errorf("warnings: %q", w)
		}
		if _, err := m.Sandbox(key, replace).Recreate(ctx); !errors.Is(err, sandbox.ErrBusy) {
			t.Fatalf("Recreate while a command runs: %v", err)
		}
		if code, err := m.Sandbox(key, spec).Exec(ctx, sandbox.Command{Argv: []string{"touch", gate}}); !e.tg.Fake && (err != nil || code != 0) {
			t.Fatalf("touch %s: %d %v", gate, code, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		// recreate once idle: a new sandbox from these settings.
		res, err = m.Sandbox(key, replace).Ensure(ctx)
		if err != nil || res.ID == first.ID || res.Action != sandbox.Created || res.Drift != nil {
			t.Fatalf("on_drift = recreate, idle: %+v %v", res, err)
		}
		if cs, err := e.rt.Inspect(ctx, first.ID); !errors.Is(err, runtime.ErrNotFound) || len(cs) != 0 {
			t.Errorf("the replaced sandbox: %v %v", cs, err)
		}
		out.Reset()
		if code, err := m.Sandbox(key, changed).Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `echo "$NEWVAR"`}, Stdout: &out}); err != nil || code != 0 || out.String() != "a,b=c\n" {
			t.Fatalf("in the new sandbox: %d %q %v", code, out.String(), err)
		}
		if ls, err := m.List(ctx, key.Scope(), false, &changed); err != nil || slices.ContainsFunc(ls, func(l sandbox.Listing) bool { return l.Drift != nil && strings.HasPrefix(l.Task, e.base) }) {
			t.Fatalf("List after: %+v %v", ls, err)
		}

		// Recreate on request, with nothing changed.
		again, err := m.Sandbox(key, changed).Recreate(ctx)
		if err != nil || again.ID == res.ID || again.Action != sandbox.Created {
			t.Fatalf("Recreate: %+v %v", again, err)
		}
		said()
	})
}

// signalWriter closes once on its first write.
type signalWriter struct {
	once chan struct{}
	mu   sync.Mutex
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		close(w.once)
	}
	return len(p), nil
}

// One key on two engines with one state directory (docker, then podman,
// then docker again: what a user switching --runtime does) is two
// sandboxes, and what this host remembers of one is never read as the
// other's. Before, each engine's command read the other's record: a
// "was removed" warning about a sandbox that was fine, and drift.
func TestStateIsPerEngine(t *testing.T) {
	var targets []enginetest.Target
	for _, tg := range enginetest.Targets(t) {
		if !tg.Rootless && (tg.Fake || tg.Name == "docker" || tg.Name == "podman") {
			targets = append(targets, tg)
		}
	}
	realEngines := 0
	for _, tg := range targets {
		if !tg.Fake {
			realEngines++
		}
	}
	if realEngines < 2 {
		targets = targets[:2] // the fakes: fake-docker and fake-podman, each its own engine
	} else {
		targets = targets[2:]
	}
	ctx := context.Background()
	stateDir := t.TempDir()
	var mu sync.Mutex
	var warnings []string
	key := sandbox.Key{Profile: "hsbx-test", Task: fmt.Sprintf("t%d-per-engine", time.Now().UnixNano()%1e9)}
	var sbs []*sandbox.Sandbox
	for _, tg := range targets {
		rt := tg.OpenWith(t, nil)
		m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir, CacheDir: t.TempDir(), Environ: tg.Env,
			StopGrace: 5 * time.Second, Warn: func(s string) { mu.Lock(); warnings = append(warnings, tg.Name+": "+s); mu.Unlock() }})
		spec := sandbox.DefaultSpec()
		spec.Image = tg.Image
		sb := m.Sandbox(key, spec)
		t.Cleanup(func() { sb.Down(ctx) })
		sbs = append(sbs, sb)
	}
	first, err := sbs[0].Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*sandbox.Sandbox{sbs[1], sbs[0], sbs[1], sbs[0]} {
		if _, err := sb.Output(ctx, "true"); err != nil {
			t.Fatal(err)
		}
	}
	again, err := sbs[0].Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || again.Action != sandbox.Reused {
		t.Errorf("%s's sandbox: %s %s, then %s %s", targets[0].Name, first.Action, first.ID, again.Action, again.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) > 0 {
		t.Errorf("warnings about sandboxes that were fine:\n%s", strings.Join(warnings, "\n"))
	}
}
