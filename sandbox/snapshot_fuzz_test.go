package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// A snapshot's labels read back as they were written, whatever the
// profile, task and source image hold, and every value is one the
// engines' change parser takes whole (Commit refuses the others); an
// image of another scope, or with a label changed, is not the scope's.
func FuzzSnapshotLabels(f *testing.F) {
	f.Add("default", "", "t1", "ok", "hsbx-busybox")
	f.Add("a b\"c", "", "x\\y 'z'", "n.1", "localhost/img:1")
	f.Add("", "shared key", "ü\n\t", "N_-", "sha256:ab")
	f.Fuzz(func(t *testing.T, profile, shared, task, name, source string) {
		if ValidSnapshotName(name) != nil {
			return
		}
		sc := Scope{Profile: profile, Shared: shared}
		created := time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC)
		l := snapshotLabels(sc, name, task, source, "00ff", []string{"/root", "/tmp"}, created)
		for k, v := range l {
			if !plainLabelKey(k) || strings.ContainsAny(v, "\"'\\ \t\n\r") {
				t.Fatalf("label %q=%q cannot go through a commit's change", k, v)
			}
		}
		si, ok := snapshotOf(runtime.Image{ID: "sha256:1", Labels: l, Size: 5}, sc)
		if !ok || si.Name != name || si.Task != task || si.SourceImage != source || si.Profile != scopeName(sc) || !si.Created.Equal(created) || len(si.Paths) != 2 {
			t.Fatalf("read back %+v (%v) from %v", si, ok, l)
		}
		want := sc
		if sc.Shared != "" {
			want = Scope{Shared: sc.Shared} // a shared key's profile is not its identity
		}
		if got, ok := SnapshotScope(runtime.Image{Labels: l}); !ok || got != want {
			t.Fatalf("SnapshotScope: %+v %v, want %+v", got, ok, sc)
		}
		other := Scope{Profile: profile + "x"}
		if shared != "" {
			other = Scope{Shared: shared + "x"}
		}
		if _, ok := snapshotOf(runtime.Image{Labels: l}, other); ok {
			t.Fatalf("a snapshot of %+v is taken for %+v's", sc, other)
		}
	})
}
