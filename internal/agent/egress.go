//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// The egress relay's inside half: with the sandbox's network `allow`, the
// sandbox has only loopback, and the agent listens on it for the proxy
// connections its processes make (the proxy variables point there). Each
// is announced to hsbx, which claims it as a stream of its own and applies
// the policy on the host. The agent decides nothing: it carries bytes.

// egressMax bounds the relay's connections at once (waiting to be
// claimed, or relayed): past it a new one is closed at once, so a process
// in the sandbox cannot make the host hold unbounded streams.
const egressMax = 512

// egress holds the connections accepted and not yet claimed.
type egress struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]*net.TCPConn
	open    atomic.Int64 // accepted and not yet closed
}

func (e *egress) put(c *net.TCPConn) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending == nil {
		e.pending = map[uint64]*net.TCPConn{}
	}
	e.next++
	e.pending[e.next] = c
	return e.next
}

func (e *egress) take(id uint64) *net.TCPConn {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.pending[id]
	delete(e.pending, id)
	return c
}

// startEgress answers an egress operation on stream id.
func (a *agent) startEgress(id uint32, st wire.Start) {
	s := &stream{id: id, out: wire.NewFlow(wire.Window), stdin: wire.NewQueue(wire.InputWindow),
		credit: func(n int) error { return a.w.Write(wire.TCredit, id, wire.Credit(n)) }}
	done := make(chan struct{})
	var once sync.Once
	s.onSignal = func() { once.Do(func() { close(done) }) }
	a.mu.Lock()
	a.streams[id] = s
	a.mu.Unlock()
	go func() {
		var exit wire.Exit
		switch st.Op {
		case wire.EgressOpListen:
			exit = a.egressListen(s, st.Script, done)
		default:
			exit = a.egressConn(s, st.Script, done)
		}
		s.stdin.Close()
		s.out.Close()
		a.mu.Lock()
		delete(a.streams, id)
		a.mu.Unlock()
		_ = a.w.WriteJSON(wire.TExit, id, exit)
	}()
}

func (a *agent) egressFail(id uint32, code int, err error) wire.Exit {
	_ = a.w.Write(wire.TStderr, id, []byte("hsbx: egress relay: "+err.Error()+"\n"))
	return wire.Exit{Code: code}
}

// egressListen accepts on addr (loopback only) until hsbx signals the
// stream or the agent ends.
func (a *agent) egressListen(s *stream, addr string, done <-chan struct{}) wire.Exit {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return a.egressFail(s.id, 2, fmt.Errorf("%q is not a loopback address", addr))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return a.egressFail(s.id, wire.EgressInUse, err)
		}
		return a.egressFail(s.id, 1, err)
	}
	go func() {
		<-done
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-done:
				return wire.Exit{}
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return a.egressFail(s.id, 1, err)
		}
		tc, ok := c.(*net.TCPConn)
		if !ok || a.eg.open.Load() >= egressMax {
			c.Close()
			continue
		}
		a.eg.open.Add(1)
		n := a.eg.put(tc)
		time.AfterFunc(wire.EgressClaimWait, func() {
			if c := a.eg.take(n); c != nil {
				c.Close()
				a.eg.open.Add(-1)
			}
		})
		line := []byte(strconv.FormatUint(n, 10) + "\n")
		if s.out.Take(len(line)) < len(line) || a.w.Write(wire.TStdout, s.id, line) != nil {
			if c := a.eg.take(n); c != nil {
				c.Close()
				a.eg.open.Add(-1)
			}
			return wire.Exit{}
		}
	}
}

// egressConn relays the announced connection id until both directions
// have ended.
func (a *agent) egressConn(s *stream, id string, done <-chan struct{}) wire.Exit {
	n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
	c := (*net.TCPConn)(nil)
	if err == nil {
		c = a.eg.take(n)
	}
	if c == nil {
		return a.egressFail(s.id, 1, fmt.Errorf("no connection %q waits to be claimed", id))
	}
	defer a.eg.open.Add(-1)
	relayed := make(chan struct{})
	defer close(relayed)
	go func() {
		select {
		case <-done:
			c.Close()
		case <-relayed:
		}
	}()
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		var credits wire.Credits
		for {
			_, p, ok := s.stdin.PopRun()
			if !ok {
				_ = c.CloseWrite()
				return
			}
			_, err := c.Write(p)
			size := len(p)
			wire.Release(p)
			if err != nil {
				s.stdin.Close()
				return
			}
			if k := credits.Consumed(size); k > 0 {
				_ = s.agentCredit(k)
			}
		}
	}()
	buf := make([]byte, wire.Chunk)
	for {
		k, err := c.Read(buf)
		for off := 0; off < k; {
			m := s.out.Take(k - off)
			if m == 0 {
				err = errors.New("closed")
				break
			}
			if a.w.Write(wire.TStdout, s.id, buf[off:off+m]) != nil {
				err = errors.New("closed")
				break
			}
			off += m
		}
		if err != nil {
			break
		}
	}
	// The sandbox's side will send no more: one stderr frame says so
	// (hsbx half-closes its destination), ahead of the exit.
	_ = a.w.Write(wire.TStderr, s.id, []byte(wire.EgressEOF))
	<-fed
	c.Close()
	return wire.Exit{}
}
