package sandbox

import (
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// The settings a sandbox is made from, one changed at a time: each is
// named, and nothing else is.
func TestDriftNamesEachSetting(t *testing.T) {
	base := DefaultSpec()
	base.Env = map[string]string{"A": "1", "B": "2"}
	base.ForwardEnv = []string{"X", "Y"}
	base.Egress = &Egress{Allow: []string{"pypi.org"}}
	change := map[string]func(*Spec){
		"image":        func(s *Spec) { s.Image = "alpine:3" },
		"cwd":          func(s *Spec) { s.Cwd = "/workspace" },
		"volumes":      func(s *Spec) { s.Volumes = []string{"/a:/b"} },
		"env":          func(s *Spec) { s.Env = map[string]string{"A": "1", "C": "2"} },
		"forward_env":  func(s *Spec) { s.ForwardEnv = []string{"X"} },
		"extra_args":   func(s *Spec) { s.ExtraArgs = []string{"--hostname", "h"} },
		"cpu":          func(s *Spec) { s.CPU = 1.5 },
		"memory":       func(s *Spec) { s.MemoryMB = 1024 },
		"disk":         func(s *Spec) { s.DiskMB = 100 },
		"pids_limit":   func(s *Spec) { s.PidsLimit = 0 },
		"shm_size":     func(s *Spec) { s.ShmSize = "64m" },
		"network":      func(s *Spec) { s.Network = false },
		"oci_runtime":  func(s *Spec) { s.OCIRuntime = "runsc" },
		"egress_allow": func(s *Spec) { s.Egress = &Egress{Allow: []string{"example.com"}} },
		"secrets": func(s *Spec) {
			s.Egress = &Egress{Allow: []string{"pypi.org"}, Secrets: []Secret{{Name: "K", Hosts: []string{"api.example.com"}, Env: "K"}}}
		},
		"run_as_host_user":         func(s *Spec) { s.RunAsHostUser = true },
		"mount_cwd_to_workspace":   func(s *Spec) { s.MountCwdToWorkspace = true },
		"persistent":               func(s *Spec) { s.Persistent = false },
		"sandbox_dir":              func(s *Spec) { s.SandboxDir = "/srv/sbx" },
		"snap_compat":              func(s *Spec) { s.SnapCompat = true },
		"kubernetes.storage_class": func(s *Spec) { s.StorageClass = "standard" },
		"kubernetes.storage_size":  func(s *Spec) { s.StorageSize = "1g" },
	}
	have := base.labelValue(1000, 1000)
	if n := len(strings.Fields(have)) - 1; n != len(change) {
		t.Fatalf("the label records %d settings, the test changes %d: keep them in step", n, len(change))
	}
	for name, f := range change {
		want := base
		want.Env, want.ForwardEnv = maps.Clone(base.Env), slices.Clone(base.ForwardEnv)
		f(&want)
		if got := driftBetween(have, want.labelValue(1000, 1000)); !slices.Equal(got, []string{name}) {
			t.Errorf("changing %s: drift %v", name, got)
		}
	}
}

// What is not a difference: env values (a rotated token), the order of
// env and forward_env names, the lifecycle settings, the image's own init.
func TestDriftIgnores(t *testing.T) {
	a := DefaultSpec()
	a.Env = map[string]string{"TOKEN": "one", "B": "x"}
	a.ForwardEnv = []string{"X", "Y"}
	b := a
	b.Env = map[string]string{"B": "y", "TOKEN": "two, with = and commas"}
	b.ForwardEnv = []string{"Y", "X"}
	b.PersistAcrossProcesses = false
	b.OnDrift = DriftRecreate
	b.ImageInit = true
	b.Explicit = map[string]bool{"cpu": true}
	if got := driftBetween(a.labelValue(1, 1), b.labelValue(1, 1)); got != nil {
		t.Errorf("drift %v", got)
	}
	// run_as_host_user records the user it runs as
	h := DefaultSpec()
	h.RunAsHostUser = true
	if got := driftBetween(h.labelValue(1, 1), h.labelValue(2, 1)); !slices.Equal(got, []string{"run_as_host_user"}) {
		t.Errorf("another host user: drift %v", got)
	}
	// values never appear in the label
	if l := a.labelValue(1, 1); strings.Contains(l, "one") || strings.Contains(l, "TOKEN") || strings.Contains(l, "bookworm") {
		t.Errorf("label %q shows a value", l)
	}
}

// A label from another format, a malformed one, or one naming fewer
// settings (an older hsbx) is judged only where it can be.
func TestDriftBetweenLabels(t *testing.T) {
	want := DefaultSpec().labelValue(0, 0)
	img := strings.Fields(want)[1] // image=...
	for _, c := range []struct {
		have string
		want []string
	}{
		{want, nil},
		{"", nil},
		{"2 image=00000000", nil}, // a later format: not judged
		{"1 image", nil},          // malformed
		{"1 image=00000000", []string{"image"}},
		{"1 " + img, nil}, // only the image recorded, and it matches
		{"1 " + img + " memory=00000000 newer_setting=ab", []string{"memory"}},
		{"1 cpu=00000000 image=00000000", []string{"image", "cpu"}}, // the wanted order
	} {
		if got := driftBetween(c.have, want); !slices.Equal(got, c.want) {
			t.Errorf("driftBetween(%q): %v, want %v", c.have, got, c.want)
		}
	}
}

func TestNormalImage(t *testing.T) {
	same := [][2]string{
		{"debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"},
		{"alpine", "alpine:latest"},
		{"alpine", "docker.io/library/alpine:latest"},
		{"hsbx-fake:1", "localhost/hsbx-fake:1"},
		{"registry:5000/team/img", "registry:5000/team/img:latest"},
		{"img@sha256:abc", "img@sha256:abc"},
	}
	for _, p := range same {
		if normalImage(p[0]) != normalImage(p[1]) {
			t.Errorf("%q and %q differ: %q, %q", p[0], p[1], normalImage(p[0]), normalImage(p[1]))
		}
	}
	for _, p := range [][2]string{{"alpine:3", "alpine:4"}, {"team/img", "other/img"}, {"registry:5000/img", "img"}} {
		if normalImage(p[0]) == normalImage(p[1]) {
			t.Errorf("%q and %q read as the same image", p[0], p[1])
		}
	}
}

// The marker keeps what the warm path judges drift by, exactly.
func TestMarkerKeepsConfig(t *testing.T) {
	dir := t.TempDir()
	m := marker{ID: strings.Repeat("a", 64), Network: "any", Config: DefaultSpec().labelValue(1, 2), Image: "debian:12", OCIRuntime: "runsc"}
	writeMarker(dir, m)
	got, ok := readMarker(dir)
	if !ok || got != m {
		t.Fatalf("read %+v %v, wrote %+v", got, ok, m)
	}
	// an older hsbx's marker is not used (verified anew, recording the
	// config, and the runtime)
	os.WriteFile(markerPath(dir), []byte("hsbx-marker-2\n"+m.ID+"\nany\n"), 0o644)
	if _, ok := readMarker(dir); ok {
		t.Fatal("a version 2 marker was used")
	}
	os.WriteFile(markerPath(dir), []byte("hsbx-marker-3\n"+m.ID+"\nany\n1 image=0\ndebian:12\n"), 0o644)
	if _, ok := readMarker(dir); ok {
		t.Fatal("a version 3 marker (no runtime) was used")
	}
	// a label value with a newline (not hsbx's) cannot break the file's lines
	m.Config = "1 image=0\nhsbx-marker-4"
	writeMarker(dir, m)
	if got, ok := readMarker(dir); !ok || got.ID != m.ID || strings.Contains(got.Config, "\n") {
		t.Fatalf("read %+v %v", got, ok)
	}
}

func FuzzConfigLabel(f *testing.F) {
	f.Add(DefaultSpec().labelValue(0, 0), "1 image=00")
	f.Add("", "1")
	f.Add("1 a=b a=c", "1 a=d")
	f.Fuzz(func(t *testing.T, have, want string) {
		got := driftBetween(have, want)
		if have == want && got != nil {
			t.Fatalf("equal labels drift: %v", got)
		}
		w, ok := parseConfigLabel(want)
		for _, k := range got {
			if !ok {
				t.Fatalf("drift %v from an unreadable wanted label %q", got, want)
			}
			if _, in := w[k]; !in {
				t.Fatalf("drift names %q, which %q does not", k, want)
			}
		}
	})
}

// The Go package's errors name remedies in Go terms: a program has no
// `hsbx up --recreate` to run (the hsbx command prints its own hint).
func TestHintsAreInGoTerms(t *testing.T) {
	for _, e := range []interface {
		error
		Hint() string
	}{
		&DriftError{Name: "s", Settings: []string{"image"}},
		&BusyError{Name: "s", Err: ErrBusy},
		&NetworkModeError{Name: "s", ID: "0123456789abcdef", Mode: "bridge", Task: "t"},
	} {
		if h := e.Hint(); strings.Contains(h, "hsbx ") || strings.Contains(h, "`") || !strings.Contains(h, "Sandbox.") {
			t.Errorf("%T's hint %q: want a remedy in Go terms (Sandbox.Recreate, Sandbox.Down)", e, h)
		}
	}
	var se *SpecError
	if !errors.As(&NetworkModeError{Name: "s"}, &se) || se.Setting != "network" {
		t.Errorf("a NetworkModeError is not a *SpecError of network: %+v", se)
	}
}
