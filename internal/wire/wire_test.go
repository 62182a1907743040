package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// FuzzReader: any byte stream either yields well-formed frames (bounded,
// known types) or an error; it never panics or allocates past the bound,
// and a frame read back writes out to the same bytes.
func FuzzReader(f *testing.F) {
	var seed bytes.Buffer
	w := NewWriter(&seed)
	_ = w.WriteJSON(THello, 0, Hello{Proto: Proto})
	_ = w.Write(TStdout, 7, []byte("data\x00\xff"))
	_ = w.Write(TCredit, 7, Credit(5))
	f.Add(seed.Bytes())
	f.Add([]byte{1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{99, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Half the inputs through a pooled reader, each payload released
		// once written back: reuse must not change what is read.
		pool := len(b)%2 == 1
		r := NewReader(bytes.NewReader(b))
		if pool {
			r.PoolPayloads()
		}
		var out bytes.Buffer
		w := NewWriter(&out)
		consumed := 0
		for {
			fr, err := r.Read()
			if err != nil {
				if errors.Is(err, io.EOF) && consumed != len(b) {
					t.Fatalf("clean EOF after %d of %d bytes", consumed, len(b))
				}
				break
			}
			if fr.Type == 0 || fr.Type > maxType || len(fr.Payload) > MaxPayload {
				t.Fatalf("accepted frame %v with %d bytes", fr.Type, len(fr.Payload))
			}
			if err := w.Write(fr.Type, fr.Stream, fr.Payload); err != nil {
				t.Fatal(err)
			}
			consumed += headerLen + len(fr.Payload)
			if fr.Type == TCredit {
				_, _ = ParseCredit(fr.Payload)
			}
			if pool {
				Release(fr.Payload)
			}
		}
		if !bytes.Equal(out.Bytes(), b[:min(consumed, len(b))]) {
			t.Fatal("frames read do not write back to the same bytes")
		}
	})
}

// A peer that overruns its window is an error, not unbounded memory: the
// output window for output, the (larger) input window for input.
func TestQueueRefusesOverrun(t *testing.T) {
	for _, window := range []int{Window, InputWindow} {
		q := NewQueue(window)
		for sent := 0; sent < window; sent += Chunk {
			if err := q.Push(TStdout, make([]byte, Chunk)); err != nil {
				t.Fatalf("window %d: %v after %d bytes", window, err, sent)
			}
		}
		if err := q.Push(TStdout, []byte{1}); !errors.Is(err, ErrOverrun) {
			t.Fatalf("window %d: got %v, want ErrOverrun", window, err)
		}
		f := NewFlow(window)
		if got := f.Take(window + 1); got != window {
			t.Fatalf("window %d: took %d", window, got)
		}
		if err := f.Give(window); err != nil {
			t.Fatalf("window %d: credit of the whole window refused: %v", window, err)
		}
		if err := f.Give(1); err == nil {
			t.Fatalf("window %d: credit beyond the window accepted", window)
		}
	}
	if Window >= InputWindow {
		t.Fatalf("the input window (%d) is meant to be the larger", InputWindow)
	}
	if _, err := ParseCredit(Credit(InputWindow)); err != nil {
		t.Fatalf("a whole input window of credit: %v", err)
	}
	if _, err := ParseCredit(Credit(InputWindow + 1)); err == nil {
		t.Fatal("credit beyond every window accepted")
	}
}

// PopRun joins the chunks of one type queued back to back, never across a
// change of stream type and never past Chunk, so order is kept.
func TestPopRunJoinsSameType(t *testing.T) {
	q := NewQueue(Window)
	for _, c := range []struct {
		t Type
		s string
	}{{TStdout, "a"}, {TStdout, "b"}, {TStderr, "E"}, {TStdout, "c"}} {
		if err := q.Push(c.t, []byte(c.s)); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte{'x'}, Chunk)
	_ = q.Push(TStdout, big)
	q.End()
	var got []string
	for {
		ty, p, ok := q.PopRun()
		if !ok {
			break
		}
		got = append(got, ty.String()+":"+string(p[:min(len(p), 3)])+":"+string(rune('0'+len(p)/Chunk)))
	}
	want := []string{"stdout:ab:0", "stderr:E:0", "stdout:c:0", "stdout:xxx:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Big data frames of a pooled reader reuse released payloads, and that
// reuse never touches a payload still queued: frames of every size,
// pushed into a queue as the agent does while a consumer joins, writes
// and releases them concurrently, come out byte for byte.
func TestPooledPayloadsSurviveReuse(t *testing.T) {
	var stream, want bytes.Buffer
	w := NewWriter(&stream)
	sizes := []int{1, pooledMin - 1, pooledMin, Chunk, 3000, Chunk - 7, pooledMin + 1, 0}
	for i := 0; i < 400; i++ {
		n := sizes[i%len(sizes)]
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(i*31 + j*7 + j>>9)
		}
		if n == 0 {
			_ = w.Write(TCredit, 1, Credit(5)) // not data: not pooled, not queued
			continue
		}
		_ = w.Write(TStdin, 1, p)
		want.Write(p)
	}
	r := NewReader(bytes.NewReader(stream.Bytes())).PoolPayloads()
	q := NewQueue(1 << 30)
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, p, ok := q.PopRun()
			if !ok {
				return
			}
			got.Write(p)
			Release(p)
		}
	}()
	pooledSeen := 0
	for {
		f, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != TStdin {
			continue
		}
		switch n := len(f.Payload); {
		case n >= pooledMin && cap(f.Payload) != Chunk:
			t.Fatalf("a %d-byte data payload is not from the pool (cap %d)", n, cap(f.Payload))
		case n < pooledMin && cap(f.Payload) != n:
			t.Fatalf("a %d-byte payload took a pool buffer (cap %d)", n, cap(f.Payload))
		case n >= pooledMin:
			pooledSeen++
		}
		if err := q.Push(f.Type, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	q.End()
	<-done
	if pooledSeen == 0 {
		t.Fatal("no payload came from the pool")
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("%d bytes out of %d in; first difference at %d", got.Len(), want.Len(), firstDiff(got.Bytes(), want.Bytes()))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Credit goes back in batches: nothing until CreditBatch bytes were
// consumed, then all of them at once.
func TestCreditsBatch(t *testing.T) {
	var c Credits
	total, sent := 0, 0
	for i := 0; i < 100; i++ {
		total += 10 << 10
		sent += c.Consumed(10 << 10)
		if total-sent >= CreditBatch {
			t.Fatalf("holding %d bytes of credit, batch is %d", total-sent, CreditBatch)
		}
	}
	if sent == 0 || sent%(10<<10) != 0 {
		t.Fatalf("sent %d", sent)
	}
}

// Gather waits before the read that follows a streaming one, and only
// then; the bytes are those of the reader underneath.
func TestGatherWaitsOnlyWhileStreaming(t *testing.T) {
	src := &stepReader{sizes: []int{10, 2 << 10, 2 << 10, 10}}
	r := Gather(src)
	buf := make([]byte, 64<<10)
	var waited []bool
	for {
		start := time.Now()
		n, err := r.Read(buf)
		waited = append(waited, time.Since(start) >= gatherFor)
		if err != nil || n == 0 {
			break
		}
	}
	want := []bool{false, false, true, true, false}
	if fmt.Sprint(waited) != fmt.Sprint(want) {
		t.Fatalf("waited %v, want %v", waited, want)
	}
}

type stepReader struct{ sizes []int }

func (s *stepReader) Read(p []byte) (int, error) {
	if len(s.sizes) == 0 {
		return 0, io.EOF
	}
	n := s.sizes[0]
	s.sizes = s.sizes[1:]
	return n, nil
}
