package detect_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// fakeBin writes an executable script that prints version and counts its
// runs in dir/<name>.runs.
func fakeBin(t *testing.T, dir, name, version string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	script := "#!/bin/sh\necho run >> '" + p + ".runs'\necho '" + version + "'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func runs(t *testing.T, bin string) int {
	b, _ := os.ReadFile(bin + ".runs")
	return strings.Count(string(b), "run")
}

func opts(dir string, env map[string]string) detect.Options {
	return detect.Options{
		LookPath: func(string) (string, error) { return "", errors.New("not on PATH") },
		Known:    []string{},
		CacheDir: filepath.Join(dir, "cache"),
		Engine:   enginecli.Options{Env: []string{"PATH=/usr/bin:/bin"}},
	}
}

func TestDialectComesFromTheBinaryAndIsCached(t *testing.T) {
	dir := t.TempDir()
	shim := fakeBin(t, dir, "docker", "podman version 4.3.1") // podman-docker shim
	o := opts(dir, nil)
	o.Runtime = shim
	for i := 0; i < 3; i++ {
		f, err := detect.Find(context.Background(), o)
		if err != nil || f.Dialect != runtime.Podman || f.Path != shim {
			t.Fatalf("Find = %+v, %v", f, err)
		}
	}
	if n := runs(t, shim); n != 1 {
		t.Errorf("--version ran %d times for 3 detections; the cache should make it 1", n)
	}
	// Fresh (doctor) always asks.
	o.Fresh = true
	if _, err := detect.Find(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if n := runs(t, shim); n != 2 {
		t.Errorf("Fresh detection did not ask the binary (%d runs)", n)
	}
	// A changed binary (new size/mtime) is asked again.
	fakeBin(t, dir, "docker", "Docker version 28.2.2, build e6534b4")
	o.Fresh = false
	f, err := detect.Find(context.Background(), o)
	if err != nil || f.Dialect != runtime.Docker {
		t.Fatalf("after replacing the binary: %+v %v", f, err)
	}
	// ... and its old verdict is dropped, not kept beside the new one
	// (every hsbx start reads the file); another binary's stays.
	other := fakeBin(t, dir, "podman", "podman version 4.3.1")
	o.Runtime = other
	if _, err := detect.Find(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(o.CacheDir, "dialects.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), shim+"|"); n != 1 {
		t.Errorf("the cache holds %d verdicts for %s, want 1: %s", n, shim, b)
	}
	if !strings.Contains(string(b), other+"|") {
		t.Errorf("the cache lost %s's verdict: %s", other, b)
	}
}

func TestOrder(t *testing.T) {
	dir := t.TempDir()
	docker := fakeBin(t, dir, "docker", "Docker version 20.10.24+dfsg1, build 297e128")
	podman := fakeBin(t, dir, "podman", "podman version 4.3.1")
	known := fakeBin(t, dir, "known-podman", "podman version 4.3.1")
	path := map[string]string{"docker": docker, "podman": podman}
	lookPath := func(name string) (string, error) {
		if p, ok := path[name]; ok {
			return p, nil
		}
		return "", errors.New("not found")
	}
	cases := []struct {
		name    string
		runtime string
		env     map[string]string
		onPath  []string
		want    string
		source  string
		wantErr string
	}{
		{name: "docker first on PATH", onPath: []string{"docker", "podman"}, want: docker, source: "PATH"},
		{name: "podman when no docker", onPath: []string{"podman"}, want: podman, source: "PATH"},
		{name: "known paths last", want: known, source: "known path"},
		{name: "flag by name", runtime: "podman", onPath: []string{"docker", "podman"}, want: podman, source: "--runtime/HSBX_RUNTIME"},
		{name: "flag by path", runtime: podman, want: podman, source: "--runtime/HSBX_RUNTIME"},
		{name: "flag auto", runtime: "auto", onPath: []string{"docker"}, want: docker, source: "PATH"},
		// HERMES_DOCKER_BINARY is resolved by the configuration and arrives
		// as Runtime with its source (config_precedence.txtar,
		// detect_hermes_binary.txtar).
		{name: "a named source", runtime: "podman", source: "env HERMES_DOCKER_BINARY", onPath: []string{"docker", "podman"}, want: podman},
		{name: "a named source wrong is an error", runtime: "nosuch", source: "env HERMES_DOCKER_BINARY", onPath: []string{"docker"}, wantErr: `env HERMES_DOCKER_BINARY "nosuch": not found on PATH`},
		{name: "flag missing path", runtime: filepath.Join(dir, "nope"), wantErr: "no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path = map[string]string{}
			for _, n := range tc.onPath {
				path[n] = map[string]string{"docker": docker, "podman": podman}[n]
			}
			o := opts(dir, tc.env)
			o.Runtime = tc.runtime
			if tc.runtime != "" && tc.source != "" && tc.source != "PATH" && tc.source != "--runtime/HSBX_RUNTIME" {
				o.RuntimeSource = tc.source
			}
			o.LookPath = lookPath
			o.Known = []string{filepath.Join(dir, "absent"), known}
			f, err := detect.Find(context.Background(), o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, runtime.ErrBinaryNotFound) {
					t.Fatalf("err = %v, want %q (ErrBinaryNotFound)", err, tc.wantErr)
				}
				return
			}
			if err != nil || f.Path != tc.want || f.Source != tc.source {
				t.Fatalf("Find = %+v, %v; want %s from %s", f, err, tc.want, tc.source)
			}
		})
	}
}

// With no environment given, the binary is asked with the process's
// own, as every later engine call is (enginecli.Options.Env): an engine
// that needs its environment (here: a variable the script checks) is
// still recognised.
func TestVersionIsAskedWithTheProcessEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HSBX_DETECT_TEST", "set")
	bin := filepath.Join(dir, "docker")
	script := "#!/bin/sh\n[ \"$HSBX_DETECT_TEST\" = set ] || { echo 'no environment' >&2; exit 125; }\necho 'Docker version 28.2.2, build e6534b4'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := opts(dir, nil)
	o.Engine.Env = nil
	o.Runtime = bin
	if f, err := detect.Find(context.Background(), o); err != nil || f.Dialect != runtime.Docker {
		t.Fatalf("Find with no Env = %+v, %v; want docker (asked with the process environment)", f, err)
	}
}

func TestUnsupportedBinary(t *testing.T) {
	dir := t.TempDir()
	o := opts(dir, nil)
	o.Runtime = fakeBin(t, dir, "nerdctl", "nerdctl version 1.7.0")
	if _, err := detect.Find(context.Background(), o); !errors.Is(err, runtime.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}

func TestDialectOf(t *testing.T) {
	for line, want := range map[string]runtime.Dialect{
		"Docker version 28.2.2, build e6534b4":       runtime.Docker,
		"Docker version 20.10.24+dfsg1, build 297e1": runtime.Docker,
		"podman version 4.3.1":                       runtime.Podman,
		"podman-remote version 5.0.0":                runtime.Podman,
		"nerdctl version 1.7.0":                      "",
		"":                                           "",
	} {
		if got, _ := detect.DialectOf(line); got != want {
			t.Errorf("DialectOf(%q) = %q, want %q", line, got, want)
		}
	}
}

// A client whose --version does not answer (docker 20.10 reaches its
// engine for it: over ssh, a machine that may hang) is bounded by the
// engine timeout, and a caller that gives up (Ctrl-C) is told so, never
// that the binary is missing.
func TestVersionIsBoundedAndInterruptible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "docker")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := opts(dir, nil)
	o.Runtime = bin
	o.Engine.Timeout = 300 * time.Millisecond
	if _, err := detect.Find(context.Background(), o); !errors.Is(err, runtime.ErrTimeout) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("a silent --version: %v, want ErrTimeout naming the bound", err)
	}
	o.Engine.Timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := detect.Find(ctx, o); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrBinaryNotFound) {
		t.Fatalf("a caller that gives up: %v, want its context's error", err)
	}
}
