package enginecli

import (
	"bytes"
	"io"
	"sync"

	"github.com/hsbx/hsbx/internal/startfail"
)

// startHold holds a stream's first bytes while they may be the OCI
// runtime's "cannot start this command" line (docker prints it on stdout,
// podman on stderr): when the exit status says the command never started,
// Exec reports it as the exec channel does (127/126, hsbx's message) in
// place of the engine's words. Anything else passes through as soon as it
// cannot be that line; a line of that shape is taken only when it is all
// the stream carried.
type startHold struct {
	mu      sync.Mutex
	dst     io.Writer
	buf     []byte
	passing bool
	failure *startfail.Failure
}

const startHoldMax = 4 << 10

func newStartHold(dst io.Writer) *startHold { return &startHold{dst: dst} }

func (h *startHold) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passing {
		return h.dst.Write(p)
	}
	h.buf = append(h.buf, p...)
	switch nl := bytes.IndexByte(h.buf, '\n'); {
	case h.failure != nil && len(h.buf) <= startHoldMax:
		return len(p), nil // more after the line: released at the end
	case h.failure != nil:
	case nl >= 0:
		if f, ok := startfail.Parse(string(h.buf[:nl])); ok {
			h.failure = &f
			return len(p), nil
		}
	case len(h.buf) <= startHoldMax && startfail.MayBegin(h.buf):
		return len(p), nil
	}
	return len(p), h.release()
}

func (h *startHold) release() error {
	h.passing = true
	b := h.buf
	h.buf = nil
	if len(b) == 0 {
		return nil
	}
	_, err := h.dst.Write(b)
	return err
}

// finish ends the hold: with the process's exit code, a start failure
// that was all the stream printed is returned (and dropped); otherwise
// what was held is written out.
func (h *startHold) finish(code int) *startfail.Failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passing {
		return nil
	}
	if f := h.failure; f != nil && (code == 126 || code == 127) && bytes.IndexByte(h.buf, '\n') == len(h.buf)-1 {
		h.passing, h.buf = true, nil
		return f
	}
	_ = h.release()
	return nil
}
