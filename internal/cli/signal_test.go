package cli

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/enginetest"
)

// TestMain makes the test binary the fake engines and, for a test that
// sets HSBX_TEST_HOLDER=1 (passed on with HSBX_HOLDER_ENV), hsbx's holder:
// the CLI under test starts its holder as its own binary with a flag first.
func TestMain(m *testing.M) {
	hsbx.ServeSSHStandIn() // a test that names this binary as the stand-in (TestHungRemoteEngine)
	if base := filepath.Base(os.Args[0]); os.Getenv("HSBX_TEST_MAIN") == "1" && base != "docker" && base != "podman" && base != "kubectl" {
		// This binary is hsbx, signals and all (as cmd/hsbx's run); as a
		// fake engine (its links), it is that.
		ctx, cancel := context.WithCancelCause(context.Background())
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-sigs
			cancel(&SignalError{Signal: s})
			s = <-sigs
			os.Exit(128 + int(s.(syscall.Signal)))
		}()
		self, _ := os.Executable()
		os.Exit(Main(ctx, Env{Args: os.Args[1:], Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SSHStandIn: self}))
	}
	if len(os.Args) > 1 && os.Args[1] == "--log-level" {
		if os.Getenv("HSBX_TEST_HOLDER") == "1" {
			os.Exit(Main(context.Background(), Env{Args: os.Args[1:], Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
		}
		// A holder the test did not ask for does not start (the testing
		// package would refuse the flag the same way, after making the
		// test run's temp dirs it then leaves behind).
		os.Exit(2)
	}
	enginetest.Main(m)
}

// A signal while `hsbx exec` runs: the command's processes in the sandbox
// are killed and hsbx exits 128+N (143 for SIGTERM, 130 for SIGINT).
func TestSignalExitCodes(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			environ := append(os.Environ(), "FAKEENGINE_DIR="+filepath.Join(dir, "engine"), "HOME="+dir,
				"HSBX_RUNTIME=docker", "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir, "XDG_STATE_HOME="+dir)
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				state := filepath.Join(dir, "engine", "state.json")
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if b, _ := os.ReadFile(state); strings.Contains(string(b), `"pid"`) {
						break
					}
				}
				cancel(&SignalError{Signal: sig})
			}()
			var out, errb bytes.Buffer
			code := Main(ctx, Env{Args: []string{"exec", "--", "sleep", "300"}, Environ: environ, Stdout: &out, Stderr: &errb})
			if code != 128+int(sig) {
				t.Fatalf("exit %d, want %d; stderr %s", code, 128+int(sig), errb.String())
			}
			if !strings.Contains(errb.String(), "killed its 1 process(es) in the sandbox") {
				t.Errorf("stderr: %s", errb.String())
			}
			out.Reset()
			if code := Main(context.Background(), Env{Args: []string{"exec", "--", "ps"}, Environ: environ, Stdout: &out, Stderr: &errb}); code != 0 || strings.Contains(out.String(), "sleep 300") {
				t.Errorf("after the signal (exit %d), ps shows:\n%s", code, out.String())
			}
		})
	}
}

// hsbx installs its signal handlers beside reading its configuration
// (Env.Ready): until they are in, nothing a Ctrl-C must stop is started —
// no container, no command, no output — for the hot commands (exec, run,
// which read their sandbox's state meanwhile) as for the others.
func TestNothingStartsBeforeTheSignalHandlers(t *testing.T) {
	dir := t.TempDir()
	// (run's session keeper runs on this host with the fakes: it ends a
	// second after the test, not an hour.)
	environ := append(os.Environ(), "FAKEENGINE_DIR="+filepath.Join(dir, "engine"), "HOME="+dir,
		"HSBX_RUNTIME=docker", "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir, "XDG_STATE_HOME="+dir, "HSBX_SESSION_IDLE=1s")
	argvLog := filepath.Join(dir, "engine", "argv.log")
	for _, args := range [][]string{
		{"up"},
		{"exec", "--", "echo", "exec ran"},
		{"run", "--", "echo run ran"},
		{"version"},
	} {
		t.Run(args[0], func(t *testing.T) {
			before, _ := os.ReadFile(argvLog)
			ready := make(chan struct{})
			var out, errb bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- Main(context.Background(), Env{Args: args, Environ: environ, Stdout: &out, Stderr: &errb, Ready: ready})
			}()
			time.Sleep(300 * time.Millisecond) // what Main would do meanwhile, it has done
			select {
			case code := <-done:
				t.Fatalf("%v finished (exit %d) before the handlers were in", args, code)
			default:
			}
			after, _ := os.ReadFile(argvLog)
			for _, call := range strings.Split(strings.TrimSpace(string(after[len(before):])), "\n") {
				if f := strings.Fields(call); len(f) > 1 && f[1] != "version" && f[1] != "info" {
					t.Errorf("%v: the engine was called before the handlers were in: %s", args, call)
				}
			}
			if out.Len() != 0 || errb.Len() != 0 {
				t.Errorf("%v wrote before the handlers were in: %q %q", args, out.String(), errb.String())
			}
			close(ready)
			if code := <-done; code != 0 {
				t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
			}
			if args[0] != "up" && !strings.Contains(out.String(), "ran") && args[0] != "version" {
				t.Errorf("%v: stdout %q", args, out.String())
			}
		})
	}
}
