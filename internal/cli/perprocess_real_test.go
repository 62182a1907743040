package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A per-process sandbox whose creator was SIGKILLed (its Close never ran)
// is kept by a sweep while a command still runs in it, and removed by the
// first plain `reap` once none does; `down` finds one (in this mode) and
// removes it once its creator is gone — on the real engines. The creator is
// this test binary acting as hsbx (TestMain), started as a process of its
// own so that it can be killed.
func TestPerProcessSandboxOfAKilledCreatorRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		if tg.Fake {
			continue // the fakes: reap_per_process_creator_killed.txtar
		}
		t.Run(tg.Name, func(t *testing.T) {
			task := fmt.Sprintf("eph-%d", time.Now().UnixNano()) // no run's leftover can match
			env := append(append([]string{}, tg.environ...), "TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES=false", "HSBX_TEST_HOLDER=1")
			t.Cleanup(func() {
				runMain(t, append(env, "TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES=true"), "down", "--task", task)
			})
			// It says when its command runs: killed before, it would leave
			// a sandbox with nothing running in it, rightly removed at once.
			creator := exec.Command(os.Args[0], "--log-level", "warn", "exec", "--task", task, "--", "sh", "-c", "echo started; exec sleep 3")
			creator.Env = env
			started, err := creator.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := creator.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = creator.Process.Kill(); _ = creator.Wait() }()
			line := make(chan string, 1)
			go func() {
				b := make([]byte, 8)
				n, _ := io.ReadFull(started, b)
				line <- string(b[:n])
			}()
			select {
			case l := <-line:
				if l != "started\n" {
					t.Fatalf("the creator's command said %q", l)
				}
			case <-time.After(90 * time.Second):
				t.Fatal("the creator's command never started")
			}
			listed := func() bool {
				_, out, _ := runMain(t, env, "ls", "--json")
				return strings.Contains(out, `"task":"`+task+`"`)
			}
			reap := func() string {
				code, out, errOut := runMain(t, env, "reap", "--json")
				if code != 0 {
					t.Fatalf("reap: exit %d: %s", code, errOut)
				}
				return out
			}
			for deadline := time.Now().Add(60 * time.Second); !listed(); time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the per-process sandbox never appeared")
				}
			}
			if out := reap(); !listed() || !strings.Contains(out, "per-process sandbox of a live process") {
				t.Fatalf("a live creator's sandbox: %s", out)
			}
			_ = creator.Process.Signal(syscall.SIGKILL)
			_ = creator.Wait()
			if out := reap(); !listed() || !strings.Contains(out, "is gone, but in use: 1 live exec session") {
				t.Fatalf("right after the kill, with `sleep 3` still running: %s", out)
			}
			// The command ends within seconds; the next sweep after that
			// removes the sandbox.
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				out := reap()
				if strings.Contains(out, "is gone\"") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not removed after its command ended: %s", out)
				}
			}
			if listed() {
				t.Fatal("removed by the sweep, yet ls still lists it")
			}
			// down finds one too: left alone while its creator lives,
			// removed (with the command still running) once it was killed.
			creator2 := exec.Command(os.Args[0], "--log-level", "warn", "exec", "--task", task, "--", "sleep", "300")
			creator2.Env = env
			if err := creator2.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = creator2.Process.Kill(); _ = creator2.Wait() }()
			for deadline := time.Now().Add(60 * time.Second); !listed(); time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second per-process sandbox never appeared")
				}
			}
			if code, _, errOut := runMain(t, env, "down", "--task", task); code != 0 || !strings.Contains(errOut, "belongs to a live process") || !listed() {
				t.Fatalf("down with its creator alive: exit %d, %s", code, errOut)
			}
			_ = creator2.Process.Signal(syscall.SIGKILL)
			_ = creator2.Wait()
			if code, _, errOut := runMain(t, env, "down", "--task", task); code != 0 || listed() {
				t.Fatalf("down after its creator was killed: exit %d, %s; still listed: %v", code, errOut, listed())
			}
		})
	}
}
