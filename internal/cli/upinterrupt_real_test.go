package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
)

// Ctrl-C at any moment of a creating `up`, on the real engines: whatever
// the engine got done, hsbx never says "could not be removed" about it,
// leaves no container that is not running, and the next up works (using
// the one that was kept, if any). The moments are spread over a create:
// five under make soak, an early and a late one in the gate. On the
// engines reached over ssh too, where a create is a lookup, the volumes
// and the run, each over the shared ssh connection.
func TestUpInterruptedRealEngines(t *testing.T) {
	for _, tg := range cliTargetsWithSSH(t) {
		// this test binary is hsbx here, signals and all (TestMain, HSBX_TEST_MAIN)
		if tg.Fake {
			continue // the fakes: up_interrupted_create.txtar
		}
		t.Run(tg.Name, func(t *testing.T) {
			delays := []time.Duration{80, 250}
			if enginetest.Soak() {
				delays = []time.Duration{30, 80, 150, 250, 400}
			}
			for _, delay := range delays {
				delay *= time.Millisecond
				task := fmt.Sprintf("intr-%d", time.Now().UnixNano())
				env := append(append([]string{}, tg.environ...), "HSBX_TEST_MAIN=1") // the test binary acts as hsbx
				t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
				up := exec.Command(os.Args[0], "up", "--task", task)
				up.Env = env
				var stderr bytes.Buffer
				up.Stderr = &stderr
				if err := up.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(delay)
				_ = up.Process.Signal(syscall.SIGINT)
				_ = up.Wait()
				if strings.Contains(stderr.String(), "could not be removed") {
					t.Fatalf("Ctrl-C after %s: %s", delay, stderr.String())
				}
				ids := func(args ...string) []string {
					ps := exec.Command(tg.Bin, append([]string{"ps", "-q", "--no-trunc", "--filter", "label=hsbx.task=" + task}, args...)...)
					ps.Env = tg.Env
					out, err := ps.Output()
					if err != nil {
						t.Fatalf("ps: %v", err)
					}
					return strings.Fields(string(out))
				}
				all, running := ids("-a"), ids()
				states := map[bool]string{true: "running", false: "none"}[len(running) == 1]
				if len(all) > 1 || len(all) != len(running) {
					t.Fatalf("Ctrl-C after %s left %d container(s), %d running (hsbx said: %s)", delay, len(all), len(running), stderr.String())
				}
				if code, out, errOut := runMain(t, env, "up", "--task", task, "--json"); code != 0 ||
					len(running) == 1 && !strings.Contains(out, `"action":"reused"`) {
					t.Fatalf("up after Ctrl-C at %s (left: %s): exit %d: %s %s", delay, states, code, out, errOut)
				}
				if strings.HasPrefix(tg.Name, "podman") {
					// nothing of it left in podman's storage either, once
					// the next up is done (podman ps --external)
					runMain(t, env, "down", "--task", task)
					ext := exec.Command(tg.Bin, "ps", "-a", "--external", "--format", "{{.Names}}")
					ext.Env = tg.Env
					out, err := ext.Output()
					if err != nil {
						t.Fatalf("ps --external: %v", err)
					}
					if strings.Contains(string(out), task) {
						t.Fatalf("Ctrl-C after %s: podman's storage still holds %s:\n%s", delay, task, out)
					}
					// ... and no container process that podman lost track
					// of: a conmon of it outliving the down (podman run
					// SIGKILLed mid-create left these: its record said
					// "created", and removing the record left the process).
					var left []string
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
						if left = conmonsOf(task); len(left) == 0 || time.Now().After(deadline) {
							break
						}
					}
					if len(left) > 0 {
						t.Fatalf("Ctrl-C after %s: container processes left running after down: %q (hsbx said: %s)", delay, left, stderr.String())
					}
				}
				t.Logf("Ctrl-C after %s: left %s; hsbx said %q", delay, states, strings.TrimSpace(stderr.String()))
			}
		})
	}
}

// conmonsOf lists the host's conmon processes of containers whose name
// holds task (podman's monitor of a container process; -n names it).
func conmonsOf(task string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "conmon") {
			continue
		}
		for i, a := range args {
			if a == "-n" && i+1 < len(args) && strings.Contains(args[i+1], task) {
				out = append(out, p.Name()+" "+args[i+1])
			}
		}
	}
	return out
}
