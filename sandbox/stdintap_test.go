package sandbox

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// A try that took part of the input and was given up: the next gets the
// input from its first byte, then the rest, and the old try's reader
// yields no more.
func TestStdinTapReplaysWhatAnAbandonedTryTook(t *testing.T) {
	input := strings.Repeat("0123456789", 50_000) // 500 KB: several reads
	tap := newStdinTap(strings.NewReader(input))
	first := tap.next()
	buf := make([]byte, 128<<10)
	if n, err := first.Read(buf); n != len(buf) || err != nil {
		t.Fatalf("first try's read: %d %v", n, err)
	}
	second := tap.next()
	if n, err := first.Read(buf); n != 0 || !errors.Is(err, errAttemptOver) {
		t.Fatalf("the abandoned try read on: %d %v", n, err)
	}
	got, err := io.ReadAll(second)
	if err != nil || string(got) != input {
		t.Fatalf("second try got %d bytes (%v), want the whole %d", len(got), err, len(input))
	}
	if tap.lost() {
		t.Fatal("lost with 500 KB taken")
	}
	// And once more, from the start, after the end was seen.
	got, err = io.ReadAll(tap.plain())
	if err != nil || string(got) != input {
		t.Fatalf("third try got %d bytes (%v)", len(got), err)
	}
}

// A read of the caller's reader still under way when the try is given up
// (a terminal waiting for a line): its bytes go to the next try, which
// waits for them before it reads on.
func TestStdinTapHandsAnInFlightReadToTheNextTry(t *testing.T) {
	pr, pw := io.Pipe()
	tap := newStdinTap(pr)
	first := tap.next()
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Read(make([]byte, 64))
		firstDone <- err
	}()
	// Wait until the first try is inside the pipe's Read.
	for deadline := time.Now().Add(10 * time.Second); ; {
		tap.mu.Lock()
		r := tap.reading
		tap.mu.Unlock()
		if r {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first try never started its read")
		}
		time.Sleep(time.Millisecond)
	}
	second := tap.next()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(second)
		got <- string(b)
	}()
	// Let the second try reach its read first (without the wait it would
	// read the pipe itself, beside the first, and get the lines out of
	// order); a slow machine only makes this test weaker, never red.
	time.Sleep(50 * time.Millisecond)
	if _, err := pw.Write([]byte("line one\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-firstDone; !errors.Is(err, errAttemptOver) {
		t.Fatalf("the abandoned try's read: %v, want errAttemptOver", err)
	}
	_, _ = pw.Write([]byte("line two\n"))
	pw.Close()
	if s := <-got; s != "line one\nline two\n" {
		t.Fatalf("second try got %q", s)
	}
}

// The plain path gets the caller's own reader (an *os.File stays a file
// for the engine client) when no try took anything of it.
func TestStdinTapPlainIsTheCallersReaderWhenUntouched(t *testing.T) {
	src := bytes.NewReader([]byte("abc"))
	tap := newStdinTap(src)
	_ = tap.next() // a try that read nothing (not delivered at once)
	if r := tap.plain(); r != io.Reader(src) {
		t.Fatalf("plain gave %T, want the caller's reader", r)
	}
	tap = newStdinTap(bytes.NewReader([]byte("abc")))
	_, _ = tap.next().Read(make([]byte, 1))
	got, _ := io.ReadAll(tap.plain())
	if string(got) != "abc" {
		t.Fatalf("plain after a try took a byte: %q", got)
	}
}

// Past what a tap keeps the input cannot be sent again: lost, and a new
// try's reader fails rather than give the command a hole.
func TestStdinTapPastItsBoundIsLost(t *testing.T) {
	tap := newStdinTap(io.LimitReader(zeros{}, tapKeep+1<<20))
	first := tap.next()
	if n, err := io.CopyBuffer(io.Discard, first, make([]byte, 1<<20)); n != tapKeep+1<<20 || err != nil {
		t.Fatalf("first try read %d (%v)", n, err)
	}
	if !tap.lost() {
		t.Fatal("not lost after more than tapKeep")
	}
	if _, err := tap.next().Read(make([]byte, 10)); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a new try read on: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
