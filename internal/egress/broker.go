package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/iocount"
)

// The broker's half of the proxy: requests that may carry a secret's
// value are read (plain HTTP as it comes; HTTPS to a secret's host by
// terminating the sandbox's TLS with a certificate of the sandbox's own
// CA and making a TLS connection of the relay's own to the host), the
// value put in, and everything else watched for the placeholders.

// brokerPlain forwards one plain HTTP request (head already read: its
// forward form, then br) to up, refusing it when a placeholder is in its
// head or body, or when dest may receive a secret (ours): values go over
// HTTPS only.
func (p *Proxy) brokerPlain(c Conn, br *bufio.Reader, up net.Conn, forward []byte, ours []Secret, dest string, rec *Record) {
	r, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(forward), br)))
	if err != nil {
		rec.Error = err.Error()
		reply(c, 400, "Bad Request", fmt.Sprintf("hsbx egress: %v\n", err))
		return
	}
	if len(ours) > 0 {
		// A value never crosses the network in clear text.
		refuseSecret(c, rec, fmt.Errorf("%s may receive secret %s, which is sent over HTTPS only: use https://", dest, ours[0].Name))
		return
	}
	if _, err := p.Broker.inject(r, nil, dest); err != nil {
		refuseSecret(c, rec, err)
		return
	}
	// A body up to bodyScan is read whole and looked at before anything
	// is sent; past that it is watched on its way (the placeholder still
	// never leaves, but what came before it has).
	held, err := io.ReadAll(io.LimitReader(r.Body, bodyScan+1))
	if err != nil {
		rec.Error = err.Error()
		return
	}
	if sec, found := p.Broker.placeholderIn(held); found {
		refuseSecret(c, rec, &exfiltrationError{secret: sec.Name, dest: dest})
		return
	}
	// The body is watched as it is decoded (a placeholder split across
	// two chunks is one placeholder), the head was looked at above.
	r.Body = io.NopCloser(&watchReader{r: io.MultiReader(bytes.NewReader(held), r.Body), sc: &scanner{b: p.Broker, dest: dest, w: io.Discard}})
	keepUserAgent(r)
	out := &iocount.Writer{W: up}
	err = r.Write(out)
	rec.BytesOut = out.N
	var ex *exfiltrationError
	if errors.As(err, &ex) {
		// The placeholder never left (the scanner holds back what could
		// be one); what went before it did.
		_ = up.Close()
		refuseSecret(c, rec, err)
		return
	}
	if err != nil {
		rec.Error = err.Error()
		return
	}
	if tc, ok := up.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	rec.BytesIn, _ = io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{up}, make([]byte, copyBuf))
	_ = c.CloseWrite()
}

// brokerTLS serves a CONNECT to a host that secrets (ours) may go to: the
// sandbox's TLS is terminated with a certificate for host from the
// sandbox's CA, each request gets its values and goes to up over a TLS
// connection the relay makes and verifies, and each is logged.
func (p *Proxy) brokerTLS(ctx context.Context, c Conn, br *bufio.Reader, up net.Conn, host string, port int, ours []Secret, rec Record, start time.Time) {
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	if p.Broker.CA == nil {
		rec.Allowed, rec.Reason = false, errNoCA.Error()+": the sandbox's secrets cannot be sent (the relay runs on the host that made the sandbox)"
		reply(c, 403, "Forbidden", "hsbx egress: refused CONNECT "+dest+": "+rec.Reason+"\n")
		p.log(rec, start)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	inner := tls.Server(&connAdapter{c: c, r: br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.Broker.CA.leaf(host)
		},
	})
	hctx, cancel := context.WithTimeout(ctx, p.headTimeout())
	err := inner.HandshakeContext(hctx)
	cancel()
	if err != nil {
		rec.Error = "the sandbox's TLS handshake: " + err.Error()
		p.log(rec, start)
		return
	}
	defer inner.Close()
	conf := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.RootCAs, NextProtos: []string{"http/1.1"}}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil {
		conf.ServerName = host
	} else {
		conf.ServerName = strings.Trim(host, "[]") // verified against the certificate's IP addresses
	}
	outer := tls.Client(up, conf)
	hctx, cancel = context.WithTimeout(ctx, p.dialTimeout())
	err = outer.HandshakeContext(hctx)
	cancel()
	if err != nil {
		rec.Error = "TLS to " + dest + ": " + err.Error()
		reply(inner, 502, "Bad Gateway", "hsbx egress: "+rec.Error+"\n")
		p.log(rec, start)
		return
	}
	cr, ur := bufio.NewReader(inner), bufio.NewReader(outer)
	for {
		r, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		begin := time.Now()
		one := rec
		one.Time, one.Method = begin, r.Method
		if err := checkHost(r, host, port); err != nil {
			// Each request on its own: a pipelined second one to
			// another host is refused as the first would be.
			refuseSecret(inner, &one, err)
			p.log(one, begin)
			return
		}
		used, err := p.Broker.inject(r, ours, dest)
		if err != nil {
			refuseSecret(inner, &one, err)
			p.log(one, begin)
			return
		}
		one.Secrets = used
		held, err := io.ReadAll(io.LimitReader(r.Body, bodyScan+1))
		if err == nil {
			if sec, found := p.Broker.placeholderIn(held, ours...); found {
				err = &exfiltrationError{secret: sec.Name, dest: dest}
			}
		}
		if err != nil {
			refuseSecret(inner, &one, err)
			p.log(one, begin)
			return
		}
		r.Body = io.NopCloser(&watchReader{r: io.MultiReader(bytes.NewReader(held), r.Body), sc: &scanner{b: p.Broker, ok: ours, dest: dest, w: io.Discard}})
		keepUserAgent(r)
		// The answer is read to replace the values in it: in an
		// encoding the relay can read.
		r.Header.Set("Accept-Encoding", "identity")
		r.Header.Del("TE")
		out := &iocount.Writer{W: outer}
		if err := r.Write(out); err != nil {
			var ex *exfiltrationError
			if errors.As(err, &ex) {
				refuseSecret(inner, &one, err)
			} else {
				one.Error = err.Error()
			}
			one.BytesOut = out.N
			p.log(one, begin)
			return
		}
		resp, err := http.ReadResponse(ur, r)
		if err != nil {
			one.Error, one.BytesOut = err.Error(), out.N
			reply(inner, 502, "Bad Gateway", "hsbx egress: "+dest+": "+p.Broker.newUnbroker().string(err.Error())+"\n")
			p.log(one, begin)
			return
		}
		// Nothing the host answers hands a value back to the sandbox.
		un, err := p.Broker.unbrokerResponse(resp, r)
		if err != nil {
			_ = resp.Body.Close()
			one.Error, one.BytesOut = err.Error(), out.N
			reply(inner, 502, "Bad Gateway", "hsbx egress: "+dest+": "+un.string(err.Error())+"\n")
			p.log(one, begin)
			return
		}
		in := &iocount.Writer{W: inner}
		err = resp.Write(in)
		_ = resp.Body.Close()
		one.BytesOut, one.BytesIn = out.N, in.N
		if err != nil {
			one.Error = err.Error()
		}
		if resp.StatusCode == http.StatusSwitchingProtocols && err == nil {
			// An upgrade (a WebSocket): raw both ways from here, the
			// way back still rid of the values.
			back := &unbrokerWriter{u: un, w: inner, release: upgradeRelease}
			o, i := spliceVia(tlsConn{inner}, outer, nil, nil, back)
			one.BytesOut, one.BytesIn = one.BytesOut+o, one.BytesIn+i
			one.Rewritten = un.n
			p.log(one, begin)
			return
		}
		one.Rewritten = un.n
		p.log(one, begin)
		if err != nil || r.Close || resp.Close {
			return
		}
	}
}

// watchReader is a request body read through a scanner: the read that
// would complete a placeholder fails instead.
type watchReader struct {
	r  io.Reader
	sc *scanner
}

func (w *watchReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		if _, serr := w.sc.Write(p[:n]); serr != nil {
			return 0, serr
		}
	}
	return n, err
}

// upgradeRelease is how long the way back of an upgraded connection
// holds what may begin a value before it lets it go: a protocol whose
// message ends as a value begins is slowed this much, never stalled.
const upgradeRelease = 50 * time.Millisecond

// bodyScan is how much of a plain HTTP request's body is read and looked
// at before the request is sent on.
const bodyScan = 1 << 20

// refuseSecret answers a request that carried a placeholder where its
// secret may not go (or whose value could not be had) with a 403, and
// records why.
func refuseSecret(w io.Writer, rec *Record, err error) {
	rec.Allowed, rec.Rule, rec.Reason = false, "", err.Error()
	reply(w, 403, "Forbidden", "hsbx egress: refused: "+err.Error()+"\n")
}

// keepUserAgent stops http.Request.Write from adding Go's own User-Agent
// to a request that had none.
func keepUserAgent(r *http.Request) {
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = []string{""}
	}
}

// connAdapter is a relayed Conn as the net.Conn crypto/tls takes, its
// reads from r (what was buffered past the CONNECT head comes first).
type connAdapter struct {
	c Conn
	r *bufio.Reader
}

func (a *connAdapter) Read(p []byte) (int, error)       { return a.r.Read(p) }
func (a *connAdapter) Write(p []byte) (int, error)      { return a.c.Write(p) }
func (a *connAdapter) Close() error                     { return a.c.Close() }
func (a *connAdapter) LocalAddr() net.Addr              { return relayAddr{} }
func (a *connAdapter) RemoteAddr() net.Addr             { return relayAddr{} }
func (a *connAdapter) SetDeadline(time.Time) error      { return nil }
func (a *connAdapter) SetReadDeadline(time.Time) error  { return nil }
func (a *connAdapter) SetWriteDeadline(time.Time) error { return nil }

type relayAddr struct{}

func (relayAddr) Network() string { return "hsbx-relay" }
func (relayAddr) String() string  { return "sandbox" }

// tlsConn is the sandbox's side of a terminated TLS connection as splice
// takes it (its half close is TLS's close_notify).
type tlsConn struct{ *tls.Conn }

func (t tlsConn) CloseWrite() error { return t.Conn.CloseWrite() }
