package enginecli

import (
	"bytes"
	"io"
	"strings"
)

// errorLineFilter passes an engine's progress output through as it comes
// (bars redrawn with \r included) but drops the lines that begin with the
// engine's error prefix ("Error: "): hsbx reports the failure once, in its
// own message, with the engine's words. A line is held only while its
// first bytes may still be that prefix.
type errorLineFilter struct {
	dst     io.Writer
	prefix  string
	pending []byte // a line's first bytes, while they may be the prefix
	state   int    // lineStart, passing, dropping
}

const (
	lineStart = iota
	linePassing
	lineDropping
)

func newErrorLineFilter(dst io.Writer, prefix string) *errorLineFilter {
	return &errorLineFilter{dst: dst, prefix: prefix}
}

func (f *errorLineFilter) Write(p []byte) (int, error) {
	var out bytes.Buffer
	for _, b := range p {
		switch f.state {
		case lineStart:
			f.pending = append(f.pending, b)
			switch {
			case string(f.pending) == f.prefix:
				f.state, f.pending = lineDropping, nil
			case !strings.HasPrefix(f.prefix, string(f.pending)):
				out.Write(f.pending)
				f.pending = nil
				f.state = linePassing
				if b == '\n' || b == '\r' {
					f.state = lineStart
				}
			}
		case linePassing:
			out.WriteByte(b)
			if b == '\n' || b == '\r' {
				f.state = lineStart
			}
		case lineDropping:
			if b == '\n' {
				f.state = lineStart
			}
		}
	}
	if out.Len() > 0 {
		if _, err := f.dst.Write(out.Bytes()); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
