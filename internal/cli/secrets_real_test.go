package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/proc"
)

// Brokered secrets through the hsbx command: the holder relays after hsbx
// has exited, with one secret's value from a file (a new value in it
// applies to the next request) and one from the environment hsbx ran in
// (a header template), verifying the provider with SSL_CERT_FILE; a
// client the engine started (no hsbx involved) reaches the provider with
// the placeholders, and no value is in hsbx's output, the holder's log,
// the network log or `hsbx netlog`.
func TestSecretsThroughTheHolderRealEngines(t *testing.T) {
	for _, tg := range egressTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			host := enginetest.HostAddress(t)
			var mu sync.Mutex
			var seen []string
			dest, caPEM := enginetest.TLSServer(t, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("Authorization")+" | "+r.Header.Get("X-Env-Key"))
				mu.Unlock()
				fmt.Fprint(w, "provider saw it")
			}))
			// A directory anyone can read: a rootless engine's cp runs as its
			// user (t.TempDir's parent is this user's alone).
			work, err := os.MkdirTemp("", "hsbx-secrets-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(work) })
			run := t.TempDir()
			_ = os.Chmod(run, 0o700)
			caFile, keyFile := filepath.Join(work, "provider-ca.pem"), filepath.Join(work, "key")
			if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
				t.Fatal(err)
			}
			fileValue := fmt.Sprintf("file-secret-%d", time.Now().UnixNano())
			envValue := fmt.Sprintf("env-secret-%d", time.Now().UnixNano())
			if err := os.WriteFile(keyFile, []byte(fileValue+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			secrets := fmt.Sprintf(`[{"name":"PROVIDER_KEY","hosts":[%q],"file":%q},{"name":"ENV_KEY","hosts":[%q],"env":"HOST_ENV_KEY","header":"X-Env-Key: k={}"}]`, dest, keyFile, dest)
			var env []string
			for _, kv := range tg.environ {
				if !strings.HasPrefix(kv, "TERMINAL_DOCKER_NETWORK=") {
					env = append(env, kv)
				}
			}
			env = append(env, "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true", "TERMINAL_DOCKER_NETWORK=allow", "HSBX_SECRETS="+secrets,
				"HOST_ENV_KEY="+envValue, "SSL_CERT_FILE="+caFile, "TERMINAL_CONTAINER_PERSISTENT=false", "HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
			task := "secrets-" + filepath.Base(run)
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			var outputs strings.Builder
			hsbx := func(args ...string) string {
				t.Helper()
				code, out, errOut := runMain(t, env, args...)
				outputs.WriteString(out + errOut)
				if code != 0 {
					t.Fatalf("hsbx %s: %d %s %s", strings.Join(args, " "), code, out, errOut)
				}
				return out
			}
			id := strings.TrimSpace(hsbx("up", "--task", task))
			// The relay accepts before `up` returns: the first command
			// that uses the proxy finds it (its 403 for a host not
			// allowed), never "connection refused".
			if _, out, errOut := runMain(t, env, "exec", "--task", task, "--", "wget", "-q", "-O-", "http://nothing.invalid/"); !strings.Contains(out+errOut, "403") {
				t.Fatalf("the first command after up, through the proxy: %s %s", out, errOut)
			}
			probe := filepath.Join(work, "netprobe")
			if b, err := os.ReadFile(enginetest.NetProbeBinary(t)); err != nil || os.WriteFile(probe, b, 0o755) != nil {
				t.Fatal(err)
			}
			_ = os.Chmod(work, 0o755)
			hsbx("cp", "--task", task, probe, ":/workspace/netprobe")
			fetch := func() string {
				res, err := (&proc.Runner{}).Run(context.Background(), proc.Cmd{Env: tg.Env, Timeout: time.Minute,
					Argv: tg.engineExec(id, "/workspace/netprobe", "secret", "https://"+dest+"/v1", "PROVIDER_KEY")})
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(res.Stdout))
			}
			var got string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if got = fetch(); got == "200 provider saw it" || time.Now().After(deadline) {
					break
				}
			}
			if got != "200 provider saw it" {
				t.Fatalf("a client the engine started: %q", got)
			}
			if err := os.WriteFile(keyFile, []byte(fileValue+"-rotated\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := fetch(); got != "200 provider saw it" {
				t.Fatalf("after rotation: %q", got)
			}
			mu.Lock()
			last := seen[len(seen)-1]
			first := seen[len(seen)-2]
			mu.Unlock()
			if first != "Bearer "+fileValue+" | k="+envValue || last != "Bearer "+fileValue+"-rotated | k="+envValue {
				t.Fatalf("the provider saw %q then %q", first, last)
			}
			// A request's record is written when its connection ends, which
			// can be just after the client has its answer: asked at once,
			// the log once held only the first (a loaded machine).
			var out string
			brokered := 0
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				out = hsbx("netlog", "--task", task, "--json")
				var recs []egress.Record
				if err := json.Unmarshal([]byte(out), &recs); err != nil {
					t.Fatal(err)
				}
				brokered = 0
				for _, r := range recs {
					if strings.Join(r.Secrets, ",") == "PROVIDER_KEY,ENV_KEY" {
						brokered++
					}
				}
				if brokered >= 2 || time.Now().After(deadline) {
					break
				}
			}
			if brokered < 2 {
				t.Fatalf("netlog: %d requests with both values put in: %s", brokered, out)
			}
			outputs.WriteString(hsbx("netlog", "--task", task))
			logs, _ := filepath.Glob(filepath.Join(run, "hsbx", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				outputs.Write(b)
			}
			if len(logs) == 0 {
				t.Fatal("no holder log found")
			}
			for _, v := range []string{fileValue, envValue} {
				if strings.Contains(outputs.String(), v) {
					t.Fatalf("a value is in hsbx's output or the holder's log")
				}
			}
		})
	}
}
