package enginecli

import (
	"bytes"
	"io"
	"sync"
)

// HoldWriter streams a command's stderr, except that a first line which
// looks like the engine's own error (exec on a missing container, daemon
// down) is held back until the exit status says whose it was: the engine's
// message goes into the returned error instead of being printed twice; the
// command's own output is released unchanged.
type HoldWriter struct {
	mu      sync.Mutex
	dst     io.Writer
	isEng   func(line string) bool
	buf     bytes.Buffer
	passing bool
}

const holdMax = 64 << 10

// NewHoldWriter holds back a first line of stderr for which isEng (the
// engine's own words?) is true, writing everything else to dst.
func NewHoldWriter(dst io.Writer, isEng func(line string) bool) *HoldWriter {
	return &HoldWriter{dst: dst, isEng: isEng}
}

func (h *HoldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passing {
		return h.dst.Write(p)
	}
	h.buf.Write(p)
	b := h.buf.Bytes()
	nl := bytes.IndexByte(b, '\n')
	if (nl >= 0 && !h.isEng(string(b[:nl]))) || h.buf.Len() > holdMax {
		h.passing = true
		if _, err := h.dst.Write(b); err != nil {
			return 0, err
		}
		h.buf.Reset()
	}
	return len(p), nil
}

// Finish releases what was held unless it may be the engine's error; then
// it returns the held bytes, for the caller to deliver should the engine
// say the status was the command's own after all.
func (h *HoldWriter) Finish(engineError bool) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	var held []byte
	if engineError {
		held = bytes.Clone(h.buf.Bytes())
	} else if h.buf.Len() > 0 {
		_, _ = h.dst.Write(h.buf.Bytes())
	}
	h.buf.Reset()
	h.passing = true
	return held
}
