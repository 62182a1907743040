package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo is a provider's endpoints that repeat what they were sent, the way
// real ones do: a 404 page quoting the path and query, an error quoting
// a header, TRACE, a redirect carrying the query, and the same in a
// gzipped body, a streamed one (the value split across flushes) and one
// over 1 MiB.
func echo(w http.ResponseWriter, r *http.Request) {
	all := r.URL.RawQuery + " " + r.URL.Path + " " + r.Header.Get("Authorization") + " " + r.Header.Get("X-Token") + " " + r.Header.Get("Cookie")
	switch r.URL.Path {
	case "/echo/404":
		http.Error(w, "no such page: "+r.URL.Path+"?"+r.URL.RawQuery, http.StatusNotFound)
	case "/echo/header":
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("X-Token-Was", r.Header.Get("X-Token"))
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"model %s does not exist"}`, r.Header.Get("Authorization"))
	case "/echo/redirect":
		http.Redirect(w, r, "https://elsewhere.example/?auth="+url.QueryEscape(r.Header.Get("Authorization")), http.StatusFound)
	case "/echo/gzip":
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		fmt.Fprint(zw, all)
		zw.Close()
	case "/echo/stream":
		v := r.Header.Get("X-Token")
		f := w.(http.Flusher)
		for i := 1; i < len(v); i += 3 {
			fmt.Fprint(w, v[:i])
			f.Flush()
			fmt.Fprint(w, v[i:]+"\n")
			f.Flush()
		}
	case "/echo/big":
		w.Header().Set("Content-Length", fmt.Sprint(2<<20+len(all)))
		io.Copy(w, io.LimitReader(zeros{}, 2<<20-7))
		fmt.Fprint(w, all[:7]+strings.Repeat("z", 7)+all[7:])
	default:
		if r.Method == "TRACE" {
			w.Header().Set("Content-Type", "message/http")
			r.Write(w)
			return
		}
		fmt.Fprint(w, all)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// Whatever the provider repeats, the sandbox gets the placeholder back,
// never the value: in the status, the headers and the body, streamed,
// gzipped or over 1 MiB; the log says the response was rewritten.
func TestBrokerNeverHandsTheValueBack(t *testing.T) {
	g := newBrokerRig(t)
	ph := g.key.Placeholder
	auth := http.Header{"Authorization": {"Bearer " + ph}}
	c := g.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, tc := range []struct{ method, path string }{
		{"GET", "/echo/404/" + ph + "?q=" + ph},
		{"GET", "/echo/header"},
		{"GET", "/echo/redirect"},
		{"TRACE", "/echo/trace?q=" + ph},
		{"GET", "/echo/gzip?q=" + ph},
		{"GET", "/echo/stream"},
		{"GET", "/echo/big?q=" + ph},
	} {
		req, _ := http.NewRequest(tc.method, g.provider.URL+tc.path, nil)
		req.Header = auth.Clone()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: reading: %v", tc.method, tc.path, err)
		}
		var head bytes.Buffer
		resp.Header.Write(&head)
		got := resp.Status + "\n" + head.String() + string(body)
		for _, v := range []string{"real-value-1", "token-value"} {
			if strings.Contains(got, v) {
				t.Errorf("%s %s: the sandbox got the value %q back:\n%.600s", tc.method, tc.path, v, got)
			}
		}
		if !strings.Contains(got, ph) && !strings.Contains(got, url.QueryEscape("Bearer "+ph)) && !strings.Contains(got, g.token.Placeholder) {
			t.Errorf("%s %s: the placeholder is not where the value was:\n%.600s", tc.method, tc.path, got)
		}
	}
	rewritten := 0
	for _, r := range g.waitRecords(7) {
		if r.Rewritten > 0 {
			rewritten++
		}
	}
	if rewritten != 7 {
		t.Errorf("%d of 7 records say the response was rewritten: %+v", rewritten, g.records())
	}
}

// The value goes where a credential goes: a placeholder in the path,
// query or a cookie is refused unless the secret's `in` names the place.
func TestBrokerPutsTheValueOnlyInHeaders(t *testing.T) {
	g := newBrokerRig(t)
	ph := g.token.Placeholder // a secret without `in`
	for name, tc := range map[string]struct {
		path string
		hdr  http.Header
	}{
		"query":  {"/?k=" + ph, nil},
		"path":   {"/" + ph, nil},
		"cookie": {"/", http.Header{"Cookie": {"s=" + ph}}},
	} {
		code, body := g.do("GET", g.provider.URL+tc.path, tc.hdr, "")
		if code != 403 || !strings.Contains(body, "in the request's "+name) {
			t.Errorf("%s: %d %q, want a 403 naming the place", name, code, body)
		}
	}
	if code, _ := g.do("GET", g.provider.URL+"/", http.Header{"X-Other": {ph}}, ""); code != 200 {
		t.Errorf("the placeholder in a header: %d", code)
	}
}

// Every request on a brokered connection must name the connection's
// host: another Host, an absolute target elsewhere, and the second of two
// pipelined requests are refused before anything reaches the server.
func TestBrokerRefusesAnotherHost(t *testing.T) {
	g := newBrokerRig(t)
	pu, _ := url.Parse(g.provider.URL)
	ph := g.key.Placeholder
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(g.ca.CertPEM())
	raw := func(reqs string) string {
		c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", pu.Host, pu.Host)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{RootCAs: pool, ServerName: pu.Hostname()})
		if _, err := io.WriteString(tc, reqs); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tc)
		return string(b)
	}
	good := "GET / HTTP/1.1\r\nHost: " + pu.Host + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n"
	for name, reqs := range map[string]string{
		"another Host":          "GET / HTTP/1.1\r\nHost: attacker.example.net\r\nAuthorization: Bearer " + ph + "\r\n\r\n",
		"another port":          "GET / HTTP/1.1\r\nHost: " + pu.Hostname() + ":1\r\n\r\n",
		"an absolute target":    "GET https://attacker.example.net/ HTTP/1.1\r\nHost: " + pu.Host + "\r\n\r\n",
		"no placeholder at all": "GET / HTTP/1.1\r\nHost: attacker.example.net\r\nConnection: close\r\n\r\n",
		"pipelined":             good + strings.Replace(good, "Host: "+pu.Host, "Host: attacker.example.net", 1),
	} {
		out := raw(reqs)
		if !strings.Contains(out, "403 Forbidden") || !strings.Contains(out, "names host") {
			t.Errorf("%s: %q, want a 403 naming the host", name, out)
		}
	}
	close(g.hosts)
	n := 0
	for h := range g.hosts {
		n++
		if h != pu.Host {
			t.Errorf("the provider got a request for Host %q", h)
		}
	}
	if n != 1 { // the first of the pipelined two
		t.Errorf("the provider got %d requests, want 1", n)
	}
	refused := 0
	for _, r := range g.waitRecords(6) {
		if !r.Allowed && strings.Contains(r.Reason, "names host") {
			refused++
		}
	}
	if refused != 5 {
		t.Errorf("%d refusals logged, want 5: %+v", refused, g.records())
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// A plain HTTP request whose Host names another host than its target is
// refused: the target decides the address, the Host what it serves.
func TestProxyRefusesAnotherHostOverPlainHTTP(t *testing.T) {
	g := newBrokerRig(t)
	pu, _ := url.Parse(g.plain.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: other.example.com\r\n\r\n", pu.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 || g.otherHits.Load() != 0 {
		t.Fatalf("%v %v, reached %d", resp, err, g.otherHits.Load())
	}
	if code, body := g.do("GET", g.plain.URL+"/", nil, ""); code != 200 || body != "plain ok" {
		t.Errorf("the same request naming its own host: %d %q", code, body)
	}
}

// A placeholder split across two chunks of a plain HTTP body over 1 MiB
// never arrives whole.
func TestBrokerWatchesChunkedBodies(t *testing.T) {
	g := newBrokerRig(t)
	addr, got := sink(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ph := g.key.Placeholder
	fmt.Fprintf(c, "POST http://%s/ HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", addr, addr)
	first := strings.Repeat("a", 1<<20+10) + ph[:20]
	fmt.Fprintf(c, "%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", len(first), first, len(ph)-20, ph[20:])
	select {
	case s := <-got:
		if strings.Contains(s, ph[20:]) {
			t.Errorf("the server got the placeholder's second half")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the request was not cut")
	}
}

// The unbroker replaces every value whatever the reads it comes in, and
// holds back no more than the start of a value.
func TestUnbrokerSplits(t *testing.T) {
	u := &unbroker{swaps: []swap{{[]byte("sk-abcdef"), []byte("PH1")}, {[]byte("sk-abXYZ"), []byte("PH2")}}}
	in := "x sk-abcdef y sk-abXYZ sk-ab sk-abcdesk-abcdef z sk-a"
	want := "x PH1 y PH2 sk-ab sk-abcdePH1 z sk-a"
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		var out []byte
		rest := in
		for len(rest) > 0 {
			n := 1 + rng.IntN(len(rest))
			out = append(out, u.feed([]byte(rest[:n]), false)...)
			if strings.Contains(string(out), "sk-abcdef") || strings.Contains(string(out), "sk-abXYZ") {
				t.Fatalf("a value passed: %q", out)
			}
			rest = rest[n:]
		}
		out = append(out, u.feed(nil, true)...)
		if string(out) != want {
			t.Fatalf("got %q, want %q", out, want)
		}
	}
	if got := string(u.feed([]byte("line ends\n"), false)); got != "line ends\n" {
		t.Errorf("a line held back: %q", got)
	}
}

func FuzzUnbroker(f *testing.F) {
	f.Add("a sk-secret b", 3)
	f.Fuzz(func(t *testing.T, in string, cut int) {
		u := &unbroker{swaps: []swap{{[]byte("sk-secret"), []byte("hsbx-secret-x")}}}
		if cut < 0 {
			cut = -cut
		}
		var out []byte
		for rest := in; len(rest) > 0; {
			n := 1 + cut%len(rest)
			out = append(out, u.feed([]byte(rest[:n]), false)...)
			rest = rest[n:]
		}
		out = append(out, u.feed(nil, true)...)
		if want := strings.ReplaceAll(in, "sk-secret", "hsbx-secret-x"); string(out) != want {
			t.Fatalf("%q: got %q, want %q", in, out, want)
		}
	})
}

// A sandbox made from an older declaration (kept: on_drift = warn) never
// takes a value to a host the relaying process's configuration no longer
// declares for it.
func TestBrokerSendsOnlyWhereTheConfigurationSaysNow(t *testing.T) {
	g := newBrokerRig(t)
	pu, _ := url.Parse(g.provider.URL)
	g.px.Broker.Declared = map[string][]string{"API_KEY": {"api.elsewhere.example"}, "TOKEN": {pu.Host}}
	code, body := g.do("GET", g.provider.URL+"/", http.Header{"Authorization": {"Bearer " + g.key.Placeholder}}, "")
	if code != 403 || !strings.Contains(body, "placeholder of secret API_KEY") {
		t.Errorf("a host the configuration dropped: %d %q", code, body)
	}
	if code, _ := g.do("GET", g.provider.URL+"/", nil, ""); code != 200 {
		t.Fatalf("the other secret, still declared: %d", code)
	}
	if h := <-g.seen; h.Get("X-Token") != "tok token-value" || h.Get("Authorization") != "" {
		t.Errorf("the provider saw %v", h)
	}
}

// Inside a tunnel, a TLS client naming a server the allow-list does not
// name (domain fronting through a server at an allowed address) is cut
// before its hello arrives; a name the list allows passes, as does a
// protocol that is not TLS.
func TestProxyRefusesDomainFronting(t *testing.T) {
	var handshakes atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			handshakes.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	var recs []Record
	var mu sync.Mutex
	px := &Proxy{Policy: &Policy{Rules: mustRules(t, "127.0.0.1", "*.allowed.example")}, Log: func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }}
	proxy := serveProxy(t, px)
	tunnel := func(sni string) error {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", strings.TrimPrefix(srv.URL, "https://"))
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return err
		}
		req, _ := http.NewRequest("GET", "https://"+sni+"/", nil)
		if err := req.Write(tc); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := tunnel("api.allowed.example"); err != nil {
		t.Fatalf("a name the list allows: %v", err)
	}
	before := handshakes.Load()
	if err := tunnel("evil.example.net"); err == nil {
		t.Fatal("a name the list does not allow got through")
	}
	if handshakes.Load() != before {
		t.Error("the server was reached with the fronted name")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		found := slices.ContainsFunc(recs, func(r Record) bool { return !r.Allowed && strings.Contains(r.Reason, "evil.example.net") })
		mu.Unlock()
		if found || time.Now().After(deadline) {
			if !found {
				t.Errorf("no refusal logged: %+v", recs)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHelloName(t *testing.T) {
	if n, done := helloName([]byte("SSH-2.0-x\r\n")); n != "" || !done {
		t.Errorf("not TLS: %q %v", n, done)
	}
	if _, done := helloName([]byte{0x16, 0x03}); done {
		t.Error("the start of a record was taken as not a hello")
	}
}
