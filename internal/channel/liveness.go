package channel

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// An agent's liveness: a quiet channel is pinged, and a stall is reported
// to the one who asked (OnStall) within the bounds below.

// bounds are a Conn's liveness bounds: QuietBefore, PingWait, FrameWait,
// AgentDeadAfter (tests use less).
type bounds struct{ quiet, pingWait, frameMax, deadAfter time.Duration }

// defaultBounds are the bounds of every Conn outside tests.
func defaultBounds() bounds { return bounds{QuietBefore, PingWait, FrameWait, AgentDeadAfter} }

// watch ends the channel when the agent stops half-way through a frame
// for longer than frameMax: the reader would wait forever, and every
// command behind it with it. It also keeps the agent's deadAfter promise:
// a ping every deadAfter/6, written aside (to an agent that reads nothing
// a write can block) and never more than one at a time.
func (c *Conn) watch() {
	tick := time.NewTicker(min(c.frameMax/4+time.Millisecond, c.deadAfter/12+time.Millisecond, time.Second))
	defer tick.Stop()
	var writing, checking atomic.Bool
	last := time.Now()
	var idleChecked time.Time // an idle channel's last stall check
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
			if c.deadAfter > 0 && time.Since(last) >= c.deadAfter/6 && !writing.Swap(true) {
				last = time.Now()
				go func() {
					defer writing.Store(false)
					if err := c.w.Write(wire.TPing, 0, make([]byte, 8)); err != nil {
						c.fail(err)
					}
				}()
			}
			// A command waits on a quiet agent, or an idle channel's
			// pings have gone unanswered twice (its sandbox may have died
			// with nothing running: a forward's listener, a holder).
			if f := c.onStall.Load(); f != nil && !checking.Load() {
				quiet := c.silent()
				waiting := quiet > c.quiet && c.waiting()
				// Idle: at most once every deadAfter/3 (a paused
				// sandbox's agent stays silent, and stays paused).
				idle := !waiting && c.deadAfter > 0 && quiet > c.deadAfter/3 && time.Since(idleChecked) > c.deadAfter/3
				if waiting || idle {
					if idle {
						idleChecked = time.Now()
					}
					checking.Store(true)
					go c.checkStall(*f, &checking)
				}
			}
			if t := c.rd.PartialSince(); !t.IsZero() && time.Since(t) > c.frameMax {
				c.fail(fmt.Errorf("the agent began a frame and did not finish it within %s", c.frameMax))
				if c.closer != nil {
					_ = c.closer.Close() // unblocks the reader
				}
				return
			}
		}
	}
}

// checkStall pings a quiet agent while a command waits on it, and calls
// onStall when it does not answer within pingWait.
func (c *Conn) checkStall(onStall func(context.Context), checking *atomic.Bool) {
	defer checking.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.Ping(ctx, c.pingWait); err != nil && c.Err() == nil && ctx.Err() == nil {
		// Not cancelled when the Conn closes meanwhile: an engine client
		// killed half-way through an unpause can leave the engine's record
		// and the container apart (podman 4.3: "paused" in its database,
		// thawed in runc, and then neither unpaused nor removable).
		onStall(context.WithoutCancel(ctx))
	}
}

// Ping checks that the agent answers within wait.
func (c *Conn) Ping(ctx context.Context, wait time.Duration) error {
	c.pingMu.Lock()
	c.pingSeq++
	seq := c.pingSeq
	ch := make(chan struct{})
	c.pings[seq] = ch
	c.pingMu.Unlock()
	defer func() {
		c.pingMu.Lock()
		delete(c.pings, seq)
		c.pingMu.Unlock()
	}()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	// Written aside: to an agent that reads nothing, even a write can
	// block once the pipes are full, and the bound must hold.
	go func() {
		if err := c.w.Write(wire.TPing, 0, b[:]); err != nil {
			c.fail(err)
		}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return fmt.Errorf("the agent did not answer within %s (is the sandbox paused or frozen?)", wait)
	}
}

// pong matches an answer to its Ping.
func (c *Conn) pong(p []byte) {
	if len(p) != 8 {
		return
	}
	c.pingMu.Lock()
	defer c.pingMu.Unlock()
	if ch, ok := c.pings[binary.BigEndian.Uint64(p)]; ok {
		close(ch)
		delete(c.pings, binary.BigEndian.Uint64(p))
	}
}

// silent is how long the agent has sent nothing.
func (c *Conn) silent() time.Duration { return time.Since(time.Unix(0, c.heard.Load())) }
