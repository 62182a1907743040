package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestDoctorRealEngines runs `hsbx doctor --json` against the real engines
// scripts/engines.sh set up: docker, rootful podman, rootless podman and a
// `docker` that is a shim for podman; and against a docker daemon that is
// not there.
func TestDoctorRealEngines(t *testing.T) {
	bins := map[string]string{"docker": "HSBX_IT_DOCKER", "podman": "HSBX_IT_PODMAN",
		"podman-rootless": "HSBX_IT_PODMAN_ROOTLESS", "docker-shim": "HSBX_IT_DOCKER_SHIM"}
	want := map[string][2]any{"docker": {"docker", false}, "podman": {"podman", false},
		"podman-rootless": {"podman", true}, "docker-shim": {"podman", false}}
	for name, envVar := range bins {
		t.Run(name, func(t *testing.T) {
			bin := os.Getenv(envVar)
			if bin == "" {
				if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
					t.Fatalf("%s unset but HSBX_REQUIRE_ENGINES=1", envVar)
				}
				t.Skipf("real engine not configured (%s unset): run `make engines`", envVar)
			}
			code, out, errOut := runMain(t, os.Environ(), "--runtime", bin, "doctor", "--json")
			var r doctorReport
			if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
				t.Fatalf("exit %d, %v\nstdout %s\nstderr %s", code, err, out, errOut)
			}
			if string(r.Runtime) != want[name][0] || r.Rootless != want[name][1] || !r.Reachable || r.Version == "" || r.Binary != bin {
				t.Errorf("report %+v, want runtime %v rootless %v", r, want[name][0], want[name][1])
			}
		})
	}
	t.Run("docker-shim-on-PATH", func(t *testing.T) {
		shim := os.Getenv("HSBX_IT_DOCKER_SHIM")
		if shim == "" {
			if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
				t.Fatal("HSBX_IT_DOCKER_SHIM unset but HSBX_REQUIRE_ENGINES=1")
			}
			t.Skip("HSBX_IT_DOCKER_SHIM unset: run `make engines`")
		}
		// auto-detection finds `docker` first on PATH; it is podman in disguise
		env := append(os.Environ(), "PATH="+filepath.Dir(shim)+":"+os.Getenv("PATH"), "HSBX_RUNTIME=", "XDG_CACHE_HOME="+t.TempDir())
		code, out, errOut := runMain(t, env, "doctor", "--json")
		var r doctorReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("exit %d %v: %s %s", code, err, out, errOut)
		}
		if r.Runtime != "podman" || r.Binary != shim || r.Source != "PATH" || !r.Reachable {
			t.Errorf("report %+v, want podman from %s on PATH", r, shim)
		}
	})
	t.Run("docker-down", func(t *testing.T) {
		bin := os.Getenv("HSBX_IT_DOCKER")
		if bin == "" {
			t.Skip("HSBX_IT_DOCKER unset")
		}
		env := append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/hsbx-docker.sock")
		code, out, _ := runMain(t, env, "--runtime", bin, "doctor", "--json")
		var r doctorReport
		_ = json.Unmarshal([]byte(out), &r)
		if code != ExitEngine || r.Reachable || r.Error == "" || r.Hint == "" {
			t.Errorf("exit %d, report %+v", code, r)
		}
	})
}

func runMain(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Environ: environ, Stdin: &bytes.Buffer{}, Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}
