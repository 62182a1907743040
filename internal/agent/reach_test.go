package agent

import (
	"net"
	"slices"
	"testing"
	"time"
)

// Unreachable returns the addresses that still answer after the wait,
// and returns as soon as none does: an answer that stops (a policy that
// applies late) counts as out of reach.
func TestUnreachable(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go func() {
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	if got := Unreachable(time.Second, []string{closedAddr}); len(got) != 0 {
		t.Errorf("a closed port: %v, want none", got)
	}
	start := time.Now()
	if got := Unreachable(600*time.Millisecond, []string{closedAddr, open.Addr().String()}); !slices.Equal(got, []string{open.Addr().String()}) {
		t.Errorf("one open: %v, want it", got)
	}
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Errorf("an answering address was given up on after %s, before the wait", d)
	}

	late, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		late.Close() // the policy applies
	}()
	go func() {
		for {
			c, err := late.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := Unreachable(10*time.Second, []string{late.Addr().String()}); len(got) != 0 {
		t.Errorf("an address that stops answering: %v, want none", got)
	}
}
