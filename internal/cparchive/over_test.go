package cparchive

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOver counts what Archive would carry: regular files' sizes, not
// links' targets; a missing path is an error.
func TestOver(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]int{"d/a": 100, "d/sub/b": 50, "big": 4000} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "big"), filepath.Join(dir, "d", "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src  string
		max  int64
		over bool
	}{
		{"d", 150, false}, {"d", 149, true}, {"d/.", 150, false}, {"d/sub/b", 50, false},
		{"d/sub/b", 49, true}, {"d/link", 0, false}, {"big", 4000, false}, {"big", 0, true},
	} {
		got, err := Over(dir+"/"+tc.src, tc.max)
		if err != nil || got != tc.over {
			t.Errorf("Over(%s, %d) = %v %v, want %v", tc.src, tc.max, got, err, tc.over)
		}
	}
	if _, err := Over(filepath.Join(dir, "missing"), 1<<20); err == nil {
		t.Error("a missing path: no error")
	}
}
