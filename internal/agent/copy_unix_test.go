//go:build unix

package agent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/cparchive"
	"golang.org/x/sys/unix"
)

// TestTarInKeepsModesAndTimes: what the agent extracts has the archive's
// permissions exactly (the umask takes nothing off) and its modification
// times, directories' too (set after what goes in them), as the engine's
// cp makes them.
func TestTarInKeepsModesAndTimes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	src := t.TempDir()
	tree(t, src, "d/sub/f", "d/x", "d/l@x")
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for name, mode := range map[string]os.FileMode{"d/sub/f": 0o666, "d/x": 0o751, "d/sub": 0o775, "d": 0o757} {
		p := filepath.Join(src, name)
		must(t, os.Chmod(p, mode))
		defer os.Chtimes(p, when, when)
	}
	ts := unix.NsecToTimespec(when.UnixNano())
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, "d/l"), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
	for _, name := range []string{"d/sub/f", "d/x", "d/sub", "d"} { // leaves first
		must(t, os.Chtimes(filepath.Join(src, name), when, when))
	}
	var ar bytes.Buffer
	must(t, cparchive.Archive(&ar, filepath.Join(src, "d")))
	dst := t.TempDir()
	must(t, TarIn(&ar, dst))
	if fi, err := os.Lstat(filepath.Join(dst, "d/l")); err != nil || !fi.ModTime().Equal(when) {
		t.Errorf("the link's own time: %v %v, want %v", fi, err, when)
	}
	for name, mode := range map[string]os.FileMode{"d/sub/f": 0o666, "d/x": 0o751, "d/sub": 0o775, "d": 0o757} {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode || !fi.ModTime().Equal(when) {
			t.Errorf("%s: %v %v, want %v %v", name, fi.Mode().Perm(), fi.ModTime(), mode, when)
		}
	}
}

// TestTarInPlacementWritesNothing: an archive whose place is not there
// is a *PlacementError with nothing written (copy-in then hands the copy
// to the engine); a failure after that is not one.
func TestTarInPlacementWritesNothing(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	tree(t, src, "d/f", "file")
	must(t, os.WriteFile(filepath.Join(dst, "afile"), []byte("x"), 0o644))
	for _, tc := range []struct{ src, dst string }{
		{"d", "nodir/sub"},   // no parent
		{"d", "missing/"},    // a directory named with "/" that is not there
		{"d", "afile"},       // a directory onto a file
		{"d/.", "afile"},     // contents into a file
		{"file", "nodir/x/"}, // no such directory
	} {
		var ar bytes.Buffer
		must(t, cparchive.Archive(&ar, filepath.Join(src, tc.src)))
		before := listing(t, dst)
		var pe *PlacementError
		if err := TarIn(&ar, dst+"/"+tc.dst); !errors.As(err, &pe) {
			t.Errorf("%s -> %s: %v, want a PlacementError", tc.src, tc.dst, err)
		}
		if got := listing(t, dst); got != before {
			t.Errorf("%s -> %s wrote:\n%s\nwas:\n%s", tc.src, tc.dst, got, before)
		}
	}
	var ar bytes.Buffer
	must(t, cparchive.Archive(&ar, filepath.Join(src, "d")))
	b := ar.Bytes()
	var pe *PlacementError
	if err := TarIn(bytes.NewReader(b[:1030]), filepath.Join(dst, "ok")); err == nil || errors.As(err, &pe) { // in d/f's data
		t.Errorf("a truncated archive: %v, want an error that is no PlacementError", err)
	}
}
