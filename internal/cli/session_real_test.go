package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/hsbx/hsbx/internal/channel"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Sessions on every engine (the fakes too): state carries over, from a
// one-shot channel and then through the holder; an interrupt keeps the
// session; a background job lives on; the holder's end does not end the
// session; a script ending its shell says so, and so does the next run;
// a restart of the sandbox reads as a reset.
func TestSessionsRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			run := t.TempDir()
			if err := os.Chmod(run, 0o700); err != nil {
				t.Fatal(err)
			}
			env := append(append([]string{}, tg.environ...), "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true",
				"HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
			task := fmt.Sprintf("sess-%d", time.Now().UnixNano())
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			hsbx := func(args ...string) (int, string, string) {
				t.Helper()
				n := 1
				if args[0] == "session" {
					n = 2
				}
				return runMain(t, env, append(append(append([]string{}, args[:n]...), "--task", task), args[n:]...)...)
			}
			must := func(want int, args ...string) (string, string) {
				t.Helper()
				code, out, errOut := hsbx(args...)
				if code != want {
					t.Fatalf("%v: exit %d, want %d: %q %s", args, code, want, out, errOut)
				}
				return out, errOut
			}
			upOut, _ := must(0, "up")
			id := strings.TrimSpace(upOut)
			// The first run: no holder yet (a channel of its own).
			must(0, "run", "--", `mkdir -p /tmp/sess-cwd && cd /tmp/sess-cwd && export GREETING="hi, a=b" && f() { echo "fn $1"; }`)
			for deadline := time.Now().Add(30 * time.Second); !tg.Fake; time.Sleep(100 * time.Millisecond) {
				if _, ls, _ := runMain(t, env, "ls", "--json"); strings.Contains(ls, `"channel":"up"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the channel did not come up")
				}
			}
			if out, errOut := must(0, "run", "--", `pwd; echo "$GREETING"; f x`); out != "/tmp/sess-cwd\nhi, a=b\nfn x\n" || errOut != "" {
				t.Fatalf("through the holder: %q %q", out, errOut)
			}
			// The machine interface: one result object, bytes exact.
			code, js, errOut := runMain(t, env, "--json", "run", "--task", task, "--", `printf '\377'; echo e >&2; pwd >&2; (exit 6)`)
			var res Result
			if err := json.Unmarshal([]byte(js), &res); err != nil || code != 6 || errOut != "" {
				t.Fatalf("run --json: exit %d: %v: %q %q", code, err, js, errOut)
			}
			if res.ExitCode != 6 || res.Stdout != "/w==" || res.StdoutEncoding != "base64" || res.Stderr != "e\n/tmp/sess-cwd\n" ||
				res.Session == nil || res.Session.Name != "default" || res.Session.New || res.Session.Reset != "" {
				t.Fatalf("run --json: %s", js)
			}
			out, errOut := must(124, "run", "--timeout", "2s", "--", "sleep 60 & sleep 60; echo after")
			if strings.Contains(out, "after") || !strings.Contains(errOut, "lives on") {
				t.Fatalf("timeout: %q %q", out, errOut)
			}
			must(0, "run", "--", `(sleep 300) >/dev/null 2>&1 & echo $! >/tmp/bg.pid`)
			// The holder ends (as after its idle limit): the session stays.
			socks, _ := filepath.Glob(filepath.Join(run, "hsbx", "*"))
			ended := 0
			for _, sock := range socks {
				if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
					channel.Shutdown(context.Background(), sock)
					ended++
				}
			}
			if ended == 0 && !tg.Fake {
				t.Fatalf("no holder socket under %s: %v", run, socks)
			}
			if out, _ := must(0, "run", "--", `pwd; kill -0 "$(cat /tmp/bg.pid)" && echo bg alive`); out != "/tmp/sess-cwd\nbg alive\n" {
				t.Fatalf("after the holder ended: %q", out)
			}
			out, errOut = must(7, "run", "--", "exit 7")
			if !strings.Contains(errOut, "session default ended: its shell exited (status 7)") {
				t.Fatalf("exit 7: %q %q", out, errOut)
			}
			out, errOut = must(0, "run", "--", "pwd")
			if out == "/tmp/sess-cwd\n" || !strings.Contains(errOut, "was reset: its shell exited (status 7)") {
				t.Fatalf("after exit 7: %q %q", out, errOut)
			}
			if !tg.Fake {
				restart := exec.Command(tg.Bin, "restart", "-t", "0", id)
				restart.Env = tg.environ
				if b, err := restart.CombinedOutput(); err != nil {
					t.Fatalf("restart: %v: %s", err, b)
				}
				_, errOut = must(0, "run", "--", "true")
				if !strings.Contains(errOut, "the sandbox was restarted or recreated") {
					t.Fatalf("after a restart: %q", errOut)
				}
			}
			if out, _ := must(0, "session", "ls"); !strings.Contains(out, "default") {
				t.Fatalf("session ls: %q", out)
			}
			must(0, "session", "close", "default")
			must(1, "session", "close", "default")
		})
	}
}
