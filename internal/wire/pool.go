package wire

import "sync"

// The payloads of big data frames can come from a pool and go back to it
// once their consumer is done with them (Release), instead of one
// allocation per frame. At 100+ MB/s of input, the agent (whose collector
// runs at a quarter over its small live heap, to stay small) spent about
// a tenth of the transfer collecting those allocations (measured on
// docker and podman: 200 MB through `exec -i` took 10–15 % longer than
// with the collector held off).
//
// Only payloads of at least pooledMin bytes are pooled: a pooled buffer
// is Chunk bytes, so a queue of them holds at most twice the bytes its
// window allows.
const pooledMin = Chunk / 2

var payloads = sync.Pool{New: func() any { b := make([]byte, Chunk); return &b }}

// pooled says whether a payload of n bytes of type t comes from the pool.
func pooled(t Type, n int) bool {
	return (t == TStdin || t == TStdout || t == TStderr) && n >= pooledMin && n <= Chunk
}

func getPayload(n int) []byte { return (*payloads.Get().(*[]byte))[:n] }

// Release hands p, a frame's payload that its owner is done with, back
// for later frames of a pooled Reader (PoolPayloads). Nothing may use p
// afterwards. A payload that is not a pool's size is left to the
// collector.
func Release(p []byte) {
	if cap(p) != Chunk {
		return
	}
	p = p[:0]
	payloads.Put(&p)
}

// PoolPayloads makes Read take the payloads of big data frames from the
// pool; whoever consumes them should Release them (one that is not is
// collected as before). It returns r.
func (r *Reader) PoolPayloads() *Reader {
	r.pool = true
	return r
}
