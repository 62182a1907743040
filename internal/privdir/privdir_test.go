//go:build linux

package privdir

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// other is a uid that is neither root nor the test's (hsbx's CI user when
// it exists; any other number works for ownership).
const other = 1001

func asRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
}

func mustUnsafe(t *testing.T, err error, path string) {
	t.Helper()
	var ue *UnsafeError
	if !errors.As(err, &ue) {
		t.Fatalf("want an UnsafeError for %s, got %v", path, err)
	}
	if ue.Path != path {
		t.Fatalf("unsafe path %q, want %q (%v)", ue.Path, path, err)
	}
	if !strings.Contains(ue.Hint(), path) {
		t.Fatalf("hint %q does not name %s", ue.Hint(), path)
	}
}

func TestOpenMakesPrivateDirs(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "a", "b", "hsbx")
	d, err := Open(p, Options{Create: true, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != p {
		t.Fatalf("path %q, want %q", d.Path(), p)
	}
	for _, q := range []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b"), p} {
		fi, err := os.Stat(q)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want mode 0700", q, fi.Mode(), err)
		}
	}
	// Names under FDPath reach the directory itself: a socket binds there.
	sock := filepath.Join(d.FDPath(), "x.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := Open(filepath.Join(base, "missing"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir without Create: %v", err)
	}
}

func TestOpenTightensOwnPrivateDir(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hsbx")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o755)
	d, err := Open(p, Options{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v, want 0700", fi.Mode())
	}
}

// The attacks of the review: a base another user made first, a base or
// parent others can write, a link swapped in, a link of another user.
func TestOpenRefusesWhatOthersCanChange(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	t.Run("group-writable last", func(t *testing.T) {
		p := mk("gw", 0o770, -1)
		_, err := Open(p, Options{})
		mustUnsafe(t, err, p)
	})
	t.Run("world-writable parent, not sticky", func(t *testing.T) {
		p := mk("ww", 0o777, -1)
		mk("ww/hsbx", 0o700, -1)
		_, err := Open(filepath.Join(p, "hsbx"), Options{Create: true, Private: true})
		mustUnsafe(t, err, p)
	})
	t.Run("sticky world-writable parent of root's", func(t *testing.T) {
		p := mk("sticky", 0o777|os.ModeSticky, -1)
		d, err := Open(filepath.Join(p, "hsbx-me", "hsbx"), Options{Create: true, Private: true})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	})
	t.Run("last owned by another user", func(t *testing.T) {
		asRoot(t)
		p := mk("theirs", 0o700, other)
		_, err := Open(p, Options{})
		mustUnsafe(t, err, p)
	})
	t.Run("base made first by another user", func(t *testing.T) {
		// /tmp/hsbx-0 squatted: its hsbx/ child is ours, yet the owner
		// of the base can swap it at will.
		asRoot(t)
		p := mk("sticky2", 0o777|os.ModeSticky, -1)
		squat := mk("sticky2/hsbx-0", 0o755, other)
		_, err := Open(filepath.Join(p, "hsbx-0", "hsbx"), Options{Create: true, Private: true})
		mustUnsafe(t, err, squat)
	})
	t.Run("link of another user", func(t *testing.T) {
		asRoot(t)
		target := mk("target", 0o700, -1)
		p := mk("sticky3", 0o777|os.ModeSticky, -1)
		link := filepath.Join(p, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(link, other, other); err != nil {
			t.Fatal(err)
		}
		_, err := Open(link, Options{})
		mustUnsafe(t, err, link)
	})
	t.Run("own link is followed and resolved", func(t *testing.T) {
		target := mk("real", 0o700, -1)
		link := filepath.Join(base, "mylink")
		if err := os.Symlink("real", link); err != nil {
			t.Fatal(err)
		}
		d, err := Open(filepath.Join(link), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.Path() != target {
			t.Fatalf("resolved %q, want %q", d.Path(), target)
		}
	})
	t.Run("a file, not a directory", func(t *testing.T) {
		f := filepath.Join(base, "file")
		os.WriteFile(f, nil, 0o600)
		_, err := Open(f, Options{})
		mustUnsafe(t, err, f)
	})
}

// The review's truncation: a .log (or .lock, .unavailable) planted as a
// link to a file of root's is never opened through.
func TestOpenFileRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "x.log")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(link, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		t.Fatal("opened a link")
	}
	if _, _, err := TryLock(link); err == nil {
		t.Fatal("locked through a link")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim changed: %q", b)
	}
	if _, err := OpenFile(filepath.Join(dir, "y"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err == nil {
		t.Fatal("O_TRUNC accepted")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err == nil {
		if _, err := OpenFile(fifo, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
			t.Fatal("opened a fifo")
		}
	}
}

func TestTryLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.lock")
	rel, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := TryLock(p); err != nil || ok {
		t.Fatalf("second lock while held: ok %v err %v", ok, err)
	}
	// The holder removes its lock file as it ends, then releases: the
	// next one locks a new file and never shares the old one.
	os.Remove(p)
	rel2, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("lock after removal: %v %v", ok, err)
	}
	rel()
	if _, ok, _ := TryLock(p); ok {
		t.Fatal("the new lock file was free while held")
	}
	rel2()
}
