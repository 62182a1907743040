package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Snapshots on the fakes: what the engine is asked, and every failure
// half-way leaving no snapshot or sandbox behind — a commit refused, a
// commit the engine finished after its client failed, the size bound, a
// sandbox made from a snapshot that cannot be restored (a full disk) or
// not made at all — a rollback refused while a command runs, and a
// snapshot kept while a fork stands on it.
func TestSnapshotFake(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if !e.tg.Fake {
			t.Skip("fault injection: the fakes'")
		}
		ctx := context.Background()
		with := func(environ ...string) *sandbox.Manager {
			rt := e.openWith(environ)
			return e.managerWith(func(c *sandbox.Config) { c.Runtime = rt })
		}
		m := e.managerWith(func(*sandbox.Config) {})
		sc := sandbox.Scope{Profile: "hsbx-test"}
		src := m.Sandbox(e.key("src"), e.spec())
		t.Cleanup(func() { removeSnapshots(e, m) })
		if _, err := src.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		none := func(what string) {
			t.Helper()
			list, err := m.Snapshots(ctx, sc)
			for _, s := range list {
				if strings.HasPrefix(s.Name, e.base) {
					t.Errorf("%s: snapshot %s was left (%v)", what, s.Name, err)
				}
			}
			ims, _ := e.rt.(runtime.Committer).Images(ctx, sandbox.LabelSnapshotScope)
			for _, im := range ims {
				if strings.HasPrefix(im.Labels[sandbox.LabelSnapshot], e.base) {
					t.Errorf("%s: image %.19s (%s) was left", what, im.ID, im.Labels[sandbox.LabelSnapshot])
				}
			}
		}
		for _, bad := range []string{"", "-x", "a b", "a/b", "ü", "x:y", strings.Repeat("a", 129)} {
			e.log.reset()
			var se *sandbox.SpecError
			if _, err := src.Snapshots().Take(ctx, bad); !errors.As(err, &se) {
				t.Errorf("snapshot name %q: %v, want a SpecError", bad, err)
			}
			if n := len(e.log.all()); n != 0 {
				t.Errorf("snapshot name %q: %d engine calls, want none", bad, n)
			}
		}
		name := e.base + "ok"
		if _, err := with("FAKEENGINE_FAIL_COMMIT=1:Error response from daemon: no space left on device").Sandbox(e.key("src"), e.spec()).Snapshots().Take(ctx, name); err == nil {
			t.Error("a refused commit: no error")
		}
		none("a refused commit")
		if _, err := with("FAKEENGINE_COMMIT_LEAVES=1").Sandbox(e.key("src"), e.spec()).Snapshots().Take(ctx, name); err == nil {
			t.Error("a commit that failed after the engine made the image: no error")
		}
		none("a commit whose image was made")
		small := e.managerWith(func(c *sandbox.Config) { c.SnapshotMaxBytes = 100 })
		if _, err := small.Sandbox(e.key("src"), e.spec()).Snapshots().Take(ctx, name); !errors.Is(err, sandbox.ErrSnapshotTooLarge) {
			t.Errorf("over the bound: %v, want ErrSnapshotTooLarge", err)
		}
		none("over the bound")

		e.log.reset()
		si, err := src.Snapshots().Take(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if si.Name != name || si.Task != src.Key().Task || si.ID == "" || si.Profile != "hsbx-test" {
			t.Errorf("snapshot %+v", si)
		}
		commits := 0
		for _, c := range e.log.all() {
			if strings.Contains(c, " commit ") {
				commits++
				if !strings.Contains(c, "--pause=true") || !strings.Contains(c, "LABEL hsbx.snapshot="+name) || !strings.Contains(c, `LABEL hsbx.key=\"\"`) {
					t.Errorf("commit argv: %s", c)
				}
			}
		}
		if commits != 1 {
			t.Errorf("%d commits, want 1: %v", commits, e.log.all())
		}
		// A name another image holds (not a snapshot: no labels) is not taken from it.
		squat := e.base + "squat"
		cm := e.rt.(runtime.Committer)
		srcRes, err := src.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		foreign, err := cm.Commit(ctx, runtime.CommitSpec{ID: srcRes.ID, Ref: strings.Replace(si.Ref, ":"+name, ":"+squat, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Snapshots().Take(ctx, squat); !errors.Is(err, sandbox.ErrForeignName) {
			t.Errorf("a name another image holds: %v, want ErrForeignName", err)
		}
		if err := cm.RemoveImages(ctx, foreign); err != nil {
			t.Errorf("the squatting image was not left as it was: %v", err)
		}
		// A fork that cannot be restored, and one that cannot be made.
		for _, tc := range []struct{ env, task string }{{"FAKEENGINE_RESTORE_FAIL=no_space", "full"}, {"FAKEENGINE_FAIL_RUN=125:Error: boom", "norun"}} {
			f := with(tc.env).Sandbox(e.key(tc.task), e.spec())
			_, err := f.Snapshots().Fork(ctx, name)
			if err == nil || tc.task == "full" && !errors.Is(err, sandbox.ErrNoSpace) {
				t.Errorf("%s: %v", tc.env, err)
			}
			cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx.task=" + e.base + tc.task}})
			if len(cs) != 0 {
				t.Errorf("%s: a sandbox was left: %v", tc.env, cs)
			}
		}
		fork := m.Sandbox(e.key("fork"), e.spec())
		res, err := fork.Snapshots().Fork(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := e.rt.Inspect(ctx, res.ID)
		if err != nil || cs[0].Labels["hsbx.task"] != e.base+"fork" || cs[0].Labels[sandbox.LabelSnapshot] != name || cs[0].Labels["hsbx.nonce"] == "" {
			t.Errorf("the fork's labels: %v %v", cs, err)
		}
		if err := m.RemoveSnapshot(ctx, sc, name); !errors.Is(err, sandbox.ErrSnapshotInUse) {
			t.Errorf("removing a snapshot a fork stands on: %v", err)
		}
		// A rollback while a command runs is refused, and keeps the sandbox.
		started := make(chan struct{})
		up := sync.OnceFunc(func() { close(started) })
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = fork.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo up; sleep 3"}, Stdout: writerFunc(func([]byte) { up() })})
		}()
		<-started
		if _, err := fork.Snapshots().Rollback(ctx, name); !errors.Is(err, sandbox.ErrBusy) {
			t.Errorf("a rollback while a command runs: %v, want ErrBusy", err)
		}
		if cs, err := e.rt.Inspect(ctx, res.ID); err != nil || len(cs) != 1 {
			t.Errorf("the sandbox after a refused rollback: %v %v", cs, err)
		}
		<-done
		res2, err := fork.Snapshots().Rollback(ctx, name)
		if err != nil || res2.ID == res.ID {
			t.Errorf("rollback: %+v %v", res2, err)
		}
		if _, err := fork.Down(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.RemoveSnapshot(ctx, sc, name); err != nil {
			t.Errorf("removing a snapshot nothing stands on: %v", err)
		}
		none("removed")
	})
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

// A sandbox the Hermes backend made (its labels, no mounts, no hsbx
// labels) is snapshotted as hsbx's own are, and a fork of it is hsbx's,
// labelled as its own key's, with none of Hermes's container's labels.
func snapshotHermes(t *testing.T, e *env, m *sandbox.Manager) {
	ctx := context.Background()
	key := e.key("hermes-snap")
	hid := runHermesShaped(t, e, "hsbx-test", key.Task)
	spec := e.spec()
	spec.Network = false
	sb := m.Sandbox(key, spec)
	t.Cleanup(func() { _ = sb.Close(ctx) })
	if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo hermes > /root/h.txt && echo tmp > /tmp/t.txt"}}); code != 0 || err != nil {
		t.Fatal(code, err)
	}
	name := e.base + "hermes"
	if _, err := sb.Snapshots().Take(ctx, name); err != nil {
		t.Fatalf("snapshot of a Hermes-made sandbox: %v", err)
	}
	f := e.snapSandbox(m, "hermes-fork", spec)
	res, err := f.Snapshots().Fork(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, err := f.Exec(ctx, sandbox.Command{Argv: []string{"cat", "/root/h.txt", "/tmp/t.txt"}, Stdout: &out}); code != 0 || err != nil || out.String() != "hermes\ntmp\n" {
		t.Errorf("the fork of a Hermes-made sandbox: %q %d %v", out.String(), code, err)
	}
	cs, err := e.rt.Inspect(ctx, res.ID, hid)
	if err != nil || len(cs) != 2 {
		t.Fatal(cs, err)
	}
	fork := cs[0]
	if fork.ID != res.ID {
		fork = cs[1]
	}
	if fork.Labels["hermes-task-id"] != sandbox.SanitizeLabel(f.Key().Task) || fork.Labels["hsbx.task"] != f.Key().Task || fork.Labels["hsbx.key"] != f.Key().Hash() {
		t.Errorf("the fork's labels are not its own key's: %v", fork.Labels)
	}
}
