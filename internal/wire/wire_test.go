package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
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
		r := NewReader(bytes.NewReader(b))
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
		}
		if !bytes.Equal(out.Bytes(), b[:min(consumed, len(b))]) {
			t.Fatal("frames read do not write back to the same bytes")
		}
	})
}

// A peer that overruns its window is an error, not unbounded memory.
func TestQueueRefusesOverrun(t *testing.T) {
	q := NewQueue()
	if err := q.Push(TStdout, make([]byte, Window)); err != nil {
		t.Fatal(err)
	}
	if err := q.Push(TStdout, []byte{1}); !errors.Is(err, ErrOverrun) {
		t.Fatalf("got %v, want ErrOverrun", err)
	}
	f := NewFlow(Window)
	if err := f.Give(1); err == nil {
		t.Fatal("credit beyond the window accepted")
	}
}
