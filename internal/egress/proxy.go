package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is one connection a process in the sandbox made to the relay's
// address, as the host sees it: its bytes, a half close (the sandbox's
// side reads end of data), and a close.
type Conn interface {
	io.ReadWriter
	CloseWrite() error
	Close() error
}

// Proxy serves HTTP proxy requests on relayed connections: CONNECT
// (HTTPS and anything else over a tunnel) and plain HTTP in absolute
// form, each decided by Policy and written to Log.
type Proxy struct {
	Policy *Policy
	// Dial connects to an allowed address (nil: a TCP dial).
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// Log receives every decision (nil: none).
	Log func(Record)
	// HeadTimeout bounds the wait for a request's head (0: 30s).
	HeadTimeout time.Duration
	// DialTimeout bounds a connect (0: 15s).
	DialTimeout time.Duration
	// Broker, when set, brokers the sandbox's secrets (broker.go).
	Broker *Broker
	// RootCAs verify the hosts the broker makes TLS connections to (nil:
	// the host's roots, SSL_CERT_FILE and SSL_CERT_DIR honoured).
	RootCAs *x509.CertPool
}

// Record is one line of the network log.
type Record struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox,omitempty"`
	Task    string    `json:"task,omitempty"`
	// Method is CONNECT or the plain HTTP request's method.
	Method  string `json:"method"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Addr    string `json:"addr,omitempty"` // the address connected to
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`   // the entry that allowed it
	Reason  string `json:"reason,omitempty"` // why it was refused
	Error   string `json:"error,omitempty"`  // an allowed connection that failed
	// BytesOut went from the sandbox to the destination, BytesIn back.
	BytesOut   int64 `json:"bytes_out"`
	BytesIn    int64 `json:"bytes_in"`
	DurationMS int64 `json:"duration_ms"`
	// Secrets are the brokered secrets whose values went into the
	// request (by name: a value is never logged).
	Secrets []string `json:"secrets,omitempty"`
	// Rewritten counts the values the response carried back, each
	// replaced by its placeholder before the sandbox got it.
	Rewritten int `json:"rewritten,omitempty"`
}

// maxHead bounds a request's head.
const maxHead = 64 << 10

// errBadRequest is a request the proxy cannot read.
var errBadRequest = errors.New("not an HTTP proxy request")

// Serve handles one relayed connection to its end and closes it.
func (p *Proxy) Serve(ctx context.Context, c Conn) {
	defer c.Close()
	start := time.Now()
	rec := Record{Time: start}
	timer := time.AfterFunc(p.headTimeout(), func() { _ = c.Close() })
	br := bufio.NewReaderSize(c, 16<<10)
	req, err := readHead(br)
	timer.Stop()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			reply(c, 400, "Bad Request", fmt.Sprintf("hsbx egress: %v\n", err))
		}
		return
	}
	rec.Method, rec.Host, rec.Port = req.method, req.host, req.port
	if sec, found := p.Broker.placeholderIn([]byte(req.host)); found {
		// Before any lookup: a name carrying a placeholder would take it
		// to a name server.
		refuseSecret(c, &rec, &exfiltrationError{secret: sec.Name, dest: "the name " + clip(req.host)})
		p.log(rec, start)
		return
	}
	if req.named != "" && !sameAuthority(req.named, req.host, req.port, 80) {
		// The address is decided by the target; a Host naming another
		// would reach whatever else that server (a CDN, a load
		// balancer) serves.
		reason := fmt.Sprintf("the request's Host %q names another host than its target %s", clip(req.named), net.JoinHostPort(req.host, strconv.Itoa(req.port)))
		rec.Reason = reason
		reply(c, 403, "Forbidden", "hsbx egress: refused: "+reason+"\n")
		p.log(rec, start)
		return
	}
	d := p.Policy.Decide(ctx, req.host, req.port)
	rec.Allowed, rec.Rule, rec.Reason = d.Allowed, d.Rule, d.Reason
	if !d.Allowed {
		reply(c, 403, "Forbidden", fmt.Sprintf("hsbx egress: refused %s %s: %s\n", req.method, net.JoinHostPort(req.host, strconv.Itoa(req.port)), d.Reason))
		p.log(rec, start)
		return
	}
	rec.Addr = d.Addr.String()
	up, err := p.dial(ctx, d.Addr)
	if err != nil {
		rec.Error = err.Error()
		reply(c, 502, "Bad Gateway", fmt.Sprintf("hsbx egress: connecting to %s (%s) failed: %v\n", net.JoinHostPort(req.host, strconv.Itoa(req.port)), d.Addr, err))
		p.log(rec, start)
		return
	}
	defer up.Close()
	if p.Broker != nil && len(p.Broker.Secrets) > 0 {
		dest := net.JoinHostPort(req.host, strconv.Itoa(req.port))
		ours := p.Broker.For(req.host, req.port)
		switch {
		case req.method == "CONNECT" && len(ours) > 0:
			p.brokerTLS(ctx, c, br, up, req.host, req.port, ours, rec, start)
			return
		case req.method != "CONNECT":
			p.brokerPlain(c, br, up, req.forward, ours, dest, &rec)
			p.log(rec, start)
			return
		}
		// A tunnel to anywhere else: passed through, watched for the
		// placeholders on the way out.
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			p.log(rec, start)
			return
		}
		var first []byte
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			first = append(first, b...)
		}
		sc := &scanner{b: p.Broker, dest: dest, w: up}
		gate := &sniGate{w: sc, p: p.Policy, host: req.host, port: req.port}
		rec.BytesOut, rec.BytesIn = spliceVia(c, up, first, gate, nil)
		for _, err := range []error{gate.err, sc.err} {
			if err != nil {
				rec.Allowed, rec.Rule, rec.Reason = false, "", err.Error()
			}
		}
		p.log(rec, start)
		return
	}
	var first []byte
	if req.method == "CONNECT" {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			p.log(rec, start)
			return
		}
	} else {
		first = req.forward
	}
	// What the client sent past the head goes on first.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		first = append(first, b...)
	}
	if req.method != "CONNECT" {
		rec.BytesOut, rec.BytesIn = splice(c, up, first)
		p.log(rec, start)
		return
	}
	gate := &sniGate{w: up, p: p.Policy, host: req.host, port: req.port}
	rec.BytesOut, rec.BytesIn = spliceVia(c, up, first, gate, nil)
	if gate.err != nil {
		rec.Allowed, rec.Rule, rec.Reason = false, "", gate.err.Error()
	}
	p.log(rec, start)
}

func (p *Proxy) log(rec Record, start time.Time) {
	rec.DurationMS = time.Since(start).Milliseconds()
	p.Broker.redact(&rec)
	if p.Log != nil {
		p.Log(rec)
	}
}

func (p *Proxy) headTimeout() time.Duration {
	if p.HeadTimeout <= 0 {
		return 30 * time.Second
	}
	return p.HeadTimeout
}

func (p *Proxy) dialTimeout() time.Duration {
	if p.DialTimeout <= 0 {
		return 15 * time.Second
	}
	return p.DialTimeout
}

func (p *Proxy) dial(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
	defer cancel()
	if p.Dial != nil {
		return p.Dial(ctx, a)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", a.String())
}

// copyBuf is splice's buffer each way: a relayed connection's writes
// become the exec channel's frames one for one, and every frame costs
// each hop a system call (wire.Chunk).
const copyBuf = 128 << 10

// splice copies both ways until both are done; a side's end of data is
// passed on as a half close. It returns the bytes each way.
func splice(c Conn, up net.Conn, first []byte) (out, in int64) {
	return spliceVia(c, up, first, nil, nil)
}

// flusher is a writer of spliceVia's way out that holds or watches: its
// flush says, at the end, whether what went through it was refused.
type flusher interface {
	io.Writer
	flush() error
}

// spliceVia is splice with what goes out written through sc (nil: none),
// which watches it (placeholders, a ClientHello) and is flushed at the
// end, and what comes back written through back (nil: straight to c).
func spliceVia(c Conn, up net.Conn, first []byte, sc flusher, back io.Writer) (out, in int64) {
	var w io.Writer = up
	if sc != nil {
		w = sc
	}
	var wg sync.WaitGroup
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := int64(0)
		if len(first) > 0 {
			m, err := w.Write(first)
			n += int64(m)
			if err != nil {
				sent.Store(n)
				_ = up.Close()
				_ = c.Close()
				return
			}
		}
		m, err := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{c}, make([]byte, copyBuf))
		if err == nil && sc != nil {
			err = sc.flush()
		}
		sent.Store(n + m)
		if err != nil && sc != nil {
			_ = up.Close() // refused on its way out: nothing more goes
			_ = c.Close()
			return
		}
		if tc, ok := up.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			_ = up.Close()
		}
	}()
	if back == nil {
		back = c
	}
	in, _ = io.CopyBuffer(struct{ io.Writer }{back}, struct{ io.Reader }{up}, make([]byte, copyBuf))
	if f, ok := back.(*unbrokerWriter); ok {
		f.flush()
	}
	_ = c.CloseWrite()
	wg.Wait()
	return sent.Load(), in
}

// head is a proxy request's head as read.
type head struct {
	method, host string
	port         int
	// forward is the head to send on for plain HTTP: origin-form request
	// line, the proxy's own headers dropped, the connection closed after
	// one exchange (the next request may be for another host).
	forward []byte
	// named is a plain HTTP request's Host header ("": none).
	named string
}

func readHead(br *bufio.Reader) (head, error) {
	var h head
	var lines []string
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if total > maxHead {
			return h, fmt.Errorf("%w: a head over %d bytes", errBadRequest, maxHead)
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return h, fmt.Errorf("%w: a line over %d bytes", errBadRequest, br.Size())
			}
			if len(lines) == 0 && len(line) == 0 {
				return h, io.EOF
			}
			return h, fmt.Errorf("%w: the head ended early", errBadRequest)
		}
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			if len(lines) == 0 {
				continue // a stray empty line before the request
			}
			break
		}
		lines = append(lines, s)
	}
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") || !token(parts[0]) {
		return h, fmt.Errorf("%w: a request line %q", errBadRequest, clip(lines[0]))
	}
	h.method = parts[0]
	if h.method == "CONNECT" {
		host, port, err := net.SplitHostPort(parts[1])
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			return h, fmt.Errorf("%w: CONNECT wants host:port, got %q", errBadRequest, clip(parts[1]))
		}
		h.host, h.port = host, n
		return h, nil
	}
	u, err := url.Parse(parts[1])
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return h, fmt.Errorf("%w: %s wants an http:// URL through a proxy (HTTPS goes by CONNECT), got %q", errBadRequest, h.method, clip(parts[1]))
	}
	h.host, h.port = u.Hostname(), 80
	if p := u.Port(); p != "" {
		if h.port, err = strconv.Atoi(p); err != nil || h.port < 1 || h.port > 65535 {
			return h, fmt.Errorf("%w: a port %q", errBadRequest, clip(p))
		}
	}
	var b bytes.Buffer
	b.WriteString(h.method + " " + u.RequestURI() + " " + parts[2] + "\r\n")
	for _, l := range lines[1:] {
		name, _, _ := strings.Cut(l, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "proxy-connection", "proxy-authorization", "connection", "keep-alive":
			continue
		case "host":
			_, v, _ := strings.Cut(l, ":")
			if h.named != "" {
				return h, fmt.Errorf("%w: more than one Host header", errBadRequest)
			}
			h.named = strings.TrimSpace(v)
		}
		b.WriteString(l + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	h.forward = b.Bytes()
	return h, nil
}

func token(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '!' || c > '~' || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func reply(w io.Writer, code int, status, body string) {
	what := "error"
	if code == 403 {
		what = "refused"
	}
	_, _ = fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Hsbx-Egress: %s\r\nConnection: close\r\n\r\n%s",
		code, status, len(body), what, body)
}
