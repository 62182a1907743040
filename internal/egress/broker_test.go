package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// brokerRig is a proxy with two secrets for one HTTPS server (the
// "provider"), another HTTPS server and a plain HTTP server no secret is
// for, and the records it logs.
type brokerRig struct {
	t          *testing.T
	proxy      string // the proxy's URL
	provider   *httptest.Server
	otherTLS   *httptest.Server
	plain      *httptest.Server
	ca         *CA
	key, token Secret
	value      atomic.Value
	seen       chan http.Header // what the provider saw
	hosts      chan string      // the Host it was sent
	otherHits  atomic.Int64
	mu         sync.Mutex
	recs       []Record
	px         *Proxy
}

func newBrokerRig(t *testing.T) *brokerRig {
	g := &brokerRig{t: t, seen: make(chan http.Header, 16), hosts: make(chan string, 16)}
	g.value.Store("real-value-1")
	g.provider = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/echo") {
			echo(w, r)
			return
		}
		select {
		case g.hosts <- r.Host:
		default:
		}
		h := r.Header.Clone()
		h.Set("X-Query", r.URL.RawQuery)
		body, _ := io.ReadAll(r.Body)
		h.Set("X-Body", string(body))
		g.seen <- h
		fmt.Fprint(w, "provider ok")
	}))
	g.otherTLS = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.otherHits.Add(1)
		fmt.Fprint(w, "other ok")
	}))
	g.plain = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.otherHits.Add(1)
		fmt.Fprint(w, "plain ok")
	}))
	t.Cleanup(func() { g.provider.Close(); g.otherTLS.Close(); g.plain.Close() })
	pu, _ := url.Parse(g.provider.URL)
	g.key = Secret{Name: "API_KEY", Hosts: []string{pu.Host}, In: []string{"query", "path"}, Placeholder: NewPlaceholder()}
	g.token = Secret{Name: "TOKEN", Hosts: []string{pu.Host}, Header: "X-Token: tok {}", Placeholder: NewPlaceholder()}
	var err error
	if g.ca, err = NewCA("test", []string{pu.Host}); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(g.provider.Certificate())
	roots.AddCert(g.otherTLS.Certificate())
	px := &Proxy{Policy: &Policy{Rules: mustRules(t, "127.0.0.1")}, RootCAs: roots,
		Broker: &Broker{Secrets: []Secret{g.key, g.token}, CA: g.ca, Values: func(name string) (string, error) {
			if name == "TOKEN" {
				return "token-value", nil
			}
			return g.value.Load().(string), nil
		}},
		Log: func(r Record) { g.mu.Lock(); g.recs = append(g.recs, r); g.mu.Unlock() }}
	g.proxy = "http://" + serveProxy(t, px)
	g.px = px
	return g
}

// serveProxy serves px on a loopback port until the test ends and
// returns its address.
func serveProxy(t *testing.T, px *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go px.Serve(context.Background(), c.(*net.TCPConn))
		}
	}()
	return ln.Addr().String()
}

// sink is a server that takes one connection and sends what it read, to
// its end (10 s at most), on the channel it returns with its address.
func sink(t *testing.T) (string, <-chan string) {
	t.Helper()
	got := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	return ln.Addr().String(), got
}

// client is an unmodified client through the proxy, trusting the
// sandbox's CA and the other server's certificate (as a system bundle
// would a real one's).
func (g *brokerRig) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(g.ca.CertPEM())
	pool.AddCert(g.otherTLS.Certificate())
	pu, _ := url.Parse(g.proxy)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func (g *brokerRig) do(method, u string, header http.Header, body string) (int, string) {
	g.t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := g.client().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitRecords waits (10 s at most) until n records were logged: the
// relay logs a request once the sandbox has its answer.
func (g *brokerRig) waitRecords(n int) []Record {
	return g.waitFor(func(recs []Record) bool { return len(recs) >= n })
}

// waitFor waits (10 s at most) until ok says the records are all there.
func (g *brokerRig) waitFor(ok func([]Record) bool) []Record {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(g.records()) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return g.records()
}

func (g *brokerRig) records() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Record(nil), g.recs...)
}

func TestBrokerPutsTheValueInAndOnlyThere(t *testing.T) {
	g := newBrokerRig(t)
	auth := http.Header{"Authorization": {"Bearer " + g.key.Placeholder}}

	// The provider sees the value, never the placeholder; the header
	// secret is set though the client sent nothing for it.
	code, body := g.do("POST", g.provider.URL+"/v1?key="+g.key.Placeholder, auth, "a body with "+g.key.Placeholder)
	if code != 200 || body != "provider ok" {
		t.Fatalf("to the provider: %d %q", code, body)
	}
	h := <-g.seen
	if h.Get("Authorization") != "Bearer real-value-1" || h.Get("X-Query") != "key=real-value-1" || h.Get("X-Token") != "tok token-value" {
		t.Errorf("the provider saw %v", h)
	}
	if !strings.Contains(h.Get("X-Body"), g.key.Placeholder) {
		t.Errorf("a body is not rewritten (the value goes where headers say): %q", h.Get("X-Body"))
	}

	// Rotation: the next request has the new value.
	g.value.Store("real-value-2")
	if code, _ := g.do("GET", g.provider.URL+"/", auth, ""); code != 200 {
		t.Fatalf("after rotation: %d", code)
	}
	if h := <-g.seen; h.Get("Authorization") != "Bearer real-value-2" {
		t.Errorf("after rotation the provider saw %q", h.Get("Authorization"))
	}

	// Anywhere else: refused, logged, never forwarded.
	for _, tc := range []struct{ name, method, url, body string }{
		{"plain HTTP, a header", "GET", g.plain.URL + "/", ""},
		{"plain HTTP, the body", "POST", g.plain.URL + "/", "x=" + g.key.Placeholder},
		{"plain HTTP, the URL", "GET", g.plain.URL + "/?k=" + g.key.Placeholder, ""},
	} {
		hdr := http.Header{}
		if tc.name == "plain HTTP, a header" {
			hdr = auth
		}
		code, body := g.do(tc.method, tc.url, hdr, tc.body)
		if code != 403 || !strings.Contains(body, "placeholder of secret API_KEY") || !strings.Contains(body, "exfiltration") {
			t.Errorf("%s: %d %q, want a 403 naming the exfiltration", tc.name, code, body)
		}
	}
	if n := g.otherHits.Load(); n != 0 {
		t.Errorf("the other servers were reached %d time(s) with a placeholder", n)
	}
	// Plain HTTP without a placeholder goes; HTTPS elsewhere is passed
	// through untouched (the sandbox sees the server's own certificate).
	if code, body := g.do("GET", g.plain.URL+"/", nil, ""); code != 200 || body != "plain ok" {
		t.Errorf("plain HTTP without a placeholder: %d %q", code, body)
	}
	if code, body := g.do("GET", g.otherTLS.URL+"/", nil, ""); code != 200 || body != "other ok" {
		t.Errorf("HTTPS to a host no secret is for: %d %q", code, body)
	}
	// The provider over plain HTTP: a value never goes in clear text.
	pu, _ := url.Parse(g.provider.URL)
	if code, body := g.do("GET", "http://"+pu.Host+"/", auth, ""); code != 403 || !strings.Contains(body, "HTTPS only") {
		t.Errorf("a secret's host over plain HTTP: %d %q", code, body)
	}

	// A record is written after its answer (a passed-through tunnel's
	// when it ends): wait for those counted, however late under load.
	var injected, exfil int
	count := func(recs []Record) bool {
		injected, exfil = 0, 0
		for _, r := range recs {
			if len(r.Secrets) > 0 && r.Allowed {
				injected++
			}
			if !r.Allowed && strings.Contains(r.Reason, "exfiltration") {
				exfil++
			}
		}
		return injected >= 2 && exfil >= 3
	}
	for _, r := range g.waitFor(count) {
		for _, v := range []string{"real-value-1", "real-value-2", "token-value"} {
			if strings.Contains(fmt.Sprintf("%+v", r), v) {
				t.Errorf("a record holds a value: %+v", r)
			}
		}
	}
	if injected != 2 || exfil != 3 {
		t.Errorf("records: %d with values put in (want 2), %d exfiltrations (want 3): %+v", injected, exfil, g.records())
	}
}

// A raw tunnel to a host no secret is for is watched too: a placeholder
// split across writes never arrives whole, and the tunnel is cut.
func TestBrokerCutsATunnelCarryingAPlaceholder(t *testing.T) {
	g := newBrokerRig(t)
	addr, got := sink(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", addr)
	br := bufio.NewReader(c)
	if line, _ := br.ReadString('\n'); !strings.Contains(line, "200") {
		t.Fatalf("CONNECT: %q", line)
	}
	_, _ = br.ReadString('\n')
	// The placeholder split across two writes.
	half := len(g.key.Placeholder) / 2
	fmt.Fprintf(c, "hello %s", g.key.Placeholder[:half])
	time.Sleep(50 * time.Millisecond)
	fmt.Fprintf(c, "%s and more", g.key.Placeholder[half:])
	select {
	case s := <-got:
		// What the first write carried went; the rest never did.
		if strings.Contains(s, g.key.Placeholder) || strings.Contains(s, g.key.Placeholder[half:]) || strings.Contains(s, "and more") {
			t.Errorf("the destination got %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tunnel was not cut")
	}
}

// The sandbox's CA signs for its secrets' hosts only: a certificate it
// made for any other host is refused by a client that trusts it.
func TestCANameConstraints(t *testing.T) {
	ca, err := NewCA("t", []string{"api.example.com", "*.models.example", "192.0.2.9:443"})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for host, ok := range map[string]bool{"api.example.com": true, "eu.models.example": true, "192.0.2.9": true,
		"evil.example.com": false, "example.com": false, "models.example": false, "192.0.2.10": false, "localhost": false} {
		leaf, err := ca.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		_, verr := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: strings.Trim(host, "[]")})
		if (verr == nil) != ok {
			t.Errorf("%s: verify %v, want ok=%v", host, verr, ok)
		}
	}
	key, _ := ca.KeyPEM()
	back, err := LoadCA(ca.CertPEM(), key)
	if err != nil || !back.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA: %v", err)
	}
	other, _ := NewCA("o", []string{"x.example"})
	okey, _ := other.KeyPEM()
	if _, err := LoadCA(ca.CertPEM(), okey); err == nil {
		t.Error("a key of another CA was taken")
	}
}

// A destination's name carrying a placeholder is refused before any
// lookup (a name server would see it).
func TestBrokerRefusesAPlaceholderInAName(t *testing.T) {
	ph := NewPlaceholder()
	var looked atomic.Bool
	var rec atomic.Value
	px := &Proxy{Policy: &Policy{Rules: mustRules(t, "*.example.com"), Resolve: func(context.Context, string) ([]netip.Addr, error) {
		looked.Store(true)
		return nil, errors.New("no")
	}}, Broker: &Broker{Secrets: []Secret{{Name: "K", Hosts: []string{"api.example.com"}, Placeholder: ph}}}, Log: func(r Record) { rec.Store(r) }}
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { px.Serve(context.Background(), pipeConn{a}); close(done) }()
	fmt.Fprintf(b, "CONNECT %s.example.com:443 HTTP/1.1\r\n\r\n", ph)
	line, _ := bufio.NewReader(b).ReadString('\n')
	b.Close()
	<-done
	r, _ := rec.Load().(Record)
	if !strings.Contains(line, "403") || looked.Load() || r.Allowed || !strings.Contains(r.Reason, "exfiltration") {
		t.Fatalf("CONNECT to a name with a placeholder: %q, looked up %v, logged %+v", line, looked.Load(), r)
	}
}

// pipeConn is one end of a net.Pipe as a relayed Conn.
type pipeConn struct{ net.Conn }

func (p pipeConn) CloseWrite() error { return nil }

// Every record passes one redaction: a value in any word is replaced.
func TestBrokerRedactsRecords(t *testing.T) {
	b := &Broker{Secrets: []Secret{{Name: "K", Placeholder: NewPlaceholder()}}, Values: func(string) (string, error) { return "sk-secret-value", nil }}
	var got Record
	p := &Proxy{Broker: b, Log: func(r Record) { got = r }}
	p.log(Record{Error: "upstream said: bad key sk-secret-value", Reason: "x sk-secret-value y"}, time.Now())
	if strings.Contains(fmt.Sprintf("%+v", got), "sk-secret-value") || !strings.Contains(got.Error, "[secret K]") {
		t.Fatalf("%+v", got)
	}
}

func TestParseSecrets(t *testing.T) {
	good := []Secret{{Name: "A", Hosts: []string{"api.example.com"}, Placeholder: NewPlaceholder()},
		{Name: "B_2", Hosts: []string{"*.x.example:443", "192.0.2.1"}, Header: "Authorization: Bearer {}", Placeholder: NewPlaceholder()}}
	if got, err := ParseSecrets(EncodeSecrets(good)); err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []Secret{
		{Name: "1A", Hosts: []string{"a.example"}},
		{Name: "A B", Hosts: []string{"a.example"}},
		{Name: "A", Hosts: nil},
		{Name: "A", Hosts: []string{"10.0.0.0/8"}},
		{Name: "A", Hosts: []string{"a..b"}},
		{Name: "A", Hosts: []string{"a.example"}, Header: "Authorization Bearer {}"},
		{Name: "A", Hosts: []string{"a.example"}, Header: "Authorization: Bearer"},
		{Name: "A", Hosts: []string{"a.example"}, Header: "X: {}\r\nEvil: {}"},
	} {
		if err := CheckSecret(bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := ParseSecrets(`[{"name":"A","hosts":["a.example"],"placeholder":"not-one"}]`); err == nil {
		t.Error("a bad placeholder was taken")
	}
	dup := []Secret{good[0], good[0]}
	if _, err := ParseSecrets(EncodeSecrets(dup)); err == nil {
		t.Error("a repeated secret was taken")
	}
}

func FuzzParseSecrets(f *testing.F) {
	f.Add(EncodeSecrets([]Secret{{Name: "A", Hosts: []string{"api.example.com"}, Placeholder: NewPlaceholder()}}))
	f.Add(`[{"name":"A","hosts":["*.x:1"],"header":"X: {}","placeholder":"hsbx-secret-00000000000000000000000000000000"}]`)
	f.Fuzz(func(t *testing.T, v string) {
		ss, err := ParseSecrets(v)
		if err != nil {
			return
		}
		for _, s := range ss {
			if CheckSecret(s) != nil || !placeholderRE.MatchString(s.Placeholder) {
				t.Fatalf("taken: %+v", s)
			}
		}
	})
}

// The watch holds nothing back: a write that ends as a placeholder would
// begin ("h", "hsbx-sec") still reaches a peer that waits for it before
// it answers (a TLS handshake would stall otherwise).
func TestBrokerTunnelDoesNotStall(t *testing.T) {
	g := newBrokerRig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // an echo
	}()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
	br := bufio.NewReader(c)
	_, _ = br.ReadString('\n')
	_, _ = br.ReadString('\n')
	for _, msg := range []string{"ping h", "again hsbx-sec"} {
		_, _ = io.WriteString(c, msg)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(br, b); err != nil || string(b) != msg {
			t.Fatalf("%q: echoed %q, %v", msg, b, err)
		}
	}
}
