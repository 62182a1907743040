package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
)

// snapshotWriter appends one 9-byte record a write to a file in the image
// layer, then /workspace, then /tmp, for ever: in a consistent snapshot
// every record is whole and the three counts are one point in time (each
// at most one behind the one before).
const snapshotWriter = `i=0; while :; do r=$(printf '%08d' $i); echo $r >> /var/snaplog; echo $r >> /workspace/snaplog; echo $r >> /tmp/snaplog; i=$((i+1)); done`

// fillScript makes the files a snapshot must keep: in the image layer,
// /workspace, /root and /tmp, a link, a hard link, modes and an owner.
const fillScript = `set -e
head -c 1048579 /dev/urandom > /workspace/w.bin
ln -s w.bin /workspace/link
mkdir -p /workspace/d/e && echo deep > /workspace/d/e/f
ln /workspace/d/e/f /workspace/d/hard
echo home > /root/r.txt && chmod 0640 /root/r.txt && chown 65534:65534 /root/r.txt
echo tmp > /tmp/t.txt
echo layer > /etc/hsbx-layer && chmod 4755 /etc/hsbx-layer
`

// sumScript prints what fillScript made, to compare byte for byte.
const sumScript = `cd / && for f in workspace/w.bin workspace/d/e/f root/r.txt tmp/t.txt etc/hsbx-layer; do echo "$f $(md5sum < $f) $(stat -c '%a %u %g %h' $f)"; done; readlink /workspace/link; stat -c %i /workspace/d/e/f /workspace/d/hard | uniq | wc -l; ls -a /workspace /root /tmp /etc | grep -v -e snaplog -e '^.hsbx-' | md5sum`

// Snapshots on every engine that commits (docker, rootful and rootless
// podman): a snapshot taken while a process writes is consistent; a
// rollback restores the image layer, /workspace, /root and /tmp byte for
// byte and drops what was made after; forks at once (of a persistent
// sandbox: three in the gate, ten under make soak; of the others, one
// and two) are independent and run through the exec channel; a fork of a
// fork; the size bound; and removal refused while forks stand on a
// snapshot. Kubernetes refuses.
func TestSnapshot(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.managerWith(func(c *sandbox.Config) {})
		if e.kube() {
			sb := m.Sandbox(e.key("snap"), e.spec())
			if _, err := sb.Snapshots().Take(ctx, "s1"); !errors.Is(err, sandbox.ErrSnapshotUnsupported) {
				t.Fatalf("a snapshot on Kubernetes: %v, want ErrSnapshotUnsupported", err)
			}
			return
		}
		if e.tg.Fake {
			t.Skip("the fake engine's sandboxes have no file system of their own: TestSnapshotFake")
		}
		t.Cleanup(func() { removeSnapshots(e, m) })
		for _, persistent := range []bool{true, false} {
			t.Run("persistent="+strconv.FormatBool(persistent), func(t *testing.T) {
				spec := e.spec()
				spec.Persistent = persistent
				// Many at once once per engine is enough (ten cost a
				// minute): the persistent case; one fork proves the rest.
				forks := enginetest.Count(1, 2)
				if persistent {
					forks = enginetest.Count(3, 10)
				}
				snapshotCase(t, e, m, spec, map[bool]string{true: "p", false: "t"}[persistent], forks)
			})
		}
		t.Run("gvisor", func(t *testing.T) {
			spec := e.gvisor()
			spec.Network = false
			snapshotCase(t, e, m, spec, "g", enginetest.Count(1, 2))
		})
		t.Run("bounds", func(t *testing.T) { snapshotBounds(t, e, m) })
		t.Run("two at once", func(t *testing.T) { snapshotTwoAtOnce(t, e, m) })
		t.Run("hermes", func(t *testing.T) { snapshotHermes(t, e, m) })
	})
}

// snapshotTwoAtOnce: two saves of one sandbox at once, from two handles
// (two processes, or two hosts): they take turns or the second is refused
// (ErrBusy) — never both stopped by each other's hold, waiting for ever
// with the sandbox's processes stopped, and never one's stage removed by
// the other's. Each snapshot made holds the files; the sandbox runs on.
func snapshotTwoAtOnce(t *testing.T, e *env, m *sandbox.Manager) {
	ctx := context.Background()
	spec := e.spec()
	spec.Persistent = false
	src := e.snapSandbox(m, "twice-src", spec)
	fill := "mkdir -p /workspace/d && i=0; while [ $i -lt 200 ]; do head -c 65536 /dev/urandom > /workspace/d/f$i; i=$((i+1)); done; cat /workspace/d/* | md5sum"
	var sum bytes.Buffer
	if code, err := src.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", fill}, Stdout: &sum}); code != 0 || err != nil {
		t.Fatal(code, err)
	}
	names := []string{e.base + "twice-a", e.base + "twice-b"}
	errs := make([]error, 2)
	done := make(chan int, 2)
	for i := range names {
		other := e.managerWith(func(c *sandbox.Config) {}).Sandbox(src.Key(), spec)
		go func() { _, errs[i] = other.Snapshots().Take(ctx, names[i]); done <- i }()
	}
	for range names {
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Fatal("two snapshots at once of one sandbox did not end within 5 minutes (each stopped by the other's hold?)")
		}
	}
	made := 0
	for i, err := range errs {
		switch {
		case err == nil:
			made++
			f := m.Sandbox(e.key("twice-fork-"+strconv.Itoa(i)), spec)
			e.t.Cleanup(func() { _ = f.Close(context.Background()) })
			if _, err := f.Snapshots().Fork(ctx, names[i]); err != nil {
				t.Fatalf("fork of %s: %v", names[i], err)
			}
			var got bytes.Buffer
			if code, err := f.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "cat /workspace/d/* | md5sum"}, Stdout: &got}); code != 0 || err != nil || got.String() != sum.String() {
				t.Errorf("the fork of %s: %q (want %q) %d %v", names[i], got.String(), sum.String(), code, err)
			}
		case errors.Is(err, sandbox.ErrBusy):
		default:
			t.Errorf("snapshot %s beside another: %v (want it made, or ErrBusy)", names[i], err)
		}
	}
	if made == 0 {
		t.Errorf("neither of two snapshots at once was made: %v", errs)
	}
	t.Logf("two at once: %d made, errors %v", made, errs)
	if code, err := src.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "test ! -e /.hsbx-snapshot && test $(grep -c '^State:.*T' /proc/[0-9]*/status | grep -vc ':0$') = 0"}}); code != 0 || err != nil {
		t.Errorf("after two snapshots at once the stage is left or processes are stopped: %d %v", code, err)
	}
}

// snapshotBounds: a snapshot over snapshot_max_size keeps nothing and
// leaves the sandbox running on; a fork whose memory-backed path is too
// small for the snapshot's files (a full disk) is removed, and says so.
func snapshotBounds(t *testing.T, e *env, m *sandbox.Manager) {
	ctx := context.Background()
	spec := e.spec()
	spec.Persistent = false
	spec.ExtraArgs = []string{"--tmpfs", "/small:rw,size=4m"}
	src := e.snapSandbox(m, "bound-src", spec)
	if code, err := src.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "head -c 1048576 /dev/urandom > /small/f"}}); code != 0 || err != nil {
		t.Fatal(code, err)
	}
	small := e.managerWith(func(c *sandbox.Config) { c.SnapshotMaxBytes = 100 << 10 })
	name := e.base + "bound"
	if _, err := small.Sandbox(src.Key(), spec).Snapshots().Take(ctx, name); !errors.Is(err, sandbox.ErrSnapshotTooLarge) {
		t.Fatalf("over the bound: %v, want ErrSnapshotTooLarge", err)
	}
	if _, err := m.FindSnapshot(ctx, src.Key().Scope(), name); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("over the bound, a snapshot was kept: %v", err)
	}
	if code, err := src.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "test ! -e /.hsbx-snapshot && test $(grep -c '^State:.*T' /proc/[0-9]*/status | grep -vc ':0$') = 0"}}); code != 0 || err != nil {
		t.Errorf("after a refused snapshot the stage is left or processes are stopped: %d %v", code, err)
	}
	if _, err := src.Snapshots().Take(ctx, name); err != nil {
		t.Fatal(err)
	}
	tiny := spec
	tiny.ExtraArgs = []string{"--tmpfs", "/small:rw,size=64k"}
	f := e.snapSandbox(m, "bound-fork", tiny)
	if _, err := f.Snapshots().Fork(ctx, name); !errors.Is(err, sandbox.ErrNoSpace) {
		t.Errorf("a fork with no room for the snapshot's files: %v, want ErrNoSpace", err)
	}
	if cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx.task=" + f.Key().Task}}); len(cs) != 0 {
		t.Errorf("a fork that could not be restored was left: %v", cs)
	}
}

func snapshotCase(t *testing.T, e *env, m *sandbox.Manager, spec sandbox.Spec, tag string, nforks int) {
	ctx := context.Background()
	src := e.snapSandbox(m, "snap-"+tag, spec)
	sh := func(sb *sandbox.Sandbox, script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
		if code != 0 || err != nil {
			t.Fatalf("%s: %d %v %s", script, code, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	sh(src, fillScript)
	want := sh(src, sumScript)
	p, err := background.Of(src).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", snapshotWriter}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	name := e.base + "s1-" + tag
	si, err := src.Snapshots().Take(ctx, name)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if si.Name != name || si.Task != src.Key().Task || si.Profile != "hsbx-test" || si.SourceImage == "" || si.Size <= 0 || si.Created.IsZero() || len(si.Paths) == 0 {
		t.Errorf("snapshot info %+v", si)
	}
	// The writer goes on after the snapshot (its processes were continued).
	n1 := sh(src, "wc -l < /var/snaplog")
	time.Sleep(200 * time.Millisecond)
	if n2 := sh(src, "wc -l < /var/snaplog"); n2 == n1 {
		t.Errorf("the writer did not go on after the snapshot (%s lines, then %s)", n1, n2)
	}
	_, _ = p.Signal(ctx, syscall.SIGKILL)
	if _, err := src.Snapshots().Take(ctx, name); !errors.Is(err, sandbox.ErrSnapshotExists) {
		t.Errorf("a second snapshot of the name: %v, want ErrSnapshotExists", err)
	}
	list, err := m.Snapshots(ctx, src.Key().Scope())
	if err != nil || !hasSnapshot(list, name) {
		t.Errorf("Snapshots: %v %v, want %s", list, err, name)
	}
	// Changes after the snapshot, then the rollback.
	sh(src, "echo changed >> /workspace/w.bin; echo new > /workspace/new; echo new > /etc/after; rm /root/r.txt; echo x > /tmp/t.txt")
	res, err := src.Snapshots().Rollback(ctx, name)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := sh(src, sumScript); got != want {
		t.Errorf("after the rollback:\n%s\nwant\n%s", got, want)
	}
	if got := sh(src, "ls /workspace/new /etc/after 2>&1 || true"); !strings.Contains(got, "No such file") || strings.Contains(got, "/workspace/new\n") {
		t.Errorf("files made after the snapshot are back after the rollback: %q", got)
	}
	logs := sh(src, "wc -c < /var/snaplog; wc -c < /workspace/snaplog; wc -c < /tmp/snaplog; cat /var/snaplog /workspace/snaplog /tmp/snaplog | grep -cv '^[0-9]\\{8\\}$' || true")
	checkSnapLogs(t, logs)
	if src.ChannelStatus(res.ID) != "up" {
		t.Errorf("channel after the rollback: %s", src.ChannelStatus(res.ID))
	}

	// Forks at once (ten on a persistent sandbox): each its own, each
	// through the exec channel.
	forks := make([]*sandbox.Sandbox, nforks)
	errs := make([]error, len(forks))
	forkIDs := make([]string, len(forks))
	var wg sync.WaitGroup
	for i := range forks {
		forks[i] = e.snapSandbox(m, fmt.Sprintf("fork-%s-%d", tag, i), spec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res sandbox.Result
			res, errs[i] = forks[i].Snapshots().Fork(ctx, name)
			forkIDs[i] = res.ID
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
	}
	for i, f := range forks {
		if got := sh(f, sumScript); got != want {
			t.Errorf("fork %d:\n%s\nwant\n%s", i, got, want)
		}
		sh(f, fmt.Sprintf("echo %d > /workspace/mine; echo %d > /etc/mine; echo %d > /tmp/mine", i, i, i))
	}
	for i, f := range forks {
		if got := sh(f, "cat /workspace/mine /etc/mine /tmp/mine"); got != fmt.Sprintf("%d\n%d\n%d", i, i, i) {
			t.Errorf("fork %d sees %q", i, got)
		}
		if st := f.ChannelStatus(forkIDs[i]); st != "up" {
			t.Errorf("fork %d: the exec channel is %s", i, st)
		}
	}
	if got := sh(src, "cat /workspace/mine /etc/mine /tmp/mine 2>&1 || true"); strings.Count(got, "No such file") != 3 {
		t.Errorf("the source sees a fork's files: %q", got)
	}
	if _, err := forks[0].Snapshots().Fork(ctx, name); !errors.Is(err, sandbox.ErrSandboxExists) {
		t.Errorf("a fork into a task that has a sandbox: %v, want ErrSandboxExists", err)
	}
	// A fork of a fork.
	name2 := e.base + "s2-" + tag
	if _, err := forks[0].Snapshots().Take(ctx, name2); err != nil {
		t.Fatalf("snapshot of a fork: %v", err)
	}
	ff := e.snapSandbox(m, "ff-"+tag, spec)
	if _, err := ff.Snapshots().Fork(ctx, name2); err != nil {
		t.Fatalf("fork of a fork: %v", err)
	}
	if got := sh(ff, "cat /workspace/mine /etc/mine /tmp/mine; md5sum < /workspace/w.bin"); !strings.HasPrefix(got, "0\n0\n0\n") || !strings.Contains(want, strings.Fields(got)[3]) {
		t.Errorf("a fork of a fork sees %q", got)
	}
	// The snapshot stays while forks stand on it.
	if err := m.RemoveSnapshot(ctx, src.Key().Scope(), name); !errors.Is(err, sandbox.ErrSnapshotInUse) {
		t.Errorf("removing a snapshot forks stand on: %v, want ErrSnapshotInUse", err)
	}
	if _, err := m.FindSnapshot(ctx, src.Key().Scope(), name); err != nil {
		t.Errorf("the snapshot after a refused removal: %v", err)
	}
}

// snapSandbox is a sandbox for task whose persistent directories the
// sandbox's root can write (under rootless podman the test, root on the
// host, makes them for the rootless user), closed when the test ends.
func (e *env) snapSandbox(m *sandbox.Manager, task string, spec sandbox.Spec) *sandbox.Sandbox {
	sb := m.Sandbox(e.key(task), spec)
	e.t.Cleanup(func() { _ = sb.Close(context.Background()) })
	if e.tg.Rootless && spec.Persistent {
		base := keystate.Dir(e.tg.StateDir, sb.Key().Hash())
		for _, d := range []string{filepath.Join(base, "workspace"), filepath.Join(base, "home")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				e.t.Fatal(err)
			}
			var uid, gid int
			if _, err := fmt.Sscanf(os.Getenv("HSBX_IT_ROOTLESS_UID")+":"+os.Getenv("HSBX_IT_ROOTLESS_GID"), "%d:%d", &uid, &gid); err != nil {
				e.t.Fatalf("HSBX_IT_ROOTLESS_UID/GID: %v", err)
			}
			if err := os.Chown(d, uid, gid); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return sb
}

// checkSnapLogs reads "layer ws tmp bad" byte counts of snapshotWriter's
// three logs: whole records, one point in time.
func checkSnapLogs(t *testing.T, out string) {
	t.Helper()
	var l, w, m, bad int
	if _, err := fmt.Sscan(out, &l, &w, &m, &bad); err != nil {
		t.Fatalf("the writer's logs: %q: %v", out, err)
	}
	if l%9 != 0 || w%9 != 0 || m%9 != 0 || bad != 0 {
		t.Errorf("a record is torn: %d %d %d bytes, %d bad lines", l, w, m, bad)
	}
	l, w, m = l/9, w/9, m/9
	if l == 0 || w > l || m > w || l-m > 1 {
		t.Errorf("the logs are not one point in time: %d records in the layer, %d in /workspace, %d in /tmp", l, w, m)
	}
}

func hasSnapshot(list []sandbox.SnapshotInfo, name string) bool {
	for _, s := range list {
		if s.Name == name {
			return true
		}
	}
	return false
}

// removeSnapshots removes the test's snapshots (after its sandboxes: they
// stand on them), children first.
func removeSnapshots(e *env, m *sandbox.Manager) {
	ctx := context.Background()
	sc := sandbox.Scope{Profile: "hsbx-test"}
	cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx.profile=hsbx-test"}})
	var ids []string
	for _, c := range cs {
		if strings.HasPrefix(c.Labels["hsbx.task"], e.base) {
			ids = append(ids, c.ID)
		}
	}
	_ = e.rt.Remove(ctx, true, ids...)
	for range 3 {
		list, _ := m.Snapshots(ctx, sc)
		for _, s := range slices.Backward(list) {
			if strings.HasPrefix(s.Name, e.base) {
				_ = m.RemoveSnapshot(ctx, sc, s.Name)
			}
		}
	}
}
