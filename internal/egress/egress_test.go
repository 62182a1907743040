package egress

import (
	"bufio"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, c := range []struct {
		in, name, prefix string
		port             int
		err              string
	}{
		{in: "example.com", name: "example.com"},
		{in: "Example.COM.:443", name: "example.com", port: 443},
		{in: "*.example.com", name: "*.example.com"},
		{in: "*.example.com:8080", name: "*.example.com", port: 8080},
		{in: "192.0.2.7", prefix: "192.0.2.7/32"},
		{in: "192.0.2.7:80", prefix: "192.0.2.7/32", port: 80},
		{in: "10.1.2.3/8", prefix: "10.0.0.0/8"},
		{in: "10.0.0.0/8:5432", prefix: "10.0.0.0/8", port: 5432},
		{in: "2001:db8::1", prefix: "2001:db8::1/128"},
		{in: "[2001:db8::1]:443", prefix: "2001:db8::1/128", port: 443},
		{in: "[2001:db8::/32]:443", prefix: "2001:db8::/32", port: 443},
		{in: "::ffff:192.0.2.1", prefix: "192.0.2.1/32"},
		{in: "", err: "empty"},
		{in: "*", err: "wildcard"},
		{in: "*.com", err: "needs a domain"},
		{in: "a.*.com", err: "wildcard"},
		{in: "example.com:0", err: "not 1-65535"},
		{in: "example.com:65536", err: "not 1-65535"},
		{in: "example.com:+80", err: "not 1-65535"},
		{in: "example.com:http", err: "not 1-65535"},
		{in: "exa mple.com", err: "not a host name"},
		{in: "10.0.0.0/33", err: "CIDR"},
		{in: "[2001:db8::1", err: "unclosed"},
		{in: "[2001:db8::1]443", err: "want :PORT"},
		{in: "fe80::1%eth0", err: "zone"},
		{in: "a..b", err: "not a host name"},
		{in: strings.Repeat("a", 64) + ".com", err: "not a host name"},
	} {
		r, err := ParseRule(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		got := r.Prefix.String()
		if !r.Prefix.IsValid() {
			got = ""
		}
		if r.Name != c.name || got != c.prefix || r.Port != c.port {
			t.Errorf("%q: got name %q prefix %q port %d", c.in, r.Name, got, r.Port)
		}
	}
}

func TestDecide(t *testing.T) {
	dns := map[string][]string{
		"api.example.com":     {"93.184.216.34"},
		"rebind.example.com":  {"127.0.0.1"},
		"meta.example.com":    {"169.254.169.254"},
		"inner.example.com":   {"10.0.0.5", "93.184.216.35"},
		"private.example.com": {"10.0.0.5"},
		"me.example.com":      {"198.51.100.9"},
		"v6.example.com":      {"::1"},
	}
	resolved := 0
	p := &Policy{
		Rules: mustRules(t, "*.example.com:443", "api.example.com", "10.0.0.5:443", "192.0.2.0/24", "[2001:db8::/32]:22"),
		Resolve: func(_ context.Context, h string) ([]netip.Addr, error) {
			resolved++
			as, ok := dns[h]
			if !ok {
				return nil, errors.New("no such host")
			}
			var out []netip.Addr
			for _, a := range as {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		},
		Own: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("198.51.100.9")} },
	}
	for _, c := range []struct {
		host    string
		port    int
		allowed bool
		rule    string
		addr    string
		reason  string
	}{
		{"api.example.com", 443, true, "*.example.com:443", "93.184.216.34:443", ""},
		{"API.Example.com.", 80, true, "api.example.com", "93.184.216.34:80", ""},
		{"example.com", 443, false, "", "", "no entry"},
		{"evil.com", 443, false, "", "", "no entry"},
		{"api.example.com.evil.com", 443, false, "", "", "no entry"},
		{"rebind.example.com", 443, false, "", "", "loopback"},
		{"meta.example.com", 443, false, "", "", "link-local"},
		{"private.example.com", 443, true, "10.0.0.5:443", "10.0.0.5:443", ""},
		{"inner.example.com", 443, true, "10.0.0.5:443", "10.0.0.5:443", ""},
		{"me.example.com", 443, false, "", "", "this host"},
		{"v6.example.com", 443, false, "", "", "loopback"},
		{"nxdomain.example.com", 443, false, "", "", "did not resolve"},
		{"192.0.2.99", 8080, true, "192.0.2.0/24", "192.0.2.99:8080", ""},
		{"127.0.0.1", 80, false, "", "", "names the address"},
		{"169.254.169.254", 80, false, "", "", "names the address"},
		{"10.0.0.5", 80, false, "", "", "port 80"},
		{"[2001:db8::7]", 22, true, "[2001:db8::/32]:22", "[2001:db8::7]:22", ""},
		{"::ffff:192.0.2.1", 1, true, "192.0.2.0/24", "192.0.2.1:1", ""},
		{"api.example.com", 0, false, "", "", "not a port"},
		{"bad_host!", 80, false, "", "", "neither"},
	} {
		d := p.Decide(context.Background(), c.host, c.port)
		if d.Allowed != c.allowed || d.Rule != c.rule || c.allowed && d.Addr.String() != c.addr || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s:%d: got %+v", c.host, c.port, d)
		}
	}
	// A name no rule names is never looked up.
	before := resolved
	p.Decide(context.Background(), "secret.evil.com", 443)
	if resolved != before {
		t.Error("a refused name was resolved")
	}
}

func mustRules(t *testing.T, s ...string) []Rule {
	t.Helper()
	r, err := ParseRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadHead(t *testing.T) {
	for _, c := range []struct{ in, method, host, fwd, err string }{
		{in: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", method: "CONNECT", host: "example.com:443"},
		{in: "GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n",
			method: "GET", host: "example.com:80", fwd: "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"},
		{in: "\r\nPOST http://[::1]:8080/ HTTP/1.0\r\n\r\n", method: "POST", host: "::1:8080", fwd: "POST / HTTP/1.0\r\nConnection: close\r\n\r\n"},
		{in: "GET / HTTP/1.1\r\n\r\n", err: "http:// URL"},
		{in: "GET https://example.com/ HTTP/1.1\r\n\r\n", err: "CONNECT"},
		{in: "CONNECT example.com HTTP/1.1\r\n\r\n", err: "host:port"},
		{in: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", err: "request line"},
		{in: "GET http://x/ HTTP/1.1\r\nHost: x\r\n", err: "ended early"},
		{in: "GET http://x/ HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 20000) + "\r\n", err: "head over"},
	} {
		h, err := readHead(bufio.NewReaderSize(strings.NewReader(c.in), 16<<10))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", clip(c.in), err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if h.method != c.method || h.host+":"+itoa(h.port) != c.host || string(h.forward) != c.fwd {
			t.Errorf("%q: got %s %s:%d %q", c.in, h.method, h.host, h.port, h.forward)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.a.b:443", "10.0.0.0/8:1", "[::1]:2", "::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		if r.Port < 0 || r.Port > 65535 || r.IsName() == r.Prefix.IsValid() {
			t.Fatalf("%q: %+v", s, r)
		}
		if r.IsName() {
			if _, err := normalName(r.Name, true); err != nil {
				t.Fatalf("%q: kept a bad name %q", s, r.Name)
			}
		}
	})
}

func FuzzReadHead(f *testing.F) {
	for _, s := range []string{"CONNECT a:1 HTTP/1.1\r\n\r\n", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := readHead(bufio.NewReaderSize(strings.NewReader(s), 16<<10))
		if err != nil {
			return
		}
		if h.method == "" || h.host == "" || h.port < 0 {
			t.Fatalf("%q: %+v", s, h)
		}
		if h.method != "CONNECT" && !strings.HasSuffix(string(h.forward), "Connection: close\r\n\r\n") {
			t.Fatalf("%q: forward %q", s, h.forward)
		}
	})
}

func FuzzParsePosture(f *testing.F) {
	for _, s := range []string{`{"addr":"127.0.0.1:3128","allow":["a.com"]}`, `{"addr":"[::1]:1","allow":[]}`, `{}`, `[`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosture(s)
		if err != nil {
			return
		}
		if _, err := ParseRules(p.Allow); err != nil {
			t.Fatalf("%q: kept a bad list: %v", s, err)
		}
		back, err := ParsePosture(p.Encode())
		if err != nil || back.Addr != p.Addr || len(back.Allow) != len(p.Allow) {
			t.Fatalf("%q: did not survive encoding: %+v %v", s, back, err)
		}
	})
}

// The log keeps what it is given, rotates past LogMax, and reads back
// both files in order, skipping lines that are not records.
func TestLogRotatesAndReadsBack(t *testing.T) {
	p := t.TempDir() + "/egress.log"
	l, err := OpenLog(p)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 4000)
	n := LogMax/4000 + 10
	for i := range n {
		if err := l.Write(Record{Method: "CONNECT", Host: big, Port: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	recs, err := ReadLog(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || recs[0].Port != 1 || recs[n-1].Port != n {
		t.Fatalf("%d records back of %d, first %d last %d", len(recs), n, recs[0].Port, recs[len(recs)-1].Port)
	}
	// Once more past the limit: the oldest are gone, the rest in order.
	l, _ = OpenLog(p)
	for i := range n {
		_ = l.Write(Record{Method: "GET", Host: big, Port: n + i + 1})
	}
	l.Close()
	recs, _ = ReadLog(p)
	if len(recs) >= 2*n || recs[len(recs)-1].Port != 2*n {
		t.Fatalf("%d records after rotating twice, last %d", len(recs), recs[len(recs)-1].Port)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Port != recs[i-1].Port+1 {
			t.Fatalf("out of order at %d: %d after %d", i, recs[i].Port, recs[i-1].Port)
		}
	}
}
