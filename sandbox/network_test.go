package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// On a cluster that does not enforce NetworkPolicy (here: a namespace the
// project cluster's enforcer, scripts/netpolicy, leaves alone), network =
// off is refused after the wait, and neither the Pod nor its policy is
// left; on one that does (the test's own namespace), the Pod cannot reach
// its node's kubelet.
func TestNetworkOffUnenforcedIsRefused(t *testing.T) {
	tg, ok := enginetest.KubeIfConfigured(t)
	if !ok {
		t.Skip("no cluster")
	}
	ctx := context.Background()
	ns := tg.Kube.Namespace + "-open"
	kc := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tg.Bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kc("create", "namespace", ns)
	t.Cleanup(func() { _ = exec.Command(tg.Bin, "delete", "namespace", ns, "--wait=false").Run() })
	kc("label", "namespace", ns, "hsbx.dev/netpolicy=off")
	tg.Kube.Namespace = ns
	rt := tg.Open(t)
	m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: tg.StateDir, CacheDir: t.TempDir(), Environ: tg.Env,
		StopGrace: 5 * time.Second, Warn: func(string) {}, Agent: enginetest.AgentBinary(t)})
	spec := sandbox.DefaultSpec()
	spec.Image, spec.Persistent, spec.Network = tg.Image, false, false
	k := sandbox.Key{Profile: "hsbx-test", Task: "open"}
	_, err := m.Sandbox(k, spec).Ensure(ctx)
	var ue *sandbox.NetworkUnenforcedError
	if !errors.As(err, &ue) || !errors.Is(err, sandbox.ErrIsolation) || ue.Err != nil || len(ue.Reached) != 1 || !strings.HasSuffix(ue.Reached[0], ":10250") || ue.RemoveErr != nil {
		t.Fatalf("network = off where nothing enforces it: %v, want a NetworkUnenforcedError naming the kubelet", err)
	}
	t.Log(err)
	if out := kc("--namespace", ns, "get", "pods,networkpolicies", "-o", "name"); strings.TrimSpace(out) != "" {
		// The policy goes with its Pod, by the garbage collector: a
		// moment after.
		for deadline := time.Now().Add(30 * time.Second); strings.TrimSpace(out) != "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			out = kc("--namespace", ns, "get", "pods,networkpolicies", "-o", "name")
		}
		if strings.TrimSpace(out) != "" {
			t.Fatalf("a refused sandbox left %s", out)
		}
	}
}
