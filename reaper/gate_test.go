package reaper

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many goroutines hitting the gate at once sweep once (the seeds'
// double-checked lock), and a new process within the window does not sweep.
func TestGateOncePerProcessAndWindow(t *testing.T) {
	dir := t.TempDir()
	var sweeps atomic.Int32
	sweep := func(context.Context) error { sweeps.Add(1); return nil }
	g := &Gate{StateDir: dir, Window: time.Hour}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = g.Maybe(context.Background(), "default", sweep) }()
	}
	wg.Wait()
	if n := sweeps.Load(); n != 1 {
		t.Fatalf("%d sweeps from 32 goroutines, want 1", n)
	}
	// Another process (a new gate) within the window: no sweep.
	if ran, _ := (&Gate{StateDir: dir, Window: time.Hour}).Maybe(context.Background(), "default", sweep); ran {
		t.Errorf("swept again within the window")
	}
	// Another profile has its own window.
	if ran, _ := (&Gate{StateDir: dir, Window: time.Hour}).Maybe(context.Background(), "research", sweep); !ran {
		t.Errorf("another profile did not sweep")
	}
	// After the window: sweeps again.
	later := &Gate{StateDir: dir, Window: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	if ran, _ := later.Maybe(context.Background(), "default", sweep); !ran {
		t.Errorf("did not sweep after the window")
	}
}

func TestGateSweepErrorIsReturnedNotFatal(t *testing.T) {
	g := &Gate{StateDir: t.TempDir(), Window: time.Hour}
	ran, err := g.Maybe(context.Background(), "p", func(context.Context) error { return context.DeadlineExceeded })
	if !ran || err == nil {
		t.Fatalf("ran %v err %v", ran, err)
	}
	// and the process does not retry within itself
	if ran, _ := g.Maybe(context.Background(), "p", func(context.Context) error { return nil }); ran {
		t.Errorf("retried in the same process")
	}
}
