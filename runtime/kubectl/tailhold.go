package kubectl

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"
)

const terminatedPrefix = "command terminated with exit code "

// tailHold streams a command's stderr but holds back a line that may be
// kubectl's closing "command terminated with exit code N", which kubectl
// writes into the same stream: while a line could still be it, it waits;
// when more output follows, it was the command's and is released. At the
// end, finish drops it only when N is the status kubectl exited with.
// Everything else passes through as it comes (no line is delayed unless it
// begins with those words).
type tailHold struct {
	mu      sync.Mutex
	dst     io.Writer
	buf     []byte // held bytes: the start of a line that may be kubectl's
	midLine bool   // the current line is already being passed through
	err     error
}

func (h *tailHold) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return 0, h.err
	}
	h.buf = append(h.buf, p...)
	for len(h.buf) > 0 {
		nl := bytes.IndexByte(h.buf, '\n')
		if h.midLine {
			end := len(h.buf)
			if nl >= 0 {
				end = nl + 1
			}
			if !h.pass(end) {
				return 0, h.err
			}
			h.midLine = nl < 0
			continue
		}
		line := h.buf
		if nl >= 0 {
			line = h.buf[:nl]
		}
		if !mayBeTerminated(string(line), nl >= 0) {
			h.midLine = true
			continue
		}
		if nl < 0 || len(h.buf) == nl+1 {
			break // hold it: it may be kubectl's last line
		}
		if !h.pass(nl + 1) { // more came after it: the command's own
			return 0, h.err
		}
	}
	return len(p), nil
}

// pass writes the first n held bytes through.
func (h *tailHold) pass(n int) bool {
	if _, err := h.dst.Write(h.buf[:n]); err != nil {
		h.err = err
		return false
	}
	h.buf = h.buf[n:]
	return true
}

// finish ends the stream: a held line that is kubectl's report of status
// code is dropped, anything else held is written.
func (h *tailHold) finish(code int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil && len(h.buf) > 0 {
		line, complete := strings.CutSuffix(string(h.buf), "\n") // kubectl ends its line
		if n, ok := strings.CutPrefix(line, terminatedPrefix); !ok || !complete || n != strconv.Itoa(code) || code == 0 {
			_, h.err = h.dst.Write(h.buf)
		}
	}
	h.buf = nil
}

// mayBeTerminated reports whether line (complete when it ended in a
// newline) is, or may still become, "command terminated with exit code N".
func mayBeTerminated(line string, complete bool) bool {
	if len(line) <= len(terminatedPrefix) {
		return !complete && strings.HasPrefix(terminatedPrefix, line)
	}
	digits, ok := strings.CutPrefix(line, terminatedPrefix)
	if !ok || len(digits) > 3 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
