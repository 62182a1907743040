package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// egressSize is the download the egress rows time: 100 MiB (a fiftieth
// under -small).
func egressSize() int { return sized(100 << 20) }

// egressServer serves /big (egressSize bytes) and /small on an address of
// this host a sandbox can reach (not loopback), timing each /big from its
// request to its last byte written.
type egressServer struct {
	addr string
	mu   sync.Mutex
	last time.Duration
}

func startEgressServer() *egressServer {
	host := hostIPv4()
	if host == "" {
		return nil
	}
	ln, err := net.Listen("tcp4", host+":0")
	if err != nil {
		return nil
	}
	s := &egressServer{addr: ln.Addr().String()}
	chunk := make([]byte, 1<<20)
	size := egressSize()
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/big" {
				_, _ = io.WriteString(w, "ok\n")
				return
			}
			start := time.Now()
			w.Header().Set("Content-Length", fmt.Sprint(size))
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := w.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
					return
				}
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			s.mu.Lock()
			s.last = time.Since(start)
			s.mu.Unlock()
		}))
	}()
	return s
}

func (s *egressServer) took() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// egressRows measure network = allow against network = on: a 100 MB
// download (as the server times it) through the relay against the same
// download straight out of a networked sandbox, and 20 sequential small
// requests (connection set-up) each way. None on an engine whose
// sandboxes cannot have a network here (rootless podman).
func egressRows(ctx context.Context, e *engine) []row {
	if strings.Contains(e.name, "rootless") {
		return nil
	}
	srv := startEgressServer()
	if srv == nil {
		return nil
	}
	on := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "egon", "--network", "on")...).Stdout))
	allow := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "egallow", "--network", "allow", "--egress-allow", srv.addr)...).Stdout))
	defer must(ctx, e.env, e.hsbx("down", "--task", "egon")...)
	defer must(ctx, e.env, e.hsbx("down", "--task", "egallow")...)
	direct := func(path string) string {
		host, port, _ := net.SplitHostPort(srv.addr)
		return fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc %s %s`, path, host, port)
	}
	relayed := func(path string) string {
		return fmt.Sprintf(`printf 'GET http://%s%s HTTP/1.0\r\n\r\n' | nc 127.0.0.1 3128`, srv.addr, path)
	}
	// The relay is up once a small request through it answers.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out := run(ctx, os.Environ(), e.engineExec(allow, "sh", "-c", relayed("/small"))...)
		if strings.HasSuffix(string(out.Stdout), "ok\n") {
			break
		}
		if time.Now().After(deadline) {
			fail("%s: the egress relay never answered: %q", e.name, out.Stdout)
		}
	}
	download := func(id, script string) time.Duration {
		res := must(ctx, os.Environ(), e.engineExec(id, "sh", "-c", script+" | wc -c")...)
		if n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); n < egressSize() {
			fail("%s: a download got %d bytes", e.name, n)
		}
		return srv.took()
	}
	n := max(*runs/4, 3)
	h, b := pair(ctx, e, n,
		func() time.Duration { return download(allow, relayed("/big")) },
		func() time.Duration { return download(on, direct("/big")) })
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f MB/s", float64(egressSize())/1e6/d.Seconds()) }
	r := float64(b) / float64(h) // throughput ratio: higher is better
	v := "met"
	if r < 0.8 {
		v = "**missed**"
	}
	dl := row{"egress: " + mb(egressSize()) + " download through the allow relay vs the same download with network = on (throughput, as the server times it)",
		rate(h), rate(b), fmt.Sprintf("%.3f", r), "≥ 0.80 (throughput)", v}
	loop := func(script string) string {
		return "i=0; while [ $i -lt 20 ]; do " + script + " >/dev/null; i=$((i+1)); done"
	}
	hs, bs := pair(ctx, e, n,
		func() time.Duration {
			return must(ctx, os.Environ(), e.engineExec(allow, "sh", "-c", loop(relayed("/small")))...).Elapsed
		},
		func() time.Duration {
			return must(ctx, os.Environ(), e.engineExec(on, "sh", "-c", loop(direct("/small")))...).Elapsed
		})
	setup := row{"egress: 20 sequential small requests (connection set-up) through the allow relay vs direct with network = on, one exec each",
		ms(hs), ms(bs), fmt.Sprintf("%.3f", float64(hs)/float64(bs)), "—", fmt.Sprintf("%.1f ms a connection through the relay, %.1f ms direct (one exec's cost in both)", float64(hs.Microseconds())/20e3, float64(bs.Microseconds())/20e3)}
	return []row{dl, setup}
}

// brokerRow measures a brokered secret's cost: 20 sequential HTTPS
// requests, each a new connection, from a Go client in the sandbox to a
// server a secret is for (the relay terminates the sandbox's TLS, puts
// the value in and makes its own TLS connection) against the same
// requests to a server no secret is for (plain CONNECT), in one
// sandbox, timed by the client. None where allow cannot run.
func brokerRow(ctx context.Context, e *engine) []row {
	if strings.Contains(e.name, "rootless") {
		return nil
	}
	host := hostIPv4()
	if host == "" {
		return nil
	}
	dir, err := os.MkdirTemp("", "hsbx-bench-broker-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	certPEM, cert := benchCert(host)
	caFile := filepath.Join(dir, "ca.pem")
	probe := filepath.Join(dir, "netprobe")
	if err := os.WriteFile(caFile, certPEM, 0o644); err != nil {
		fail("%v", err)
	}
	must(ctx, append(os.Environ(), "CGO_ENABLED=0"), "go", "build", "-o", probe, "./internal/enginetest/testdata/netprobe")
	serve := func() string {
		ln, err := tls.Listen("tcp4", host+":0", &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			fail("%v", err)
		}
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
		}()
		return ln.Addr().String()
	}
	brokered, passed := serve(), serve()
	env := append(slices.Clone(e.env), "SSL_CERT_FILE="+caFile, "BENCH_KEY=sk-bench", "TERMINAL_CONTAINER_PERSISTENT=false",
		"HSBX_NETWORK=allow", `HSBX_EGRESS_ALLOW=["`+passed+`"]`,
		`HSBX_SECRETS=[{"name":"KEY","hosts":["`+brokered+`"],"env":"BENCH_KEY"}]`)
	id := strings.TrimSpace(string(must(ctx, env, e.hsbx("up", "--task", "broker")...).Stdout))
	defer must(ctx, env, e.hsbx("down", "--task", "broker")...)
	must(ctx, env, e.hsbx("cp", "--task", "broker", probe, ":/workspace/netprobe")...)
	must(ctx, env, e.hsbx("cp", "--task", "broker", caFile, ":/workspace/ca.pem")...)
	timeIt := func(args ...string) time.Duration {
		res := run(ctx, os.Environ(), e.engineExec(id, append([]string{"/workspace/netprobe", "seq", "20"}, args...)...)...)
		ms, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		if err != nil {
			fail("%s: the broker's probe: %q %q", e.name, res.Stdout, res.Stderr)
		}
		return time.Duration(ms) * time.Millisecond
	}
	// The holder relays once a request goes through.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		res := run(ctx, os.Environ(), e.engineExec(id, "/workspace/netprobe", "seq", "1", "https://"+brokered+"/", "KEY")...)
		if res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			fail("%s: the broker never answered: %q", e.name, res.Stdout)
		}
	}
	h, b := pair(ctx, e, max(*runs/4, 3),
		func() time.Duration { return timeIt("https://"+brokered+"/", "KEY") },
		func() time.Duration { return timeIt("https://"+passed+"/", "KEY", "/workspace/ca.pem") })
	return []row{{"secrets: 20 sequential HTTPS requests (new connections) through the broker (TLS terminated, the value put in) vs plain CONNECT, timed in the sandbox",
		ms(h), ms(b), fmt.Sprintf("%.3f", float64(h)/float64(b)), "—", fmt.Sprintf("+%.1f ms a request", float64((h-b).Microseconds())/20e3)}}
}

// hostIPv4 is an address of this host a sandbox's relay reaches (not
// loopback).
func hostIPv4() string {
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// benchCert is a self-signed certificate for address host, and its PEM.
func benchCert(host string) ([]byte, tls.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fail("%v", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hsbx bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(host)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		fail("%v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
