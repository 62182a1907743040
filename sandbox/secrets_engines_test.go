package sandbox_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// What brokered secrets promise, on every engine (those reached over ssh
// too: the broker is on this machine), under runc and gVisor: an unmodified client
// in the sandbox (it reads SSL_CERT_FILE) reaches a local HTTPS server
// standing in for a provider (its own test CA) with the placeholder, and
// the server sees the real value; a new value applies to the next
// request; the placeholder sent anywhere else is refused and logged; the
// value is nowhere in the sandbox (its processes' environments, its
// files), in the engine's record of it, or in the network log; the
// relay makes no certificate for a host no secret is for, and the CA's
// key never enters the sandbox.
func TestSecretsBrokered(t *testing.T) {
	eachWithSSH(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes have no network of their own (internal/egress's broker tests stand in)")
		}
		ctx := context.Background()
		srv := startEgressServers(t)
		var mu sync.Mutex
		var seen []string
		dest, caPEM := enginetest.TLSServer(t, srv.host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/echo" { // a provider's error that quotes what it was sent
				http.Error(w, "no such key: "+r.Header.Get("Authorization"), http.StatusUnauthorized)
				return
			}
			mu.Lock()
			seen = append(seen, r.Header.Get("Authorization"))
			mu.Unlock()
			fmt.Fprint(w, "provider saw it")
		}))
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)

		for _, name := range []string{"runc", "gvisor"} {
			t.Run(name, func(t *testing.T) {
				if name == "gvisor" && e.kube() && e.tg.GVisor == "" {
					t.Skip("the project's cluster has no gVisor RuntimeClass (docs/containment.md)")
				}
				if name == "gvisor" && e.tg.Remote && e.tg.GVisor == "" {
					t.Skip(noGVisorRemote)
				}
				mu.Lock()
				seen = nil
				mu.Unlock()
				value := "sk-real-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				var vmu sync.Mutex
				current := value
				spec := e.spec()
				if name == "gvisor" {
					spec = e.gvisor()
				}
				spec.Network, spec.Persistent = false, false
				spec.Egress = &sandbox.Egress{Allow: []string{srv.allowed, srv.tls}, RootCAs: roots, Secrets: []sandbox.Secret{{
					Name: "PROVIDER_KEY", Hosts: []string{dest},
					Value: func() (string, error) { vmu.Lock(); defer vmu.Unlock(); return current, nil },
				}}}
				sb := e.channelManager().Sandbox(e.key("secrets-"+name), spec)
				t.Cleanup(func() { _ = sb.Close(ctx) })
				res, err := sb.Ensure(ctx)
				if err != nil {
					t.Fatal(err)
				}
				sub := "netprobe-" + strconv.Itoa(os.Getpid())
				dir := "/workspace/" + sub
				if err := sb.Copies().InArchive(ctx, "/workspace", probeArchive(t, sub, srv.caPEM)); err != nil {
					t.Fatal(err)
				}
				run := func(argv ...string) (string, int) {
					t.Helper()
					var out bytes.Buffer
					code, err := sb.Exec(ctx, sandbox.Command{Argv: argv, Stdout: &out, Stderr: &out})
					if err != nil {
						t.Fatal(err)
					}
					return strings.TrimSpace(out.String()), code
				}
				placeholder, _ := run("sh", "-c", "printf %s \"$PROVIDER_KEY\"")
				if !strings.HasPrefix(placeholder, egress.PlaceholderPrefix) {
					t.Fatalf("the sandbox sees PROVIDER_KEY=%q, want a placeholder", placeholder)
				}
				if out, code := run(dir+"/netprobe", "secret", "https://"+dest+"/v1", "PROVIDER_KEY"); code != 0 || out != "200 provider saw it" {
					t.Fatalf("to the provider: exit %d %q", code, out)
				}
				vmu.Lock()
				current = value + "-rotated"
				vmu.Unlock()
				if out, code := run(dir+"/netprobe", "secret", "https://"+dest+"/v1", "PROVIDER_KEY"); code != 0 || out != "200 provider saw it" {
					t.Fatalf("after rotation: exit %d %q", code, out)
				}
				mu.Lock()
				got := slices0(seen)
				mu.Unlock()
				if len(got) != 2 || got[0] != "Bearer "+value || got[1] != "Bearer "+value+"-rotated" {
					t.Fatalf("the provider saw %q, want the value, then the new one", got)
				}

				// What the provider repeats comes back with the placeholder
				// in the value's place; a request naming another host on
				// the provider's connection is refused before it is sent.
				if out, _ := run(dir+"/netprobe", "secret", "https://"+dest+"/echo", "PROVIDER_KEY"); out != "401 no such key: Bearer "+placeholder {
					t.Fatalf("an echo of the value: %q, want the placeholder in its place", out)
				}
				if out, _ := run(dir+"/netprobe", "secret", "https://"+dest+"/v1", "PROVIDER_KEY", "attacker.example.net"); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "names host") {
					t.Fatalf("another Host on the provider's connection: %q, want a 403", out)
				}
				mu.Lock()
				if len(seen) != 2 {
					t.Errorf("the provider got %d requests with the value, want 2", len(seen))
				}
				mu.Unlock()

				// Anywhere else: refused, logged.
				if out, _ := run(dir+"/netprobe", "secret", "http://"+srv.allowed+"/x", "PROVIDER_KEY"); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "exfiltration") {
					t.Fatalf("the placeholder to another server: %q, want a 403", out)
				}
				// No certificate of the sandbox's CA for a host no secret is for:
				// the other HTTPS server's own certificate reaches the client,
				// which does not trust it.
				if out, code := run(dir+"/netprobe", "get", "https://"+srv.tls+"/"); code == 0 || !strings.Contains(out, "certificate") {
					t.Fatalf("HTTPS to a host no secret is for, without its CA: exit %d %q, want a certificate error", code, out)
				}
				// Where the value is not: the sandbox's processes and files, the
				// CA's key, the engine's record, the network log.
				hunt := `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c "$0"; grep -rls "$0" /etc /root /workspace /tmp /home 2>/dev/null; grep -rls "PRIVATE KEY" /etc /root /workspace /tmp 2>/dev/null; true`
				if out, _ := run("sh", "-c", hunt, value); out != "0" {
					t.Fatalf("inside the sandbox: %q, want no value and no key", out)
				}
				if raw := inspectRaw(t, e, res.ID); strings.Contains(raw, value) || !strings.Contains(raw, placeholder) {
					t.Fatalf("the engine's record holds the value (or lacks the placeholder)")
				}
				var injected, refused, rewritten int
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					recs, err := egress.ReadLog(sandbox.EgressLogFile(e.tg.StateDir, sb.Key()))
					if err != nil {
						t.Fatal(err)
					}
					injected, refused, rewritten = 0, 0, 0
					for _, r := range recs {
						if r.Rewritten > 0 {
							rewritten++
						}
						if len(r.Secrets) == 1 && r.Secrets[0] == "PROVIDER_KEY" && r.Allowed {
							injected++
						}
						if !r.Allowed && strings.Contains(r.Reason, "exfiltration") {
							refused++
						}
					}
					if injected == 3 && refused == 1 && rewritten == 1 || time.Now().After(deadline) {
						break
					}
				}
				if injected != 3 || refused != 1 || rewritten != 1 {
					t.Fatalf("network log: %d requests with the value put in (want 3), %d exfiltrations (want 1), %d responses rewritten (want 1)", injected, refused, rewritten)
				}
				if b, _ := os.ReadFile(sandbox.EgressLogFile(e.tg.StateDir, sb.Key())); bytes.Contains(b, []byte(value)) {
					t.Fatal("the network log holds the value")
				}
				// The sandbox's CA key goes with the sandbox.
				cas := func() []string {
					m, _ := filepath.Glob(filepath.Join(filepath.Dir(sandbox.EgressLogFile(e.tg.StateDir, sb.Key())), "egress-ca-*"))
					return m
				}
				if len(cas()) != 2 {
					t.Fatalf("the sandbox's CA files: %q, want its certificate and key", cas())
				}
				if _, err := sb.Down(ctx); err != nil {
					t.Fatal(err)
				}
				if left := cas(); len(left) != 0 {
					t.Fatalf("the sandbox was removed and its CA files stay: %q", left)
				}
			})
		}
	})
}

func slices0(s []string) []string { return append([]string(nil), s...) }

// inspectRaw is the engine's own record of the sandbox, as its CLI
// prints it.
func inspectRaw(t *testing.T, e *env, id string) string {
	t.Helper()
	argv := []string{e.tg.Bin, "inspect", id}
	if e.tg.Dialect() == runtime.Kubectl {
		_, name, _ := strings.Cut(id, "/")
		argv = []string{e.tg.Bin, "--namespace", e.tg.Kube.Namespace, "get", "pod", name, "-o", "json"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.tg.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return string(out)
}
