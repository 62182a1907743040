package cli

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The run: a sandbox paused less than a second after its last
// command (the holder then sends the next command without a ping) made
// `hsbx exec` wait 45 s and say the sandbox "was stopped or removed";
// with --timeout 5s it took 10 s and said the same. Through the holder,
// on docker and rootful podman (rootless podman on cgroups v1 cannot
// pause): a command waiting on the paused sandbox gets it unpaused and
// runs once; one paused under it keeps its exit status.
func TestExecOnAPausedSandboxRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		if tg.Fake {
			continue // the fakes' pause freezes no process
		}
		t.Run(tg.Name, func(t *testing.T) {
			env := holderTestEnv(t, tg.environ)
			task := fmt.Sprintf("paused-%d", time.Now().UnixNano())
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			code, out, errOut := runMain(t, env, "up", "--task", task)
			if code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			id := strings.TrimSpace(out)
			engine := func(args ...string) error {
				cmd := exec.Command(tg.Bin, args...)
				cmd.Env = tg.environ
				if b, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%v: %s", err, b)
				}
				return nil
			}
			if err := engine("pause", id); err != nil {
				t.Skipf("this engine cannot pause here: %v", err)
			}
			if err := engine("unpause", id); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = engine("unpause", id) }) // before down: a paused container cannot be removed everywhere
			awaitChannelUp(t, env, task)
			type result struct {
				code     int
				out, err string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "sh", "-c", "sleep 1; echo x >> /tmp/ran; wc -l < /tmp/ran")
				done <- result{code, out, errOut}
			}()
			time.Sleep(300 * time.Millisecond)
			if err := engine("pause", id); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := <-done
			if r.code != 0 || strings.TrimSpace(r.out) != "1" {
				t.Fatalf("exec with the sandbox paused under it: exit %d, %q, %s (want 0, run once)", r.code, r.out, r.err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("it waited %s on the paused sandbox", d)
			}

			// Paused right after a command, with a --timeout: never the
			// old 10 s and "stopped or removed".
			runMain(t, env, "exec", "--task", task, "--", "true")
			if err := engine("pause", id); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			code, out, errOut = runMain(t, env, "exec", "--task", task, "--timeout", "5s", "--", "sh", "-c", "echo y >> /tmp/ran; wc -l < /tmp/ran")
			if strings.Contains(errOut, "stopped or removed") || (code != 0 && code != ExitTimeout) || (code == 0 && strings.TrimSpace(out) != "2") {
				t.Fatalf("exec --timeout 5s right after a pause: exit %d, %q, %s", code, out, errOut)
			}
			if d := time.Since(start); d > 9*time.Second {
				t.Errorf("exec --timeout 5s right after a pause took %s", d)
			}
			if code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "echo", "after"); code != 0 || out != "after\n" {
				t.Errorf("the next command: exit %d, %q, %s", code, out, errOut)
			}
		})
	}
}
