package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Chunked input reads back whole; cut anywhere before its end chunk it is
// io.ErrUnexpectedEOF, never a clean end; an input that failed is cut.
func TestChunked(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 20000) // several chunks
	var framed bytes.Buffer
	if _, err := io.Copy(&framed, Chunked(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(Unchunked(bytes.NewReader(framed.Bytes())))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d of %d bytes, %v", len(got), len(data), err)
	}
	for _, cut := range []int{0, 1, 3, 4, 5, 1000, framed.Len() - 4, framed.Len() - 1} {
		_, err := io.ReadAll(Unchunked(bytes.NewReader(framed.Bytes()[:cut])))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d of %d: %v, want ErrUnexpectedEOF", cut, framed.Len(), err)
		}
	}
	failing := io.MultiReader(bytes.NewReader(data[:100]), iotestErr{})
	var cutShort bytes.Buffer
	_, err = io.Copy(&cutShort, Chunked(failing))
	if err == nil {
		t.Fatal("a failed input read as whole")
	}
	if _, err := io.ReadAll(Unchunked(bytes.NewReader(cutShort.Bytes()))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a failed input: %v", err)
	}
	if _, err := io.ReadAll(Unchunked(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}))); err == nil {
		t.Error("a chunk over the bound was taken")
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("the client went away") }
