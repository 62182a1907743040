package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Chunked input: what the agent's file-write mode reads, so that input cut
// short (hsbx killed, its holder's client gone, an engine client ending)
// is never taken for a whole file. Each chunk is a 4-byte big-endian
// length and that many bytes (at most ChunkedMax); a zero length ends the
// input. An end of the stream before that chunk is io.ErrUnexpectedEOF.

// ChunkedMax bounds one chunk of chunked input.
const ChunkedMax = 1 << 20

// Chunked reads r and gives it chunked; an error reading r ends the
// chunked stream without its end (the reader then sees it cut short).
func Chunked(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 4+64<<10)
		for {
			n, err := r.Read(buf[4:])
			if n > 0 {
				binary.BigEndian.PutUint32(buf, uint32(n))
				if _, werr := pw.Write(buf[:4+n]); werr != nil {
					return
				}
			}
			if errors.Is(err, io.EOF) {
				_, _ = pw.Write([]byte{0, 0, 0, 0})
				pw.Close()
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// Unchunked reads chunked input from r and gives its data, io.EOF only at
// its end chunk.
func Unchunked(r io.Reader) io.Reader { return &unchunker{r: r} }

type unchunker struct {
	r    io.Reader
	left uint32
	done bool
}

func (u *unchunker) Read(p []byte) (int, error) {
	if u.done {
		return 0, io.EOF
	}
	if u.left == 0 {
		var h [4]byte
		if _, err := io.ReadFull(u.r, h[:]); err != nil {
			return 0, io.ErrUnexpectedEOF
		}
		u.left = binary.BigEndian.Uint32(h[:])
		if u.left == 0 {
			u.done = true
			return 0, io.EOF
		}
		if u.left > ChunkedMax {
			return 0, fmt.Errorf("a chunk of %d bytes: over %d", u.left, ChunkedMax)
		}
	}
	if uint32(len(p)) > u.left {
		p = p[:u.left]
	}
	n, err := u.r.Read(p)
	u.left -= uint32(n)
	if err != nil && (u.left > 0 || errors.Is(err, io.EOF)) {
		if n > 0 {
			return n, nil // the next Read says it
		}
		return 0, io.ErrUnexpectedEOF
	}
	return n, nil
}
