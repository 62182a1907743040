package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// network = allow keeps working after the hsbx that made the sandbox has
// exited, and after the holder's idle time: a process in the sandbox
// (started by the engine itself, not by hsbx) reaches an allowed service
// through the relay, and `hsbx netlog` shows the decision — on the real
// engines. The holder is this test binary (TestMain).
func TestEgressOutlivesHsbxRealEngines(t *testing.T) {
	for _, tg := range egressTargets(t) {
		engineExec := tg.engineExec
		t.Run(tg.Name, func(t *testing.T) {
			host := enginetest.HostAddress(t)
			ln, err := net.Listen("tcp4", host+":0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") })}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			dest := ln.Addr().String()

			run := t.TempDir()
			if err := os.Chmod(run, 0o700); err != nil {
				t.Fatal(err)
			}
			var env []string
			for _, kv := range tg.environ {
				if !strings.HasPrefix(kv, "TERMINAL_DOCKER_NETWORK=") {
					env = append(env, kv)
				}
			}
			env = append(env, "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true", "TERMINAL_DOCKER_NETWORK=allow", `HSBX_EGRESS_ALLOW=["`+dest+`"]`,
				"HSBX_EXEC_CHANNEL_IDLE=1s", "HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
			task := "egress-" + filepath.Base(run)
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			code, id, errOut := runMain(t, env, "up", "--task", task)
			if code != 0 {
				t.Fatalf("up: %d %s", code, errOut)
			}
			id = strings.TrimSpace(id)
			time.Sleep(3 * time.Second) // past the holder's idle time: a holder that relays stays
			fetch := func() string {
				res, err := (&proc.Runner{}).Run(context.Background(), proc.Cmd{Env: tg.Env, Timeout: time.Minute,
					Argv: engineExec(id, "sh", "-c", `printf 'GET http://%s/ HTTP/1.0\r\n\r\n' "$0" | nc 127.0.0.1 3128`, dest)})
				if err != nil {
					t.Fatal(err)
				}
				return string(res.Stdout)
			}
			var got string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if got = fetch(); strings.HasSuffix(got, "reached") || time.Now().After(deadline) {
					break
				}
			}
			if !strings.HasSuffix(got, "reached") {
				t.Fatalf("a process the engine started, with no hsbx running: %q", got)
			}
			// Refused: an address the list does not name.
			other := strings.Replace(dest, host, "127.0.0.1", 1)
			if got := fetch2(t, tg.Env, engineExec(id, "sh", "-c", `printf 'GET http://%s/ HTTP/1.0\r\n\r\n' "$0" | nc 127.0.0.1 3128`, other)); !strings.Contains(got, "403") {
				t.Fatalf("refused destination: %q", got)
			}
			code, out, errOut := runMain(t, env, "netlog", "--task", task, "--json")
			var recs []egress.Record
			if code != 0 || json.Unmarshal([]byte(out), &recs) != nil {
				t.Fatalf("netlog --json: %d %q %s", code, out, errOut)
			}
			allowed, refused := 0, 0
			for _, r := range recs {
				if r.Allowed && r.Rule == dest && r.Task == task {
					allowed++
				}
				if !r.Allowed && r.Host == "127.0.0.1" {
					refused++
				}
			}
			if allowed == 0 || refused != 1 {
				t.Fatalf("netlog: %s", out)
			}
			if code, out, _ := runMain(t, env, "netlog", "--task", task); code != 0 || !strings.Contains(out, "allowed") || !strings.Contains(out, "refused") {
				t.Fatalf("netlog: %d %q", code, out)
			}

			// A hostile process kills the agent: the relay is gone and
			// nothing gets out; the next hsbx command brings it back.
			_, _ = (&proc.Runner{}).Run(context.Background(), proc.Cmd{Env: tg.Env, Timeout: time.Minute,
				Argv: engineExec(id, "sh", "-c", `for p in /proc/[0-9]*; do grep -q '[h]sbx-agent' $p/cmdline 2>/dev/null && kill -9 ${p#/proc/}; done; true`)})
			time.Sleep(time.Second)
			if got := fetch(); strings.Contains(got, "reached") {
				t.Fatalf("with the agent killed, a request still got out: %q", got)
			}
			if code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "true"); code != 0 {
				t.Fatalf("exec: %d %q %s", code, out, errOut)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if got = fetch(); strings.HasSuffix(got, "reached") || time.Now().After(deadline) {
					break
				}
			}
			if !strings.HasSuffix(got, "reached") {
				t.Fatalf("after the next hsbx command, the relay is not back: %q", got)
			}
		})
	}
}

// egressTarget is a real engine (or the cluster) for the CLI's egress
// tests, with its own exec (no hsbx involved).
type egressTarget struct {
	enginetest.Target
	environ []string
}

// engineExec is the engine's own exec of argv in the sandbox id.
func (tg egressTarget) engineExec(id string, argv ...string) []string {
	if tg.Dialect() == runtime.Kubectl {
		_, name, _ := strings.Cut(id, "/")
		return append([]string{tg.Bin, "--namespace", tg.Kube.Namespace, "exec", "-i", name, "-c", "sandbox", "--"}, argv...)
	}
	return append([]string{tg.Bin, "exec", "-i", id}, argv...)
}

// egressTargets are the real engines and the cluster (its Pod kept off
// the network by a NetworkPolicy, the relay over kubectl exec).
func egressTargets(t *testing.T) []egressTarget {
	var out []egressTarget
	for _, tg := range cliTargets(t) {
		if !tg.Fake { // the fakes' sandboxes have the host's network: internal/channel's TestRelay*
			out = append(out, egressTarget{tg.Target, tg.environ})
		}
	}
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		dir := t.TempDir()
		out = append(out, egressTarget{kt, append(append([]string{}, kt.Env...), "HSBX_RUNTIME="+kt.Bin, "HSBX_KUBE_NAMESPACE="+kt.Kube.Namespace,
			"HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir, "XDG_STATE_HOME="+dir, "TERMINAL_DOCKER_IMAGE="+kt.Image,
			"TERMINAL_CONTAINER_PERSISTENT=false", "HSBX_PROFILE=hsbx-clitest", "TERMINAL_DOCKER_ORPHAN_REAPER=false")})
	}
	return out
}

func fetch2(t *testing.T, env, argv []string) string {
	t.Helper()
	res, err := (&proc.Runner{}).Run(context.Background(), proc.Cmd{Env: env, Timeout: time.Minute, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout)
}
