package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/environ"
)

// cliTarget is an engine for `hsbx` invocations: its environment points
// hsbx at it, with a state dir of its own.
func cliTargets(t *testing.T) []struct {
	enginetest.Target
	environ []string
} {
	var out []struct {
		enginetest.Target
		environ []string
	}
	for _, tg := range enginetest.Targets(t) {
		dir := t.TempDir()
		state := tg.StateDir
		if state == "" {
			state = dir
		}
		if tg.Rootless {
			// hsbx runs as root here: its state must be root's (another
			// user's is refused), yet reachable by the rootless engine's user.
			var err error
			if state, err = os.MkdirTemp("", "hsbx-it-rootless-state-"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(state) })
			if err := os.Chmod(state, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		xdg := dir
		if tg.Rootless {
			xdg = "" // the rootless engine reads XDG_CONFIG_HOME too: hsbx falls back to HOME, the wrapper gives podman its own
		}
		out = append(out, struct {
			enginetest.Target
			environ []string
		}{tg, cliEnviron(tg, xdg, state, "HOME="+dir)})
	}
	return out
}

// cliEnviron is the CLI's environment on tg: its engine and image, the
// given config and cache dir (xdg) and state dir, the tests' profile.
func cliEnviron(tg enginetest.Target, xdg, state string, extra ...string) []string {
	return append(append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "XDG_CONFIG_HOME="+xdg,
		"XDG_CACHE_HOME="+xdg, "XDG_STATE_HOME="+state, "TERMINAL_DOCKER_IMAGE="+tg.Image, "TERMINAL_DOCKER_NETWORK=false",
		"HSBX_PROFILE=hsbx-clitest", "TERMINAL_DOCKER_ORPHAN_REAPER=false"), extra...)
}

// cliTargetsWithSSH is cliTargets with the engines reached over ssh too
// (enginetest.SSHTargets: each keeps the HOME its ssh client reads).
func cliTargetsWithSSH(t *testing.T) []struct {
	enginetest.Target
	environ []string
} {
	out := cliTargets(t)
	ssh, ok := enginetest.SSHTargetsIfConfigured(t)
	if !ok {
		return out
	}
	for _, tg := range ssh {
		out = append(out, struct {
			enginetest.Target
			environ []string
		}{tg, cliEnviron(tg, t.TempDir(), tg.StateDir)})
	}
	return out
}

// firstThenEPIPE takes one write, then fails as a pipe whose reader left.
type firstThenEPIPE struct {
	bytes.Buffer
	n int
}

func (w *firstThenEPIPE) Write(p []byte) (int, error) {
	if w.n++; w.n > 1 {
		return 0, syscall.EPIPE
	}
	return w.Buffer.Write(p)
}

// `hsbx exec -- yes | head -1` on every engine: exit 141, yes stopped in
// the sandbox. And -e values are verbatim (commas, =).
func TestExecBrokenPipeAndEnvRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			task := "pipe-" + filepath.Base(t.TempDir())
			t.Cleanup(func() { runMain(t, tg.environ, "down", "--task", task) })
			if code, _, errOut := runMain(t, tg.environ, "up", "--task", task); code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			w := &firstThenEPIPE{}
			var errb bytes.Buffer
			code := Main(context.Background(), Env{Args: []string{"exec", "--task", task, "--", "yes"}, Environ: tg.environ, Stdout: w, Stderr: &errb})
			if code != ExitBrokenPipe || !strings.HasPrefix(w.String(), "y\n") {
				t.Fatalf("exec yes into a closed pipe: exit %d, stdout %q, stderr %s", code, w.String(), errb.String())
			}
			code, out, errOut := runMain(t, tg.environ, "exec", "--task", task, "--", "ps")
			if code != 0 || strings.Contains(out, "yes") {
				t.Errorf("after the broken pipe (exit %d %s), ps shows:\n%s", code, errOut, out)
			}
			code, out, errOut = runMain(t, append(tg.environ, "b=LEAKED"), "exec", "--task", task, "-e", "X=a,b", "-e", "Y=k=v,w", "--", "sh", "-c", "echo [$X] [$Y] [$b]")
			if code != 0 || out != "[a,b] [k=v,w] []\n" {
				t.Errorf("-e with commas: exit %d, %q %s", code, out, errOut)
			}
		})
	}
}

// An engine that stops answering never hangs exec: exit 125 with one line
// within the engine timeout. On docker, the sandbox is made through a
// proxy of the daemon's socket that then accepts and never answers: the
// same endpoint to hsbx, so the warm exec meets the hung engine (twice:
// the liveness check waits a moment first). On podman (no API service
// here), the engine is another endpoint, where the first call is the
// probe that finds the sandbox.
func TestExecHungEngineRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		if tg.Fake || tg.Rootless {
			continue // the fakes: exec_hung_engine.txtar; rootless podman is driven through a wrapper that resets the endpoint
		}
		t.Run(tg.Name, func(t *testing.T) {
			task := "hung-" + filepath.Base(t.TempDir())
			sock := filepath.Join(t.TempDir(), "hung.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var hung atomic.Bool
			upstream, _ := environ.Lookup(tg.environ, "DOCKER_HOST")
			upstream, _ = strings.CutPrefix(upstream, "unix://")
			var mu sync.Mutex
			var held []net.Conn
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range held {
					c.Close()
				}
			}()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					held = append(held, c) // when hung: accept, never answer
					mu.Unlock()
					if hung.Load() || upstream == "" {
						continue
					}
					go func() {
						u, err := net.Dial("unix", upstream)
						if err != nil {
							c.Close()
							return
						}
						go func() { _, _ = io.Copy(u, c); u.Close() }()
						_, _ = io.Copy(c, u)
						c.Close()
					}()
				}
			}()
			env := tg.environ
			if tg.Dialect() == "docker" {
				env = append(append([]string{}, tg.environ...), "DOCKER_HOST=unix://"+sock)
			}
			t.Cleanup(func() { runMain(t, tg.environ, "down", "--task", task) })
			if code, _, errOut := runMain(t, env, "up", "--task", task); code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			hung.Store(true)
			want := "stopped answering"
			if tg.Dialect() == "podman" {
				env = append(append([]string{}, tg.environ...), "CONTAINER_HOST=unix://"+sock)
				want = "looking for sandbox"
			}
			code, _, errOut := runMain(t, append(env, "HSBX_EXEC_CHANNEL=false"), "--engine-timeout", "2s", "exec", "--task", task, "--", "true")
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if code != ExitEngine || !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "no answer after 2s") {
				t.Fatalf("exec against a hung engine: exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}

// In an image without a shell (HSBX_IT_IMAGE_NOSHELL: busybox with only
// sleep, echo, cat, true and false linked) hsbx's kill script cannot run: a
// command that times out on the plain path is stopped by hsbx's agent
// instead, on every engine, and is gone afterwards.
func TestTimeoutWithoutAShellRealEngines(t *testing.T) {
	image := os.Getenv("HSBX_IT_IMAGE_NOSHELL")
	for _, tg := range cliTargets(t) {
		if tg.Fake {
			continue // the fakes: exec_timeout_no_shell.txtar
		}
		t.Run(tg.Name, func(t *testing.T) {
			if image == "" {
				if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
					t.Fatal("HSBX_IT_IMAGE_NOSHELL unset (scripts/engines.sh makes it), but HSBX_REQUIRE_ENGINES=1")
				}
				t.Skip("HSBX_IT_IMAGE_NOSHELL unset: run scripts/engines.sh")
			}
			env := append(append([]string{}, tg.environ...), "TERMINAL_DOCKER_IMAGE="+image, "HSBX_EXEC_CHANNEL=true")
			task := "noshell-" + filepath.Base(t.TempDir())
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			if code, _, errOut := runMain(t, env, "up", "--task", task); code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			if code, _, errOut := runMain(t, env, "exec", "--task", task, "--", "sh", "-c", "true"); code != 127 && code != 126 {
				t.Fatalf("the image has a shell (exit %d %s): the test would prove nothing", code, errOut)
			}
			code, _, errOut := runMain(t, env, "exec", "--task", task, "--timeout", "2s", "--", "sleep", "60")
			if code != ExitTimeout || !strings.Contains(errOut, "killed its 1 process") {
				t.Fatalf("a timeout without a shell: exit %d, %s", code, errOut)
			}
			code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "busybox", "ps")
			if code != 0 || strings.Contains(out, "sleep 60") {
				t.Fatalf("after the timeout (exit %d %s), ps shows:\n%s", code, errOut, out)
			}
			// A session needs a shell: hsbx's own failure, an error object
			// under --json (not a result a script could have printed).
			code, out, errOut = runMain(t, env, "run", "--json", "--task", task, "--", "true")
			if code != 127 || out != "" || !strings.Contains(errOut, `"kind":"no_shell"`) || !strings.Contains(errOut, `"hint":"sessions need bash or sh`) {
				t.Fatalf("run --json without a shell: exit %d, stdout %q, stderr %s", code, out, errOut)
			}
		})
	}
}

// `hsbx cp` to and from docker's /tmp (memory-backed: docker's own cp
// would write beneath it) goes through hsbx's agent: the first such copy
// starts the holder and waits for it.
func TestCpMemoryPathRealDocker(t *testing.T) {
	for _, tg := range cliTargets(t) {
		if tg.Name != "docker" {
			continue
		}
		run := t.TempDir()
		if err := os.Chmod(run, 0o700); err != nil {
			t.Fatal(err)
		}
		// The holder is this test binary (TestMain), the agent the one hsbx carries.
		env := append(append([]string{}, tg.environ...), "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true",
			"HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
		task := "cpmem-" + filepath.Base(run)
		t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
		if code, _, errOut := runMain(t, env, "up", "--task", task); code != 0 {
			t.Fatalf("up: %d %s", code, errOut)
		}
		host := t.TempDir()
		if err := os.WriteFile(filepath.Join(host, "f.txt"), []byte("to tmpfs\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := runMain(t, env, "cp", "--task", task, filepath.Join(host, "f.txt"), ":/tmp/f.txt"); code != 0 {
			t.Fatalf("cp into /tmp: %d %s", code, errOut)
		}
		if code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "cat", "/tmp/f.txt"); code != 0 || out != "to tmpfs\n" {
			t.Fatalf("the copied file as commands see it: %d %q %s", code, out, errOut)
		}
		back := filepath.Join(host, "back.txt")
		if code, _, errOut := runMain(t, env, "cp", "--task", task, ":/tmp/f.txt", back); code != 0 {
			t.Fatalf("cp out of /tmp: %d %s", code, errOut)
		}
		if b, err := os.ReadFile(back); err != nil || string(b) != "to tmpfs\n" {
			t.Fatalf("came back: %q %v", b, err)
		}
	}
}
