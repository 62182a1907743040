package kubectl

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tarOf(t *testing.T, entries ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte(h.Name))
		}
	}
	_ = tw.Close()
	return &b
}

// An archive from a Pod never writes outside the destination: absolute
// names, "..", and paths through a symlink it planted are refused.
func TestExtractStaysInside(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"dotdot":   {{Name: "d/../../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute": {{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"symlink":  {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "d/l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"outside":  {{Name: "other/f", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		root := t.TempDir()
		err := extract(tarOf(t, entries...), root, "d", "renamed", false)
		if err == nil {
			t.Errorf("%s: extracted without error", name)
		}
		if _, serr := os.Stat(filepath.Join(filepath.Dir(root), "escape")); serr == nil {
			t.Fatalf("%s: wrote outside the destination", name)
		}
	}
	root := t.TempDir()
	ok := tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/sub dir/f,=ü", Typeflag: tar.TypeReg, Mode: 0o640})
	if err := extract(ok, root, "d", "renamed", false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "renamed", "sub dir", "f,=ü")); err != nil || !strings.HasSuffix(string(b), "f,=ü") {
		t.Errorf("renamed extraction: %q %v", b, err)
	}
}

// Whatever a Pod sends, nothing lands outside the destination.
func FuzzExtract(f *testing.F) {
	f.Add(tarOf(&testing.T{}, &tar.Header{Name: "d/x", Typeflag: tar.TypeReg, Mode: 0o644}).Bytes(), "d", false)
	f.Add(tarOf(&testing.T{}, &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: ".."}, &tar.Header{Name: "d/l/x", Typeflag: tar.TypeReg, Mode: 0o644}).Bytes(), "d", true)
	f.Fuzz(func(t *testing.T, archive []byte, strip string, contents bool) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = extract(bytes.NewReader(archive), root, strip, "renamed", contents)
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 || entries[0].Name() != "root" {
			t.Fatalf("extraction wrote outside its root: %v", entries)
		}
	})
}
