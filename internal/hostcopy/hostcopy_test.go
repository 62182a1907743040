package hostcopy

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func tarOf(t *testing.T, entries ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(h.Name))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size == int64(len(h.Name)) {
				_, _ = tw.Write([]byte(h.Name))
			} else {
				_, _ = io.CopyN(tw, zeros{}, h.Size)
			}
		}
	}
	_ = tw.Close()
	return &b
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// An archive from a sandbox never writes outside the destination: absolute
// names, "..", and paths through a symlink it planted are refused.
func TestExtractStaysInside(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"dotdot":   {{Name: "d/../../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute": {{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"symlink":  {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "sub"}, {Name: "d/l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"outside":  {{Name: "other/f", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		root := t.TempDir()
		err := Extract(tarOf(t, entries...), root, "d", "renamed", Options{})
		if err == nil {
			t.Errorf("%s: extracted without error", name)
		}
		if _, serr := os.Stat(filepath.Join(filepath.Dir(root), "escape")); serr == nil {
			t.Fatalf("%s: wrote outside the destination", name)
		}
	}
	root := t.TempDir()
	ok := tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/sub dir/f,=ü", Typeflag: tar.TypeReg, Mode: 0o640})
	if err := Extract(ok, root, "d", "renamed", Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "renamed", "sub dir", "f,=ü")); err != nil || !strings.HasSuffix(string(b), "f,=ü") {
		t.Errorf("renamed extraction: %q %v", b, err)
	}
}

// The review's planted links: /workspace/abs -> /etc/passwd and a tree
// with root -> / arrived on the host as links to the host's files. Now
// only links that point inside what was copied are made; the rest of the
// tree is copied, and the refused ones are named.
func TestLinksOnlyInsideWhatWasCopied(t *testing.T) {
	root := t.TempDir()
	archive := tarOf(t,
		&tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/abs", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		&tar.Header{Name: "w/root", Typeflag: tar.TypeSymlink, Linkname: "/"},
		&tar.Header{Name: "w/up", Typeflag: tar.TypeSymlink, Linkname: "../.."},
		&tar.Header{Name: "w/f", Typeflag: tar.TypeReg, Mode: 0o644},
		&tar.Header{Name: "w/sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/sub/rel", Typeflag: tar.TypeSymlink, Linkname: "../f"},
		&tar.Header{Name: "w/sub/self", Typeflag: tar.TypeSymlink, Linkname: "."},
		&tar.Header{Name: "w/hard", Typeflag: tar.TypeLink, Linkname: "w/f"},
		&tar.Header{Name: "w/hardout", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"},
		&tar.Header{Name: "w/dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
		&tar.Header{Name: "w/z", Typeflag: tar.TypeReg, Mode: 0o644},
	)
	err := Extract(archive, root, "w", "w", Options{})
	var le *LinksRefusedError
	if !errors.As(err, &le) {
		t.Fatalf("want a LinksRefusedError, got %v", err)
	}
	want := []string{"w/abs -> /etc/passwd", "w/root -> /", "w/up -> ../..", "w/hardout => /etc/passwd", "w/dev (device)"}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) && !slicesContainsPrefix(le.Refused, w) {
			t.Errorf("refused %v, want %q among them", le.Refused, w)
		}
	}
	for _, gone := range []string{"abs", "root", "up", "hardout", "dev"} {
		if _, err := os.Lstat(filepath.Join(root, "w", gone)); err == nil {
			t.Errorf("w/%s was made on the host", gone)
		}
	}
	if l, _ := os.Readlink(filepath.Join(root, "w", "sub", "rel")); l != "../f" {
		t.Errorf("inside link: %q", l)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "w", "hard")); string(b) != "w/f" {
		t.Errorf("hard link: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "w", "z")); err != nil {
		t.Errorf("the copy did not go on after the refused links: %v", err)
	}
}

func slicesContainsPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// A link that reads as inside but resolves outside through another link
// the archive made is removed after the copy and reported.
func TestLinkOutThroughAnotherLink(t *testing.T) {
	root := t.TempDir()
	archive := tarOf(t,
		&tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/a/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/a/b/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/a/b/s", Typeflag: tar.TypeSymlink, Linkname: "../.."},
		&tar.Header{Name: "w/a/b/c", Typeflag: tar.TypeSymlink, Linkname: "s/../../.."},
	)
	err := Extract(archive, root, "w", "w", Options{})
	var le *LinksRefusedError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "w/a/b/c") {
		t.Fatalf("want w/a/b/c refused, got %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "w", "a", "b", "c")); err == nil {
		t.Fatal("the escaping link is still there")
	}
}

// A 64 MiB file of zeros (a sparse file in the sandbox) takes no disk on
// the host; MaxBytes stops a copy before it writes past it, saying how far
// it got.
func TestSparseAndBounded(t *testing.T) {
	root := t.TempDir()
	const size = 64 << 20
	archive := tarOf(t, &tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "w/small", Typeflag: tar.TypeReg, Mode: 0o644},
		&tar.Header{Name: "w/big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
	if err := Extract(bytes.NewReader(archive.Bytes()), root, "w", "w", Options{}); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "w", "big"), &st); err != nil || st.Size != size {
		t.Fatalf("size %d %v", st.Size, err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("a file of zeros took %d bytes of disk", st.Blocks*512)
	}
	root2 := t.TempDir()
	err := Extract(bytes.NewReader(archive.Bytes()), root2, "w", "w", Options{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "stopped after 1 file(s)") || !strings.Contains(err.Error(), root2) {
		t.Fatalf("bounded copy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root2, "w", "big")); err == nil {
		t.Fatal("wrote the file past the bound")
	}
}

// Whatever a sandbox sends, nothing lands outside the destination, and no
// link made there resolves outside it.
func FuzzExtract(f *testing.F) {
	f.Add(tarOf(&testing.T{}, &tar.Header{Name: "d/x", Typeflag: tar.TypeReg, Mode: 0o644}).Bytes(), "d", false)
	f.Add(tarOf(&testing.T{}, &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: ".."}, &tar.Header{Name: "d/l/x", Typeflag: tar.TypeReg, Mode: 0o644}).Bytes(), "d", true)
	f.Add(tarOf(&testing.T{}, &tar.Header{Name: "d/s", Typeflag: tar.TypeSymlink, Linkname: "."}, &tar.Header{Name: "d/c", Typeflag: tar.TypeSymlink, Linkname: "s/../.."}).Bytes(), "d", false)
	f.Fuzz(func(t *testing.T, archive []byte, strip string, contents bool) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		rename := "renamed"
		if contents {
			rename = ""
		}
		_ = Extract(bytes.NewReader(archive), root, strip, rename, Options{MaxBytes: 1 << 20})
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 || entries[0].Name() != "root" {
			t.Fatalf("extraction wrote outside its root: %v", entries)
		}
		realRoot, _ := filepath.EvalSymlinks(root)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Type()&os.ModeSymlink == 0 {
				return nil
			}
			if to, err := filepath.EvalSymlinks(p); err == nil && to != realRoot && !strings.HasPrefix(to, realRoot+"/") {
				t.Fatalf("link %s resolves outside the destination, to %s", p, to)
			}
			return nil
		})
	})
}

// TestExtractKeepsTimes: files and directories get the archive's
// modification times, as the engine's cp gives them (directories' set
// last: what goes into them changes them).
func TestExtractKeepsTimes(t *testing.T) {
	t1 := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	t2 := time.Date(2002, 3, 4, 5, 6, 7, 0, time.UTC)
	ar := tarOf(t,
		&tar.Header{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: t1},
		&tar.Header{Name: "top/sub/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: t1},
		&tar.Header{Name: "top/sub/f", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: t2},
		&tar.Header{Name: "top/g", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: t2})
	dst := t.TempDir()
	if err := Extract(ar, dst, "top", "top", Options{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]time.Time{"top": t1, "top/sub": t1, "top/sub/f": t2, "top/g": t2} {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil || !fi.ModTime().Equal(want) {
			t.Errorf("%s: %v %v, want %v", name, fi.ModTime(), err, want)
		}
	}
}

// The third review's archive (a replaced agent's copy-out): a regular
// file, the same name again as a symlink that resolves inside the copy
// from its depth, then a hard link at the top to that name. The hard link
// was made to the symlink itself, which from the top resolved to a host
// file outside the destination. A hard link is made only to a regular
// file this copy wrote and still holds; whatever else the archive says,
// the host file stays untouched and the refused entry is named.
func TestHardLinkNeverToALink(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.WriteFile(outside, []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "dest", "in")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, entries := range map[string][]*tar.Header{
		"regular then symlink": {
			{Name: "src/a/b/c/f", Typeflag: tar.TypeReg, Mode: 0o644},
			{Name: "src/a/b/c/f", Typeflag: tar.TypeSymlink, Linkname: "../../../outside"},
			{Name: "src/h", Typeflag: tar.TypeLink, Linkname: "src/a/b/c/f"},
		},
		"a symlink inside": {
			{Name: "src/a/f", Typeflag: tar.TypeReg, Mode: 0o644},
			{Name: "src/a/g", Typeflag: tar.TypeSymlink, Linkname: "f"},
			{Name: "src/h", Typeflag: tar.TypeLink, Linkname: "src/a/g"},
		},
	} {
		dst := filepath.Join(root, strings.ReplaceAll(name, " ", "-"))
		err := Extract(tarOf(t, entries...), filepath.Dir(dst), "src", filepath.Base(dst), Options{})
		var lr *LinksRefusedError
		if !errors.As(err, &lr) || !strings.Contains(err.Error(), "h =>") {
			t.Errorf("%s: %v, want the hard link h refused and named", name, err)
		}
		if st, lerr := os.Lstat(filepath.Join(dst, "h")); lerr == nil && !st.Mode().IsRegular() {
			t.Errorf("%s: h is a %v, a link to a link", name, st.Mode().Type())
		}
		if f, oerr := os.OpenFile(filepath.Join(dst, "h"), os.O_WRONLY|os.O_APPEND, 0); oerr == nil {
			_, _ = f.WriteString("x\n")
			_ = f.Close()
		}
		if b, _ := os.ReadFile(outside); string(b) != "host file\n" {
			t.Fatalf("%s: the host file outside the destination changed: %q", name, b)
		}
	}
}
