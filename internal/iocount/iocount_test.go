package iocount

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

type shortWriter struct{ max int }

func (w shortWriter) Write(p []byte) (int, error) {
	if len(p) > w.max {
		return w.max, errors.New("short")
	}
	return len(p), nil
}

// The counts are of the bytes that passed, a short write's too.
func TestCounts(t *testing.T) {
	r := &Reader{R: strings.NewReader("hello, world")}
	var b bytes.Buffer
	w := &Writer{W: &b}
	if _, err := io.Copy(w, r); err != nil || r.N != 12 || w.N != 12 || b.String() != "hello, world" {
		t.Fatalf("copy: %v, read %d, wrote %d, %q", err, r.N, w.N, b.String())
	}
	sw := &Writer{W: shortWriter{max: 3}}
	if n, err := sw.Write([]byte("abcdef")); n != 3 || err == nil || sw.N != 3 {
		t.Fatalf("short write: %d %v, counted %d", n, err, sw.N)
	}
}
