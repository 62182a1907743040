package egress

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The way back: what a secret's host answers goes to the sandbox with
// every value the relay could have sent replaced by its placeholder — in
// the status line, the headers and the body, as it streams — so an
// endpoint that repeats what it was sent (a 404 quoting the path, an
// error quoting a header, TRACE, a redirect carrying the query) never
// hands the value to the sandbox.

// swap is one value and the placeholder that stands for it.
type swap struct{ value, placeholder []byte }

// unbroker replaces values by placeholders in a stream. A value is never
// passed on whole or in part where it could still be completed: the end
// of what came in that is the start of a value is held back until the
// next bytes say whether it is one (values hold no line ends, so a stream
// of lines never waits on it).
type unbroker struct {
	swaps []swap
	pend  []byte // what came in and was not yet passed on
	n     int    // values replaced
}

// newUnbroker is an unbroker for the values of b's secrets that can be
// had now (one shorter than 4 bytes is not a secret anyone could keep).
func (b *Broker) newUnbroker() *unbroker {
	u := &unbroker{}
	if b == nil || b.Values == nil {
		return u
	}
	for _, s := range b.Secrets {
		v, err := b.Values(s.Name)
		if err != nil || len(v) < 4 {
			continue
		}
		u.swaps = append(u.swaps, swap{[]byte(v), []byte(s.Placeholder)})
	}
	return u
}

// feed takes p in and returns what may be passed on now (final: p is the
// last, nothing is held back).
func (u *unbroker) feed(p []byte, final bool) []byte {
	if len(u.swaps) == 0 {
		out := append(u.pend, p...)
		u.pend = nil
		return out
	}
	in := append(u.pend, p...)
	var out []byte
	for {
		at, which := -1, -1
		for k, s := range u.swaps {
			if i := bytes.Index(in, s.value); i >= 0 && (at < 0 || i < at || (i == at && len(s.value) > len(u.swaps[which].value))) {
				at, which = i, k
			}
		}
		if at < 0 {
			break
		}
		out = append(out, in[:at]...)
		out = append(out, u.swaps[which].placeholder...)
		in = in[at+len(u.swaps[which].value):]
		u.n++
	}
	hold := 0
	if !final {
		hold = u.partial(in)
	}
	out = append(out, in[:len(in)-hold]...)
	u.pend = append([]byte(nil), in[len(in)-hold:]...)
	return out
}

// partial is the length of the longest end of p that begins a value.
func (u *unbroker) partial(p []byte) int {
	best := 0
	for _, s := range u.swaps {
		for n := min(len(p), len(s.value)-1); n > best; n-- {
			if bytes.Equal(p[len(p)-n:], s.value[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// string replaces every value in s.
func (u *unbroker) string(s string) string {
	if len(u.swaps) == 0 {
		return s
	}
	saved := u.pend
	u.pend = nil
	out := string(u.feed([]byte(s), true))
	u.pend = saved
	return out
}

// reader is r with the values replaced.
func (u *unbroker) reader(r io.Reader) io.Reader { return &unbrokerReader{u: u, r: r} }

type unbrokerReader struct {
	u    *unbroker
	r    io.Reader
	buf  []byte // one read of r
	out  []byte
	done bool
	err  error
}

func (x *unbrokerReader) Read(p []byte) (int, error) {
	if x.buf == nil {
		x.buf = make([]byte, 32<<10)
	}
	for len(x.out) == 0 && !x.done {
		n, err := x.r.Read(x.buf)
		if err != nil {
			x.done = true
			if err != io.EOF {
				x.err = err
			}
		}
		x.out = append(x.out, x.u.feed(x.buf[:n], x.done)...)
	}
	if len(x.out) == 0 {
		if x.err != nil {
			return 0, x.err
		}
		return 0, io.EOF
	}
	n := copy(p, x.out)
	x.out = x.out[n:]
	return n, nil
}

// unbrokerWriter writes to w with the values replaced, for a stream that
// may wait for an answer (an upgraded connection): what is held back is
// let go after release when nothing completes it.
type unbrokerWriter struct {
	mu      sync.Mutex
	u       *unbroker
	w       io.Writer
	release time.Duration
	timer   *time.Timer
	err     error
}

func (x *unbrokerWriter) Write(p []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return 0, x.err
	}
	if x.timer != nil {
		x.timer.Stop()
	}
	if out := x.u.feed(p, false); len(out) > 0 {
		if _, x.err = x.w.Write(out); x.err != nil {
			return 0, x.err
		}
	}
	if len(x.u.pend) > 0 {
		x.timer = time.AfterFunc(x.release, x.flush)
	}
	return len(p), nil
}

// flush lets go of what is held back.
func (x *unbrokerWriter) flush() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil && len(x.u.pend) > 0 {
		_, x.err = x.w.Write(x.u.feed(nil, true))
	}
}

// maxWhole is the largest response body of a known length read whole
// (and sent on with its new length); a larger one, or one of unknown
// length, is streamed.
const maxWhole = 1 << 20

// encodingError is a response in an encoding the relay cannot look into.
type encodingError string

func (e encodingError) Error() string {
	return fmt.Sprintf("the response is in an encoding (%s) the relay cannot check for the secrets' values; the request asked for none", string(e))
}

// unbrokerResponse makes resp, the answer of a secret's host to req, safe
// to hand to the sandbox: every value replaced by its placeholder in the
// status, the headers and the body (a compressed body decoded first). It
// returns the unbroker, whose count says whether anything was replaced
// once the body has been read.
func (b *Broker) unbrokerResponse(resp *http.Response, req *http.Request) (*unbroker, error) {
	u := b.newUnbroker()
	resp.Status = u.string(resp.Status)
	h := make(http.Header, len(resp.Header))
	for k, vs := range resp.Header {
		k = u.string(k)
		for _, v := range vs {
			h[k] = append(h[k], u.string(v))
		}
	}
	resp.Header = h
	resp.Trailer = nil // a trailer's values would come after the body: not passed on
	if req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.StatusCode < 200 || resp.ContentLength == 0 {
		return u, nil
	}
	body := io.Reader(resp.Body)
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return u, fmt.Errorf("decoding the response's gzip: %w", err)
		}
		body = zr
		resp.ContentLength = -1
	case "deflate":
		zr, err := zlib.NewReader(resp.Body)
		if err != nil {
			return u, fmt.Errorf("decoding the response's deflate: %w", err)
		}
		body = zr
		resp.ContentLength = -1
	default:
		return u, encodingError(enc)
	}
	resp.Header.Del("Content-Encoding")
	if resp.ContentLength >= 0 && resp.ContentLength <= maxWhole {
		all, err := io.ReadAll(io.LimitReader(body, resp.ContentLength+1))
		if err != nil {
			return u, fmt.Errorf("reading the response: %w", err)
		}
		out := u.feed(all, true)
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(out)), int64(len(out))
		resp.TransferEncoding = nil
		return u, nil
	}
	resp.Body = io.NopCloser(u.reader(body))
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	if req.ProtoAtLeast(1, 1) && resp.ProtoAtLeast(1, 1) {
		resp.TransferEncoding = []string{"chunked"}
	} else {
		resp.TransferEncoding, resp.Close = nil, true // its end is the connection's
	}
	return u, nil
}
