package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"/a:/b", "/a:/b:ro", "a:b", "::", "/a:/b:ro:x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVolume(s)
		if err == nil && (v.Host == "" || v.Container == "") {
			t.Fatalf("accepted %q as %+v", s, v)
		}
	})
}

func FuzzSanitizeLabel(f *testing.F) {
	f.Add("a/b")
	f.Add("😀")
	f.Fuzz(func(t *testing.T, s string) {
		l := SanitizeLabel(s)
		if l == "" || len(l) > 63 {
			t.Fatalf("SanitizeLabel(%q) = %q", s, l)
		}
		k := Key{Profile: s, Task: s}
		if !nameRE.MatchString(k.Name()) {
			t.Fatalf("Name %q invalid", k.Name())
		}
	})
}

func FuzzTaskDirName(f *testing.F) {
	for _, s := range []string{"", "a:b", "..", "x.", "plain", "😀", "../../etc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := TaskDirName(s)
		if d == "" || d == "." || d == ".." || len(d) > 128 || strings.ContainsAny(d, "/:\x00") {
			t.Fatalf("TaskDirName(%q) = %q is not one safe path component", s, d)
		}
		if SanitizeLabel(s) == s && len(s) <= 128 && s != "." && s != ".." && !strings.HasSuffix(s, ".") && s != "" && d != s {
			t.Fatalf("a safe task %q was renamed %q", s, d)
		}
	})
}

func FuzzMarker(f *testing.F) {
	f.Add("hsbx-marker-4\n" + strings.Repeat("a", 64) + "\nnone\n1 image=0a0b0c0d cwd=01020304\ndebian:12\nrunsc\n")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		dir := t.TempDir()
		p := markerPath(dir)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(s), 0o644)
		if m, ok := readMarker(dir); ok && !isHexID(m.ID) {
			t.Fatalf("marker %q read as id %q", s, m.ID)
		}
	})
}
