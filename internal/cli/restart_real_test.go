package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The sandbox restarted behind hsbx's back right after a command: the
// next CLI command goes to a holder whose agent the restart ended before
// the command was sent. It never ran there, so it runs once (the plain
// path), not 125 "may have run" — on the real engines.
func TestCommandAfterARestartRunsOnceRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		if tg.Fake {
			continue // the fakes have no restart
		}
		t.Run(tg.Name, func(t *testing.T) {
			env := holderTestEnv(t, tg.environ)
			task := fmt.Sprintf("restart-%d", time.Now().UnixNano())
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			code, out, errOut := runMain(t, env, "up", "--task", task)
			if code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			id := strings.TrimSpace(out)
			for i := range 4 {
				awaitChannelUp(t, env, task)
				restart := exec.Command(tg.Bin, "restart", "-t", "0", id)
				restart.Env = tg.environ
				if b, err := restart.CombinedOutput(); err != nil {
					t.Fatalf("restart: %v: %s", err, b)
				}
				file := fmt.Sprintf("/tmp/runs-%d", i)
				code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "sh", "-c", "echo run >>"+file+"; wc -l <"+file)
				if code != 0 || strings.TrimSpace(out) != "1" {
					t.Fatalf("restart %d: the next command: exit %d, %q, %s (want it run once)", i, code, out, errOut)
				}
			}
		})
	}
}

// holderTestEnv is environ with the exec channel on and holders that are
// this test binary acting as hsbx, in a runtime directory of the test's.
func holderTestEnv(t *testing.T, environ []string) []string {
	t.Helper()
	run := t.TempDir()
	if err := os.Chmod(run, 0o700); err != nil {
		t.Fatal(err)
	}
	return append(append([]string{}, environ...), "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true",
		"HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
}

// awaitChannelUp runs commands in task until its holder serves (ls says
// the channel is up), for 30 s at most.
func awaitChannelUp(t *testing.T, env []string, task string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		runMain(t, env, "exec", "--task", task, "--", "true")
		if _, ls, _ := runMain(t, env, "ls", "--json"); strings.Contains(ls, `"channel":"up"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the channel did not come up")
		}
	}
}
