package agent

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threads is this process's thread count (/proc/self/status).
func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// The threads spareThreads makes are there when it returns and stay once
// idle: what a long-lived agent process has when its sandbox has no
// process left to give.
func TestSpareThreadsAreKept(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	before := threads(t)
	want := before + 3
	spareThreads(want)
	if got := threads(t); got < want+1 {
		t.Fatalf("%d threads after spareThreads(%d) (%d before), want at least %d", got, want, before, want+1)
	}
	time.Sleep(300 * time.Millisecond) // sysmon's idle checks come and go
	if got := threads(t); got < want+1 {
		t.Fatalf("%d threads a moment after spareThreads(%d), want them kept", got, want)
	}
}
