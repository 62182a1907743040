package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The staged copy and the restore keep what a snapshot promises: bytes,
// modes (set-id bits too), owners, times, links and hard links, fifos,
// empty directories; they leave out hsbx's own entries at a path's top
// and another mount inside it; the restore replaces what is there and
// removes the stage; past the bound nothing is kept.
func TestStageRestore(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, "d/e"), 0o755))
	must(os.MkdirAll(filepath.Join(ws, "empty"), 0o500))
	must(os.WriteFile(filepath.Join(ws, "d/e/f"), []byte("deep"), 0o640))
	must(os.Link(filepath.Join(ws, "d/e/f"), filepath.Join(ws, "hard")))
	must(os.WriteFile(filepath.Join(ws, "suid"), []byte("x"), 0o755))
	must(unix.Chmod(filepath.Join(ws, "suid"), 0o4755))
	must(os.Symlink("d/e/f", filepath.Join(ws, "link")))
	must(unix.Mkfifo(filepath.Join(ws, "fifo"), 0o600))
	must(os.Mkdir(filepath.Join(ws, ".hsbx-sessions2-0"), 0o700))
	big := make([]byte, 1<<20)
	must(os.WriteFile(filepath.Join(ws, "big"), big, 0o600))
	stageDir := filepath.Join(root, "stage")

	if _, err := stage(stageDir, []string{ws}, 1000); !errors.Is(err, errStageTooLarge) || snapshotKind(err) != "too_large" {
		t.Fatalf("over the bound: %v", err)
	}
	rep, err := stage(stageDir, []string{ws}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bytes != 4+1+1<<20 || len(rep.Paths) != 1 || rep.Paths[0] != ws {
		t.Errorf("report %+v", rep)
	}
	if _, err := os.Lstat(filepath.Join(stageDir+ws, ".hsbx-sessions2-0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("hsbx's own entry was staged: %v", err)
	}
	want := snapTree(t, ws, true)

	// Change everything, then restore.
	must(os.WriteFile(filepath.Join(ws, "d/e/f"), []byte("changed"), 0o600))
	must(os.Remove(filepath.Join(ws, "link")))
	must(os.WriteFile(filepath.Join(ws, "new"), []byte("new"), 0o644))
	must(os.Chmod(filepath.Join(ws, "empty"), 0o755))
	rrep, err := restore(stageDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := snapTree(t, ws, true); got != want {
		t.Errorf("after the restore:\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(stageDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stage is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".hsbx-sessions2-0")); err != nil {
		t.Errorf("hsbx's own entry went with the restore: %v", err)
	}
	if rrep.Files == 0 {
		t.Errorf("restore report %+v", rrep)
	}
	if _, err := restore(stageDir); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Errorf("a restore with no stage: %v", err)
	}
}

// snapTree describes every entry under dir: its kind, mode, owner, size,
// mtime, link target, and which entries share an inode.
func snapTree(t *testing.T, dir string, times bool) string {
	t.Helper()
	var b strings.Builder
	inodes := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, ".hsbx-") {
			return filepath.SkipDir
		}
		st := fi.Sys().(*syscall.Stat_t)
		b.WriteString(rel + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data[:min(len(data), 8)]))
			if first, ok := inodes[st.Ino]; ok {
				b.WriteString(" =" + first)
			}
			inodes[st.Ino] = rel
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			to, _ := os.Readlink(p)
			b.WriteString(" -> " + to)
		}
		if times && !fi.IsDir() {
			b.WriteString(" " + fi.ModTime().String())
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
