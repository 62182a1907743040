package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A sandbox made from other settings, on the real engines: warned about
// and kept (warn), refused (error), never replaced while a command runs in
// it — one of this host's hsbx processes, or an exec the engine runs for
// someone else — and replaced once idle (recreate), with /workspace kept,
// the holder's own exec ended first. On the engines reached over ssh too,
// where /workspace is in the engine's volumes.
func TestDriftRealEngines(t *testing.T) {
	for _, tg := range cliTargetsWithSSH(t) {
		if tg.Fake {
			continue // the fakes: drift_*.txtar
		}
		t.Run(tg.Name, func(t *testing.T) {
			task := fmt.Sprintf("drift-%d", time.Now().UnixNano())
			base := append(append([]string{}, tg.environ...), "HSBX_TEST_HOLDER=1", "HSBX_TASK="+task)
			t.Cleanup(func() { runMain(t, base, "down", "--purge") })
			drifted := append(append([]string{}, base...), `TERMINAL_DOCKER_ENV={"NEWVAR":"new, with = and commas"}`)
			must := func(env []string, args ...string) (string, string) {
				t.Helper()
				code, out, errOut := runMain(t, env, args...)
				if code != 0 {
					t.Fatalf("hsbx %v: exit %d\n%s%s", args, code, out, errOut)
				}
				return out, errOut
			}
			id1, _ := must(base, "up")
			id1 = strings.TrimSpace(id1)
			// (the rootless engine's user cannot write to this test's
			// root-owned state dir, where /workspace lives)
			kept := "kept\n"
			if tg.Rootless {
				kept = ""
			} else {
				must(base, "exec", "--", "sh", "-c", "echo kept > /workspace/f")
			}
			must(base, "exec", "--", "true") // through the holder, whose agent is an exec of its own

			// up --image of another image: the same sandbox, and said so,
			// naming the image it was made from.
			other := fmt.Sprintf("hsbx-drift-%d:2", time.Now().UnixNano())
			if b, err := engineCmd(tg.environ, tg.Bin, "tag", tg.Image, other).CombinedOutput(); err != nil {
				t.Fatalf("%s tag: %v %s", tg.Bin, err, b)
			}
			t.Cleanup(func() { _ = engineCmd(tg.environ, tg.Bin, "rmi", other).Run() })
			out, errOut := must(base, "up", "--image", other)
			if strings.TrimSpace(out) != id1 || !strings.Contains(errOut, "(image: it was made from ") || !strings.Contains(errOut, "hsbx-busybox") {
				t.Fatalf("up --image %s: %q %q", other, out, errOut)
			}

			// warn: the same sandbox, said; ls marks it.
			out, errOut = must(drifted, "up")
			if strings.TrimSpace(out) != id1 || !strings.Contains(errOut, "was made from other settings than these (env) and is used as it is") {
				t.Fatalf("up with a new env name: %q %q", out, errOut)
			}
			if out, _ := must(drifted, "ls", "--json"); !strings.Contains(out, `"drift":["env"]`) {
				t.Fatalf("ls: %s", out)
			}

			// error: refused, nothing run.
			errEnv := append(append([]string{}, drifted...), "HSBX_ON_DRIFT=error")
			if code, out, errOut := runMain(t, errEnv, "exec", "--json", "--", "echo", "ran"); code != 1 || strings.Contains(out, "ran") || !strings.Contains(errOut, `"kind":"drift"`) {
				t.Fatalf("on_drift = error: exit %d %q %q", code, out, errOut)
			}

			// recreate, while another client's exec runs in it (not this
			// host's hsbx: only the engine knows): kept.
			raw := exec.Command(tg.Bin, "exec", id1, "sh", "-c", "echo $$ > /tmp/started; exec sleep 60")
			raw.Env = tg.environ
			if err := raw.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = raw.Process.Kill(); _ = raw.Wait() }()
			waitFor(t, func() bool {
				code, _, _ := runMain(t, base, "exec", "--", "test", "-e", "/tmp/started")
				return code == 0
			})
			// The holder (started by a plain exec, in the background) is up:
			// its agent is an exec too, which the replacement ends first.
			waitFor(t, func() bool {
				_, out, _ := runMain(t, base, "ls", "--json")
				return strings.Contains(out, `"channel":"up"`)
			})
			if code, _, errOut := runMain(t, append(drifted, "HSBX_LOG_LEVEL=debug"), "up", "--recreate"); code != 1 || !strings.Contains(errOut, "was not replaced: a command runs in the sandbox: the engine lists 1 running command") {
				ps, _ := exec.Command(tg.Bin, "exec", id1, "ps", "-o", "pid,ppid,args").CombinedOutput()
				ids, _ := exec.Command(tg.Bin, "inspect", "--format", "{{.ExecIDs}}", id1).CombinedOutput()
				host, _ := exec.Command("sh", "-c", "ps -eo pid,ppid,args | grep -e hold -e 'exec -i' | grep -v grep").CombinedOutput()
				t.Fatalf("up --recreate with another client's exec running: exit %d\n%s\n%s\n%s\n%s", code, errOut, ps, ids, host)
			}
			recreate := append(append([]string{}, drifted...), "HSBX_ON_DRIFT=recreate")
			if out, errOut := must(recreate, "up"); strings.TrimSpace(out) != id1 || !strings.Contains(errOut, "so it is used as it is") {
				t.Fatalf("on_drift = recreate with another client's exec running: %q %q", out, errOut)
			}
			must(base, "exec", "--", "sh", "-c", "kill $(cat /tmp/started)")
			_ = raw.Wait()

			// ... and while this host's hsbx runs a command in it: kept.
			local := exec.Command(os.Args[0], "exec", "--", "sh", "-c", "echo started; exec sleep 6")
			local.Env = append(append([]string{}, base...), "HSBX_TEST_MAIN=1")
			started, err := local.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := local.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = local.Process.Kill(); _ = local.Wait() }()
			if l, _ := bufio.NewReader(started).ReadString('\n'); l != "started\n" {
				t.Fatalf("the local command said %q", l)
			}
			if code, _, errOut := runMain(t, drifted, "up", "--recreate"); code != 1 || !strings.Contains(errOut, "a process on this host runs a command in it") {
				t.Fatalf("up --recreate with a local command running: exit %d %q", code, errOut)
			}
			_ = local.Wait()

			// idle: replaced; /workspace kept, the new setting applied, the
			// old container gone.
			out, errOut = must(recreate, "up")
			id2 := strings.TrimSpace(out)
			if id2 == id1 || !strings.Contains(errOut, "replaced it with one made from these (on_drift = recreate)") {
				t.Fatalf("on_drift = recreate, idle: %q (was %s) %q", id2, id1, errOut)
			}
			if out, _ := must(drifted, "exec", "--", "sh", "-c", `cat /workspace/f 2>/dev/null; echo "$NEWVAR"`); out != kept+"new, with = and commas\n" {
				t.Fatalf("in the new sandbox: %q", out)
			}
			if b, err := exec.Command(tg.Bin, "inspect", id1).CombinedOutput(); err == nil {
				t.Fatalf("the old sandbox is still there: %s", b)
			}
			// (Its own row: other tests' sandboxes of the profile, made
			// from their own settings, may show drift against these.)
			out, _ = must(drifted, "ls", "--json")
			var rows []struct {
				ID    string   `json:"id"`
				Task  string   `json:"task"`
				Drift []string `json:"drift"`
			}
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatalf("ls --json: %v: %s", err, out)
			}
			found := false
			for _, r := range rows {
				if r.Task == task {
					found = true
					if r.ID != id2 || len(r.Drift) > 0 {
						t.Fatalf("ls after the replacement: %+v", r)
					}
				}
			}
			if !found {
				t.Fatalf("ls after the replacement lists no sandbox of %s: %s", task, out)
			}
		})
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

// engineCmd is the engine's CLI with the test target's environment.
func engineCmd(environ []string, bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.Env = environ
	return c
}
