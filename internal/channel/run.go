package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// One command on a Conn: sent, its output delivered, its input fed within
// its window.

// Run runs one command and waits for it. When ctx ends first, the
// command's processes are killed in the sandbox and Result.Interrupted is
// set. Errors: ErrNotDelivered (never sent) or *BrokenError (may have run).
func (c *Conn) Run(ctx context.Context, req Request) (Result, error) {
	if time.Since(time.Unix(0, c.heard.Load())) > c.quiet {
		// Quiet for a while: a paused or frozen sandbox would take the
		// command and never answer. Ask first.
		if err := c.Ping(ctx, c.pingWait); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
		}
	}
	s := &cstream{out: wire.NewQueue(wire.Window), in: wire.NewFlow(wire.InputWindow), exit: make(chan wire.Exit, 1), broken: make(chan struct{}),
		delivered: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	c.next++
	id := c.next
	stdout, stderr := req.Stdout, req.Stderr
	s.deliver = func() {
		go func() { defer close(s.delivered); c.deliver(id, s, stdout, stderr) }()
	}
	c.streams[id] = s
	c.mu.Unlock()
	req.Start.Stdin = req.Stdin != nil
	if err := c.w.WriteJSON(wire.TStart, id, req.Start); err != nil {
		// One write holds the whole frame: a failed one never started
		// anything (a cut frame is a protocol error to the agent).
		c.fail(err)
		return Result{}, fmt.Errorf("%w: %v", ErrNotDelivered, err)
	}
	if req.Stdin != nil {
		go c.sendStdin(id, s, req.Stdin)
	}

	var res Result
	select {
	case e := <-s.exit:
		res.Code, res.Session, res.Failure = e.Code, e.Session, failure(e)
		if e.Error != "" {
			return res, &BrokenError{Err: errors.New(e.Error)}
		}
	case <-s.broken:
		return res, &BrokenError{Err: c.Err()}
	case <-ctx.Done():
		res.Interrupted = true
		_ = c.w.Write(wire.TSignal, id, []byte{byte(syscall.SIGKILL)})
		select {
		case e := <-s.exit:
			res.Code, res.Killed, res.Session, res.Failure = e.Code, e.Killed, e.Session, failure(e)
		case <-s.broken:
			return res, &BrokenError{Err: c.Err()}
		case <-time.After(KillWait):
			return res, &BrokenError{Err: fmt.Errorf("the agent did not confirm the kill within %s", KillWait)}
		}
	}
	if s.started { // the exit came after every output frame, and after this was set
		<-s.delivered
		res.StdoutBytes, res.StderrBytes = s.outN, s.errN
	}
	res.StdinBytes = s.inN.Load()
	return res, nil
}

// deliver writes the command's output in order and returns credit.
func (c *Conn) deliver(id uint32, s *cstream, stdout, stderr io.Writer) {
	var credits wire.Credits
	for {
		t, p, ok := s.out.PopRun()
		if !ok {
			return
		}
		w := stdout
		if t == wire.TStderr {
			w = stderr
			s.errN += int64(len(p))
		} else {
			s.outN += int64(len(p))
		}
		if w != nil {
			_, _ = w.Write(p) // a failing writer is the caller's to notice
		}
		if n := credits.Consumed(len(p)); n > 0 {
			_ = c.w.Write(wire.TCredit, id, wire.Credit(n))
		}
	}
}

// sendStdin streams r to the command within the window, then EOF.
func (c *Conn) sendStdin(id uint32, s *cstream, r io.Reader) {
	buf := make([]byte, wire.Chunk)
	for {
		n, err := r.Read(buf)
		for off := 0; off < n; {
			k := s.in.Take(n - off)
			if k == 0 {
				return // the command ended
			}
			if c.w.Write(wire.TStdin, id, buf[off:off+k]) != nil {
				return
			}
			s.inN.Add(int64(k))
			off += k
		}
		if err != nil {
			_ = c.w.Write(wire.TStdinEOF, id, nil)
			return
		}
	}
}

// connReadSize is how much a Conn reads of the engine client's output at
// once: several whole frames, so the client, writing into a pipe that is
// emptied in big pieces, blocks less (measured on docker, 300 MB: CPU of
// dockerd, its client and the holder 10–20 % lower than at 64 KiB; 1 MiB
// did no better).
const connReadSize = 256 << 10
