package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// hostAddress is enginetest.HostAddress.
func hostAddress(t *testing.T) string { return enginetest.HostAddress(t) }

// What the network setting promises, on the real engines, under runc
// and under gVisor: with network = true a sandbox reaches a service of
// the host (so the engine's network really is on: an `off` that reaches
// nothing would prove nothing otherwise), and with network = false the
// same request from a sandbox gets nowhere and the service sees nothing.
func TestNetworkOnReachesOffDoesNot(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes have no network")
		}
		ctx := context.Background()
		var hits atomic.Int64
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			_, _ = io.WriteString(w, "reached\n")
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		host, port := hostAddress(t), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		url := "http://" + host + ":" + port + "/"
		// (busybox's nc: the static busybox's wget crashes here.)
		fetch := func(sb *sandbox.Sandbox) (string, int) {
			t.Helper()
			var out bytes.Buffer
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 "$0" "$1"`, host, port},
				Stdout: &out, Stderr: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			if _, body, ok := strings.Cut(out.String(), "\r\n\r\n"); ok {
				return body, code
			}
			return out.String(), code
		}
		for _, name := range []string{"runc", "gvisor"} {
			under := ""
			if name == "gvisor" {
				under = e.tg.GVisor
			}
			t.Run(name, func(t *testing.T) {
				if name == "gvisor" && e.kube() {
					t.Skip("the project's cluster has no gVisor RuntimeClass (docs/containment.md)")
				}
				if name == "gvisor" && under == "" {
					t.Skip("no gVisor on this engine")
				}
				spec := e.spec()
				spec.OCIRuntime = under
				if e.tg.Rootless {
					t.Log("rootless podman here cannot make a sandbox with a network (no /dev/net/tun): only network = false is tried")
				} else {
					on := spec
					on.Network, on.Explicit = true, map[string]bool{"network": true}
					if out, code := fetch(e.manager().Sandbox(e.key("net-on-"+name), on)); code != 0 || out != "reached\n" {
						t.Fatalf("network = true: %s gave %q (exit %d): the engine's network is not on", url, out, code)
					}
				}
				if e.kube() {
					return // network = false is refused on Kubernetes (TestNetworkOff)
				}
				before := hits.Load()
				off := spec
				off.Network = false
				if out, code := fetch(e.manager().Sandbox(e.key("net-off-"+name), off)); code == 0 || out != "" {
					t.Fatalf("network = false: %s gave %q (exit %d)", url, out, code)
				}
				if n := hits.Load() - before; n != 0 {
					t.Fatalf("network = false: the host's service saw %d request(s)", n)
				}
			})
		}
	})
}
