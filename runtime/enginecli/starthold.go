package enginecli

import (
	"bytes"
	"io"
	"strings"
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
	// user: the exec asked for a user, so the engine's refusal of it
	// ("unable to find user X: ...", NoUserLine) is held too: userLine,
	// and refused once finish has taken it.
	user     bool
	userLine string
	refused  string
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
	case (h.failure != nil || h.userLine != "") && len(h.buf) <= startHoldMax:
		return len(p), nil // more after the line: released at the end
	case h.failure != nil || h.userLine != "":
	case nl >= 0:
		if f, ok := startfail.Parse(string(h.buf[:nl])); ok {
			h.failure = &f
			return len(p), nil
		}
		if h.user && NoUserLine(string(h.buf[:nl])) {
			h.userLine = string(h.buf[:nl])
			return len(p), nil
		}
	case len(h.buf) <= startHoldMax && (startfail.MayBegin(h.buf) || h.user && mayBeginNoUser(h.buf)):
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
	if h.userLine != "" && (code == 126 || code == 255) && bytes.IndexByte(h.buf, '\n') == len(h.buf)-1 {
		h.refused = strings.TrimPrefix(strings.TrimSpace(h.userLine), "Error: ")
		return nil // held until the engine is asked (giveBack)
	}
	_ = h.release()
	return nil
}

// giveBack writes out what finish held as a refusal of the user, which
// the engine says was not one (the command's own words).
func (h *startHold) giveBack() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused = ""
	return h.release()
}

// mayBeginNoUser reports whether b may still begin the engines' refusal
// of a user (NoUserLine).
func mayBeginNoUser(b []byte) bool {
	for _, p := range []string{"unable to find ", "Error: unable to find "} {
		if bytes.HasPrefix([]byte(p), b) || bytes.HasPrefix(b, []byte(p)) {
			return true
		}
	}
	return false
}
