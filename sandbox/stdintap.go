package sandbox

import (
	"errors"
	"io"
	"sync"

	"github.com/hsbx/hsbx/internal/wire"
)

// stdinTap hands a command's stdin to one attempt after another: a try
// through the exec channel that provably never reached the agent (not
// delivered, or an agent gone before it was sent) may already have read
// part of the input and framed it for nobody. The tap keeps what it took
// from the caller's reader, so the next attempt — a new channel, or the
// plain path — gets the input from its first byte.
//
// At most tapKeep bytes are kept: a channel takes at most its input window
// (plus a chunk and the holder socket's buffers) before the agent
// answers, so a try that never reached the agent took less. Past it the
// input cannot be sent again (lost), and a later attempt is refused.
//
// An attempt's read of the caller's reader may still be under way when
// the next attempt starts (a terminal waiting for a line): the new attempt
// waits for it, and gets what it read, before it reads on.
type stdinTap struct {
	mu      sync.Mutex
	cond    *sync.Cond
	r       io.Reader
	kept    []byte // the first n bytes read from r, while !over
	n       int64  // bytes read from r so far
	over    bool   // more than tapKeep read: kept was dropped
	reading bool   // a Read of r is under way (the lock not held)
	err     error  // r's error, once seen (io.EOF at the end)
	gen     int    // the current attempt
}

// tapKeep bounds what a tap keeps (see stdinTap).
const tapKeep = 2 * wire.InputWindow

// errAttemptOver is what an abandoned attempt's reader returns: a later
// attempt has the input now.
var errAttemptOver = errors.New("this attempt at the command was given up; its input went to the next")

func newStdinTap(r io.Reader) *stdinTap {
	t := &stdinTap{r: r}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// next starts an attempt: its reader yields the input from the first
// byte; the previous attempt's reader yields no more.
func (t *stdinTap) next() io.Reader {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	return &tapReader{t: t, gen: t.gen}
}

// plain is next for the plain path: the caller's own reader when no try
// took anything of it (an *os.File then reaches the engine client as the
// file itself, a terminal as a terminal), else a reader from the first byte.
func (t *stdinTap) plain() io.Reader {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if t.n == 0 && !t.reading && t.err == nil {
		return t.r
	}
	return &tapReader{t: t, gen: t.gen}
}

// lost says whether a new attempt could no longer get the whole input.
func (t *stdinTap) lost() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.over
}

type tapReader struct {
	t   *stdinTap
	gen int
	pos int64
}

func (r *tapReader) Read(p []byte) (int, error) {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if r.gen != t.gen {
			return 0, errAttemptOver
		}
		if r.pos < t.n { // what an earlier attempt took: again
			if t.over {
				return 0, errors.New("the command's input was taken by an earlier attempt and not kept")
			}
			k := copy(p, t.kept[r.pos:])
			r.pos += int64(k)
			return k, nil
		}
		if !t.reading {
			break
		}
		t.cond.Wait() // an earlier attempt's read: its bytes are ours
	}
	if t.err != nil {
		return 0, t.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	t.reading = true
	t.mu.Unlock()
	n, err := t.r.Read(p)
	t.mu.Lock()
	t.reading = false
	t.cond.Broadcast()
	if n > 0 {
		if !t.over && int64(len(t.kept))+int64(n) > tapKeep {
			t.over, t.kept = true, nil
		}
		if !t.over {
			t.kept = append(t.kept, p[:n]...)
		}
		t.n += int64(n)
	}
	if err != nil {
		t.err = err
	}
	if r.gen != t.gen {
		// Given up while it read: the next attempt gets these bytes.
		return 0, errAttemptOver
	}
	r.pos += int64(n)
	return n, err
}
