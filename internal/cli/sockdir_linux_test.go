package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
)

// squat makes dir (mode perm) belong to uid 1001, as another user who
// made it first would have it.
func squat(t *testing.T, dir string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 1001, 1001); err != nil {
		t.Fatal(err)
	}
}

// The review's critical finding: with XDG_RUNTIME_DIR unset, another user
// makes $TMPDIR/hsbx-0 first and swaps hsbx/ inside it. hsbx must not
// use it: the channel is off with one warning naming the directory, the
// command runs the plain way, and nothing of root's lands in it — on
// every engine.
func TestChannelRefusesSquattedSocketBase(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	for _, tg := range cliTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			// TMPDIR is the engine client's too: the rootless engine's
			// user must reach it (t.TempDir is root's alone).
			dir, err := os.MkdirTemp("", "hsbx-squat-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, "tmp")
			if err := os.Mkdir(tmp, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			base := filepath.Join(tmp, "hsbx-0")
			squat(t, base, 0o777)
			squat(t, filepath.Join(base, "hsbx"), 0o777)
			var environ []string
			for _, kv := range tg.environ {
				if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") {
					environ = append(environ, kv)
				}
			}
			environ = append(environ, "TMPDIR="+tmp, "HSBX_EXEC_CHANNEL=true", "HSBX_HOLDER_ENV=FAKEENGINE_*",
				"HSBX_EXEC_CHANNEL_AGENT="+enginetest.AgentBinary(t))
			task := "squat-" + filepath.Base(dir)
			t.Cleanup(func() { runMain(t, environ, "down", "--task", task) })
			for i := range 2 {
				code, out, msg := runMain(t, environ, "exec", "--task", task, "--", "echo", "hi")
				if code != 0 || out != "hi\n" {
					t.Fatalf("run %d: exit %d, stdout %q, stderr %s", i, code, out, msg)
				}
				if !strings.Contains(msg, "exec channel is off") || !strings.Contains(msg, base+" belongs to uid 1001") ||
					strings.Count(msg, "hsbx: warning: the exec channel") != 1 {
					t.Fatalf("run %d: want one warning naming %s, got %q", i, base, msg)
				}
			}
			ents, _ := os.ReadDir(filepath.Join(base, "hsbx"))
			if len(ents) != 0 {
				t.Fatalf("hsbx put %d file(s) in another user's directory: %v", len(ents), ents[0].Name())
			}
		})
	}
}

// sudo -E keeps the invoking user's XDG_RUNTIME_DIR: root must not keep
// sockets in a directory that user owns; it falls back to its own.
func TestChannelSkipsAnotherUsersRuntimeDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	dir := t.TempDir()
	theirs := filepath.Join(dir, "run-user-1001")
	squat(t, theirs, 0o700)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	app := &App{Env: Env{Environ: []string{"XDG_RUNTIME_DIR=" + theirs, "TMPDIR=" + tmp}}}
	d, err := app.socketDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tmp, "hsbx-0", "hsbx"); d.Path() != want {
		t.Fatalf("socket dir %s, want %s", d.Path(), want)
	}
	if _, err := os.Stat(filepath.Join(theirs, "hsbx")); err == nil {
		t.Fatal("made a directory in another user's runtime dir")
	}
}

// The state directory holds the verified container id the warm path
// execs in: one another user can write is refused before any engine call.
func TestUnsafeStateDirRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	squat(t, state, 0o755)
	environ := []string{"PATH=" + os.Getenv("PATH"), "FAKEENGINE_DIR=" + filepath.Join(dir, "engine"), "HOME=" + dir,
		"HSBX_RUNTIME=docker", "XDG_CONFIG_HOME=" + dir, "XDG_CACHE_HOME=" + dir, "XDG_STATE_HOME=" + state}
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: []string{"exec", "--", "echo", "hi"}, Environ: environ, Stdout: &out, Stderr: &errb})
	want := filepath.Join(state, "hsbx")
	if code != ExitUsage || out.Len() != 0 || !strings.Contains(errb.String(), state+" belongs to uid 1001") ||
		!strings.Contains(errb.String(), "hint: make "+state) {
		t.Fatalf("exit %d, stdout %q, stderr %q: want exit 2 naming %s", code, out.String(), errb.String(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "engine")); err == nil {
		t.Fatal("the engine was called")
	}
}
