//go:build linux

package agent

import (
	"sync"

	"github.com/hsbx/hsbx/internal/wire"
)

// fwdQueue holds frames for a keeper until they are written to it. A
// run that its keeper did not take (NotDelivered) gives its frames back
// (requeue) for the next keeper: stdin never goes missing on a retry.
type fwdQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frames []wire.Frame
	bytes  int
	closed bool
	gen    int // the try whose writer may pop
}

func newFwdQueue() *fwdQueue {
	q := &fwdQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *fwdQueue) push(f wire.Frame) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if q.bytes+len(f.Payload) > 2*wire.InputWindow {
		return wire.ErrOverrun
	}
	f.Payload = append([]byte(nil), f.Payload...)
	q.frames = append(q.frames, f)
	q.bytes += len(f.Payload)
	q.cond.Signal()
	return nil
}

// pop takes the next frame for try gen's writer; false once the queue is
// closed or another try took over.
func (q *fwdQueue) pop(gen int) (wire.Frame, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.frames) == 0 && !q.closed && q.gen == gen {
		q.cond.Wait()
	}
	if q.closed || q.gen != gen {
		return wire.Frame{}, false
	}
	f := q.frames[0]
	q.frames = q.frames[1:]
	q.bytes -= len(f.Payload)
	return f, true
}

// try starts a try: the writers of earlier ones pop nothing more.
func (q *fwdQueue) try() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	q.cond.Broadcast()
	return q.gen
}

// requeue puts frames a keeper did not take back in front, in order.
func (q *fwdQueue) requeue(frames []wire.Frame) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(frames) == 0 {
		return
	}
	for _, f := range frames {
		q.bytes += len(f.Payload)
	}
	q.frames = append(append([]wire.Frame{}, frames...), q.frames...)
	q.cond.Broadcast()
}

func (q *fwdQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.frames = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *fwdQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}
