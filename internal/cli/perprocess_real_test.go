package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A per-process sandbox whose creator was SIGKILLed (its Close never ran)
// is removed by the first plain `reap`, which first ends the commands the
// dead creator left running in it (they carry hsbx's marker); an exec
// session that is not hsbx's keeps it; `down` finds one (in this mode) and
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
			// The command outlasts the test's steps up to the sweep on a
			// loaded machine (`sleep 3` did not, on rootless podman: the
			// sweep found nothing to end), and the sweep ends it.
			creator := exec.Command(os.Args[0], "--log-level", "warn", "exec", "--task", task, "--", "sh", "-c", "echo started; exec sleep 60")
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
			// Its command (`sleep 60`, carrying hsbx's marker) is the dead
			// creator's leftover: the sweep ends it and removes the sandbox.
			if out := reap(); listed() || !strings.Contains(out, "is gone; 1 leftover command process(es) ended") {
				t.Fatalf("right after the kill, with `sleep 60` still running: %s; still listed: %v", out, listed())
			}

			// An exec session that is not hsbx's (no marker) keeps it.
			creator3 := exec.Command(os.Args[0], "--log-level", "warn", "exec", "--task", task, "--", "sh", "-c", "echo started; exec sleep 300")
			creator3.Env = env
			started3, err := creator3.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := creator3.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = creator3.Process.Kill(); _ = creator3.Wait() }()
			if b := make([]byte, 8); func() bool { n, _ := io.ReadFull(started3, b); return string(b[:n]) != "started\n" }() {
				t.Fatal("the third creator's command never started")
			}
			_, lsOut, _ := runMain(t, env, "ls", "--json")
			id := regexp.MustCompile(`"id":"([0-9a-f]{64})","name":"[^"]*","profile":"[^"]*","task":"` + regexp.QuoteMeta(task) + `"`).FindStringSubmatch(lsOut)
			if id == nil {
				t.Fatalf("no sandbox of %s in %s", task, lsOut)
			}
			foreign := exec.Command(tg.Bin, "exec", id[1], "sleep", "20")
			foreign.Env = tg.environ
			if err := foreign.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = foreign.Process.Kill(); _ = foreign.Wait() }()
			_ = creator3.Process.Signal(syscall.SIGKILL)
			_ = creator3.Wait()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				out := reap()
				if strings.Contains(out, "in use: 1 live exec session") && listed() {
					break // hsbx's command ended, the foreign session kept it
				}
				if time.Now().After(deadline) || !listed() {
					t.Fatalf("a foreign exec session did not keep the sandbox: %s; still listed: %v", out, listed())
				}
			}
			if code, _, errOut := runMain(t, env, "down", "--task", task); code != 0 || listed() {
				t.Fatalf("down: exit %d, %s", code, errOut)
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
