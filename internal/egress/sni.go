package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// A tunnel (CONNECT) is decided by the name it asks for; inside it, a TLS
// client names its server again (SNI), and a server that serves many
// names (a CDN) goes by that one. sniGate reads the tunnel's first bytes:
// a TLS ClientHello naming a server the allow-list does not name (domain
// fronting) is refused before it goes; anything else passes as it came.

// maxHello bounds what is held to read a ClientHello (one TLS record).
const maxHello = 5 + 16<<10

// sniGate is the outgoing side of a tunnel to host:port: it holds the
// first bytes until they are a whole ClientHello (or plainly not one),
// then passes everything, or fails when the hello names a server the
// policy does not allow.
type sniGate struct {
	w       io.Writer
	p       *Policy
	host    string
	port    int
	held    []byte
	decided bool
	err     error
}

func (g *sniGate) Write(b []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.decided {
		return g.w.Write(b)
	}
	g.held = append(g.held, b...)
	name, done := helloName(g.held)
	if !done {
		return len(b), nil // more is needed to decide
	}
	g.decided = true
	if name != "" {
		if err := g.check(name); err != nil {
			g.err = err
			return 0, err
		}
	}
	held := g.held
	g.held = nil
	if _, err := g.w.Write(held); err != nil {
		return 0, err
	}
	return len(b), nil
}

// flush passes on what is still held (the tunnel ended before a whole
// hello: nothing to decide), then flushes what it writes to.
func (g *sniGate) flush() error {
	if g.err != nil {
		return g.err
	}
	if !g.decided && len(g.held) > 0 {
		g.decided = true
		if _, err := g.w.Write(g.held); err != nil {
			return err
		}
	}
	if f, ok := g.w.(interface{ flush() error }); ok {
		return f.flush()
	}
	return nil
}

// frontingError is a ClientHello naming another server than the tunnel's
// that the allow-list does not name.
type frontingError struct {
	sni, dest string
}

func (e *frontingError) Error() string {
	return fmt.Sprintf("the TLS server name %q inside the tunnel to %s is not on the allow-list (domain fronting)", clip(e.sni), e.dest)
}

func (g *sniGate) check(sni string) error {
	n, err := normalName(sni, false)
	h, _ := normalName(g.host, false)
	if err == nil && n == h {
		return nil
	}
	if err == nil {
		for _, r := range g.p.Rules {
			if r.IsName() && matchName(r.Name, n) && r.port(g.port) {
				return nil
			}
		}
	}
	return &frontingError{sni: sni, dest: net.JoinHostPort(g.host, fmt.Sprint(g.port))}
}

// helloName reads b, the first bytes of a tunnel: done is false while b
// may be the start of a ClientHello not yet whole; name is the server
// name a whole one carries ("" for none, or for bytes that are not one).
func helloName(b []byte) (name string, done bool) {
	if len(b) < 9 {
		return "", len(b) > 0 && b[0] != 0x16 // a handshake record starts 0x16
	}
	if b[0] != 0x16 || b[1] != 0x03 || b[5] != 0x01 {
		return "", true // not a ClientHello
	}
	// The hello may span records: as many as hold its length.
	need := 4 + (int(b[6])<<16 | int(b[7])<<8 | int(b[8]))
	n, have := 0, 0
	for have < need {
		if n+5 > len(b) {
			return "", false
		}
		if b[n] != 0x16 {
			return "", true // another record before the hello's end: not one to read
		}
		l := int(b[n+3])<<8 | int(b[n+4])
		if n+5+l > maxHello {
			return "", true
		}
		if n+5+l > len(b) {
			return "", false
		}
		have += l
		n += 5 + l
	}
	var got string
	stop := errors.New("hello read")
	srv := tls.Server(&helloConn{r: bytes.NewReader(b[:n])}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		got = h.ServerName
		return nil, stop
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.HandshakeContext(ctx)
	return strings.TrimSpace(got), true
}

// helloConn is a ClientHello's bytes as the conn crypto/tls reads it
// from; what it writes back (an alert) goes nowhere.
type helloConn struct{ r io.Reader }

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return relayAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return relayAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
