package wire

import (
	"errors"
	"fmt"
	"sync"
)

// Credits gathers consumed bytes on the receiving side and says when to
// return them (CreditBatch at a time). Not safe for concurrent use: one
// consumer owns it.
type Credits struct{ pending int }

// Consumed adds n consumed bytes and returns how much credit to send now
// (0: keep gathering).
func (c *Credits) Consumed(n int) int {
	c.pending += n
	if c.pending < CreditBatch {
		return 0
	}
	n, c.pending = c.pending, 0
	return n
}

// Flow is one direction's send window: the sender takes credit before it
// sends data, the receiver's Credit frames give it back.
type Flow struct {
	mu     sync.Mutex
	cond   *sync.Cond
	avail  int
	size   int // the window
	closed bool
}

// NewFlow returns a window holding n bytes of credit (Window for output,
// InputWindow for input).
func NewFlow(n int) *Flow {
	f := &Flow{avail: n, size: n}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Take waits for credit and takes up to limit bytes of it; 0 once closed.
func (f *Flow) Take(limit int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.avail == 0 && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return 0
	}
	n := min(limit, f.avail)
	f.avail -= n
	return n
}

// Give returns n bytes of credit; more than the window is refused.
func (f *Flow) Give(n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.avail+n > f.size {
		return fmt.Errorf("peer returned more credit (%d) than it was given", f.avail+n)
	}
	f.avail += n
	f.cond.Broadcast()
	return nil
}

// Close wakes every waiter; Take returns 0 from then on.
func (f *Flow) Close() {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
}

// Queue is a FIFO of data chunks bounded by bytes: the receiving end of a
// Flow. Push never blocks; a peer that overruns its window is an error.
// Each chunk carries the frame type it came in (stdout or stderr), so one
// queue keeps their order.
type Queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks []chunk
	bytes  int
	limit  int // the sender's window
	eof    bool
	closed bool
}

type chunk struct {
	t Type
	p []byte
}

// NewQueue returns an empty queue for a sender whose window is limit
// bytes (Window for output, InputWindow for input).
func NewQueue(limit int) *Queue {
	q := &Queue{limit: limit}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// ErrOverrun says a peer sent more data than its window allowed.
var ErrOverrun = errors.New("peer sent more data than its window allows")

// Push appends a chunk of type t. The queue owns p from then on (PopRun
// releases what it joins).
func (q *Queue) Push(t Type, p []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes+len(p) > q.limit {
		return ErrOverrun
	}
	q.chunks = append(q.chunks, chunk{t, p})
	q.bytes += len(p)
	q.cond.Signal()
	return nil
}

// End marks the end of data: Pop returns what is queued, then ok false.
func (q *Queue) End() {
	q.mu.Lock()
	q.eof = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// PopRun is Pop, joined with the chunks of the same type queued right
// behind it (up to Chunk bytes in all): one write downstream for what
// arrived as several frames. The chunks joined are released; the caller
// owns p (and may Release it when done).
func (q *Queue) PopRun() (t Type, p []byte, ok bool) {
	t, p, ok = q.Pop()
	if !ok {
		return t, p, ok
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) > 0 && q.chunks[0].t == t && len(p)+len(q.chunks[0].p) <= Chunk {
		p = append(p, q.chunks[0].p...)
		q.bytes -= len(q.chunks[0].p)
		Release(q.chunks[0].p)
		q.chunks[0] = chunk{}
		q.chunks = q.chunks[1:]
	}
	return t, p, ok
}

// Pop waits for the next chunk; ok false at end of data or once closed.
func (q *Queue) Pop() (t Type, p []byte, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) == 0 && !q.eof && !q.closed {
		q.cond.Wait()
	}
	if q.closed || len(q.chunks) == 0 {
		return 0, nil, false
	}
	c := q.chunks[0]
	q.chunks[0] = chunk{}
	q.chunks = q.chunks[1:]
	q.bytes -= len(c.p)
	return c.t, c.p, true
}

// Close drops what is queued and ends every Pop.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.chunks = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}
