package agent

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// The agent's stdout (a pipe the engine reads a few KiB at a time) is
// grown, so a frame is written without waiting for the engine's reader
// (measured on docker: 300 MB of output took 1.27× the raw exec's time
// with the default 64 KiB, 1.05–1.14× with 1 MiB).
func TestServeGrowsItsOutputPipe(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	before, err := unix.FcntlInt(outW.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(inR, outW, "test") }()
	buf := make([]byte, 64)
	if _, err := outR.Read(buf); err != nil { // the hello: Serve is past its set-up
		t.Fatal(err)
	}
	after, err := unix.FcntlInt(outW.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if after < 1<<20 || after <= before {
		t.Errorf("the agent's output pipe holds %d bytes (was %d), want 1 MiB", after, before)
	}
}
