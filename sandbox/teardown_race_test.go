package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// warnings collects a manager's warnings.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) add(s string) { w.mu.Lock(); w.lines = append(w.lines, s); w.mu.Unlock() }
func (w *warnings) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// recreateOnRemove runs again after the first Remove: another process's
// exec that made a new sandbox of the key while down ran.
type recreateOnRemove struct {
	runtime.Runtime
	once  sync.Once
	again func()
}

func (r *recreateOnRemove) Remove(ctx context.Context, force bool, ids ...string) error {
	err := r.Runtime.Remove(ctx, force, ids...)
	r.once.Do(r.again)
	return err
}

// exec racing down: the rule is that down does what it says (it removed
// the sandbox it found) and the new sandbox is announced on both sides,
// never silent.
func TestDownRacingExecIsAnnounced(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		key := e.key("down-race")
		if _, err := e.manager().Sandbox(key, e.spec()).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		var execW, downW warnings
		other := sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: execW.add})
		otherSb := other.Sandbox(key, e.spec())
		if _, err := otherSb.Ensure(ctx); err != nil { // verified: its warm path execs by id
			t.Fatal(err)
		}
		var out bytes.Buffer
		rt := &recreateOnRemove{Runtime: e.rt, again: func() {
			code, err := otherSb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "ran"}, Stdout: &out})
			if err != nil || code != 0 {
				t.Errorf("exec during down: %d %v", code, err)
			}
		}}
		down := sandbox.New(sandbox.Config{Runtime: rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: downW.add}).Sandbox(key, e.spec())
		removed, err := down.Down(ctx)
		if err != nil || len(removed.Containers) != 1 {
			t.Fatalf("down: %v %v", removed, err)
		}
		t.Cleanup(func() { _, _ = e.manager().Sandbox(key, e.spec()).Down(ctx) })
		if out.String() != "ran\n" || !strings.Contains(execW.text(), "was removed (by down or another process); the command runs in a new sandbox") {
			t.Errorf("exec: out %q, warnings %q: want the new sandbox announced", out.String(), execW.text())
		}
		if !strings.Contains(downW.text(), "was made while down ran") {
			t.Errorf("down's warnings %q: want the new sandbox named", downW.text())
		}
	})
}

// down under a running command: the command is killed; it says why (on
// the plain path here; the channel's is in TestDownUnderAChannelCommandSaysSo).
func TestDownUnderACommandSaysSo(t *testing.T) { downUnder(t, false) }

// The same through the exec channel: the channel breaks (exit 125), and
// the error says the sandbox went, not only that the channel broke.
func TestDownUnderAChannelCommandSaysSo(t *testing.T) { downUnder(t, true) }

func downUnder(t *testing.T, channel bool) {
	each(t, func(t *testing.T, e *env) {
		agent := ""
		if channel {
			agent = enginetest.AgentBinary(t)
		}
		ctx := context.Background()
		key := e.key("down-under")
		var w warnings
		m := sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: w.add, Channel: true, Agent: agent})
		sb := m.Sandbox(key, e.spec())
		if _, err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		type res struct {
			code int
			err  error
		}
		done := make(chan res, 1)
		go func() {
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sleep", "60"}, Env: map[string]string{"HSBX_TEST_BASE": e.base}})
			done <- res{code, err}
		}()
		// Down only once the command runs in the sandbox (an exec can
		// take seconds to start on a loaded machine).
		// (The fakes list no process their agent started: a second there.)
		probe := e.manager().Sandbox(key, e.spec())
		for deadline := time.Now().Add(60 * time.Second); !e.tg.Fake; time.Sleep(200 * time.Millisecond) {
			code, err := probe.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `ps | grep -q "[s]leep 60"`}})
			if err == nil && code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the command never started: %d %v", code, err)
			}
		}
		if e.tg.Fake {
			// The fakes' agent runs the command as a process of this host:
			// wait for it (a fixed second raced a slow start on a loaded
			// machine: down came first, and the command took the plain path),
			// this target's own: the other fake's test runs beside it.
			for deadline := time.Now().Add(60 * time.Second); !hostProcess("sleep\x0060\x00", "HSBX_TEST_BASE="+e.base); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the command never started")
				}
			}
		}
		if _, err := e.manager().Sandbox(key, e.spec()).Down(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		msg := w.text()
		if r.err != nil {
			msg += " " + r.err.Error()
		}
		if !strings.Contains(msg, "was stopped or removed while the command ran") {
			t.Fatalf("exit %d, err %v, warnings %q: want the removal said", r.code, r.err, w.text())
		}
	})
}

// hostProcess says whether a process of this host has exactly cmdline
// (NUL-separated) and an environment entry starting with env.
func hostProcess(cmdline, env string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || string(b) != cmdline {
			continue
		}
		if envb, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); err == nil && strings.Contains("\x00"+string(envb), "\x00"+env) {
			return true
		}
	}
	return false
}
