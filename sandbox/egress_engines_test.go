package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// egressServers are the host's services the egress tests aim at: an
// HTTP server and an HTTPS one the allow-list names, an HTTP server and a
// UDP responder it does not, each counting what reached it.
type egressServers struct {
	host                 string
	allowed, tls, denied string // host:port
	udp                  string
	caPEM                []byte
	deniedHits, udpHits  atomic.Int64
}

func startEgressServers(t *testing.T) *egressServers {
	t.Helper()
	s := &egressServers{host: hostAddress(t)}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp4", s.host+":0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	serve := func(ln net.Listener, h http.HandlerFunc) string {
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	s.allowed = serve(listen(), func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached "+r.URL.Path) })
	s.denied = serve(listen(), func(w http.ResponseWriter, r *http.Request) { s.deniedHits.Add(1); fmt.Fprint(w, "leaked") })
	cert, certPEM := selfSigned(t, s.host)
	tln := tls.NewListener(listen(), &tls.Config{Certificates: []tls.Certificate{cert}})
	s.tls = serve(tln, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") })
	s.caPEM = certPEM
	pc, err := net.ListenPacket("udp4", s.host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			s.udpHits.Add(1)
			_, _ = pc.WriteTo(b[:n], from)
		}
	}()
	s.udp = pc.LocalAddr().String()
	return s
}

// selfSigned is enginetest.SelfSigned.
func selfSigned(t *testing.T, host string) (tls.Certificate, []byte) {
	return enginetest.SelfSigned(t, host)
}

// probeArchive is a tar of dir/netprobe and dir/ca.pem.
func probeArchive(t *testing.T, dir string, ca []byte) io.Reader {
	t.Helper()
	bin, err := os.ReadFile(enginetest.NetProbeBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{dir + "/netprobe", 0o755, bin}, {dir + "/ca.pem", 0o644, ca}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(f.data)
	}
	_ = tw.Close()
	return &b
}

// What network = allow promises, on every engine (those reached over ssh
// too: the relay is on this machine) and under gVisor: an
// unmodified client reaches what the list names over HTTP and HTTPS
// (CONNECT), is refused the rest with the reason, and a process that
// steps around the proxy (a raw connect, UDP, DNS) gets nothing; 64
// connections at once all go through; another sandbox's relay applies
// its own list; every decision is in the network log.
func TestEgressAllowIsEnforced(t *testing.T) {
	eachWithSSH(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if e.tg.Fake {
			// The fakes' sandboxes are host processes on the host's
			// network, with no root of their own to run the probe from:
			// the relay and the policy are tried against a real agent in
			// internal/channel (TestRelay*) and internal/egress.
			t.Skip("the fakes have no network of their own")
		}
		srv := startEgressServers(t)
		for _, name := range []string{"runc", "gvisor"} {
			t.Run(name, func(t *testing.T) {
				if name == "gvisor" && e.kube() && e.tg.GVisor == "" {
					t.Skip("the project's cluster has no gVisor RuntimeClass (docs/containment.md)")
				}
				if name == "gvisor" && e.tg.Remote && e.tg.GVisor == "" {
					t.Skip(noGVisorRemote)
				}
				spec := e.spec()
				if name == "gvisor" {
					spec = e.gvisor()
				}
				spec.Network, spec.Persistent = false, false // /workspace in tmpfs: the probe runs from there
				spec.Egress = &sandbox.Egress{Allow: []string{srv.allowed, srv.tls, "localhost"}}
				sb := e.channelManager().Sandbox(e.key("egress-"+name), spec)
				t.Cleanup(func() { _ = sb.Close(ctx) })
				if _, err := sb.Ensure(ctx); err != nil {
					t.Fatal(err)
				}
				sub := "netprobe-" + strconv.Itoa(os.Getpid())
				dir := "/workspace/" + sub
				if err := sb.Copies().InArchive(ctx, "/workspace", probeArchive(t, sub, srv.caPEM)); err != nil {
					t.Fatal(err)
				}
				run := func(args ...string) (string, int) {
					t.Helper()
					var out bytes.Buffer
					code, err := sb.Exec(ctx, sandbox.Command{Argv: append([]string{dir + "/netprobe"}, args...), Stdout: &out, Stderr: &out})
					if err != nil {
						t.Fatal(err)
					}
					return strings.TrimSpace(out.String()), code
				}
				expect := func(want string, wantCode int, args ...string) string {
					t.Helper()
					out, code := run(args...)
					if code != wantCode || !strings.Contains(out, want) {
						t.Fatalf("netprobe %s: exit %d %q, want exit %d and %q", strings.Join(args, " "), code, out, wantCode, want)
					}
					return out
				}
				expect("200 reached /x", 0, "get", "http://"+srv.allowed+"/x")
				expect("200 secure", 0, "get", "https://"+srv.tls+"/", dir+"/ca.pem")
				refusal := expect("403 hsbx egress: refused GET "+srv.denied, 0, "get", "http://"+srv.denied+"/")
				t.Logf("refused: %s", refusal)
				expect("Forbidden", 1, "get", "https://"+srv.denied+"/", dir+"/ca.pem")
				expect("64/64", 0, "many", "64", "http://"+srv.allowed+"/")
				expect("no:", 1, "dial", srv.denied)
				expect("no:", 1, "dial", srv.allowed) // allowed through the relay, never directly
				expect("no:", 1, "udp", srv.udp)
				expect("no:", 1, "dns", "localhost.example.com")
				if n := srv.udpHits.Load(); n != 0 {
					t.Fatalf("the UDP responder heard %d datagram(s)", n)
				}
				if n := srv.deniedHits.Load(); n != 0 {
					t.Fatalf("the refused server was reached %d time(s)", n)
				}
				// A name the list names that resolves to loopback on the host
				// ("localhost." with its dot: Go's client never proxies
				// "localhost" itself).
				expect("resolves to 127.0.0.1 (loopback)", 0, "get", "http://localhost.:"+strings.Split(srv.allowed, ":")[1]+"/")

				// A connection is logged when it ends, which may be a moment
				// after its client has the answer.
				var allowed, refused, total int
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					recs, err := egress.ReadLog(sandbox.EgressLogFile(e.tg.StateDir, sb.Key()))
					if err != nil {
						t.Fatal(err)
					}
					allowed, refused, total = 0, 0, len(recs)
					for _, r := range recs {
						switch {
						case r.Allowed && r.Rule == srv.allowed && r.BytesIn > 0 && r.BytesOut > 0:
							allowed++
						case !r.Allowed && r.Host+":"+strconv.Itoa(r.Port) == srv.denied && strings.Contains(r.Reason, "no entry"):
							refused++
						}
					}
					if allowed >= 65 && refused == 2 || time.Now().After(deadline) {
						break
					}
				}
				if allowed < 65 || refused != 2 {
					t.Fatalf("network log: %d allowed to %s (want >= 65), %d refused (want 2), of %d records", allowed, srv.allowed, refused, total)
				}

				// Another sandbox's relay applies its own (empty) list.
				other := spec
				other.Egress = &sandbox.Egress{Addr: spec.Egress.Addr}
				sb2 := e.channelManager().Sandbox(e.key("egress-none-"+name), other)
				t.Cleanup(func() { _ = sb2.Close(ctx) })
				if _, err := sb2.Ensure(ctx); err != nil {
					t.Fatal(err)
				}
				if err := sb2.Copies().InArchive(ctx, "/workspace", probeArchive(t, sub, srv.caPEM)); err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				code, err := sb2.Exec(ctx, sandbox.Command{Argv: []string{dir + "/netprobe", "get", "http://" + srv.allowed + "/"}, Stdout: &out, Stderr: &out})
				if err != nil || code != 0 || !strings.Contains(out.String(), "403") {
					t.Fatalf("a sandbox with an empty list: exit %d %q %v, want a 403", code, out.String(), err)
				}
			})
		}
	})
}
