//go:build linux

package agent

import (
	"os"
	"os/exec"
	"testing"
)

// A command's status as the engines report it: its exit code, or 128+N
// for signal N — through the pidfd in the poller and without one (a
// kernel that gives none).
func TestChildExitStatus(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var sp spawner
	for _, c := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 3", 3}, {"exit 255", 255}, {"kill -TERM $$", 143}, {"kill -KILL $$", 137}, {"sleep 0.2; exit 7", 7}} {
		for _, pidfd := range []bool{true, false} {
			p, err := sp.spawn(sh, []string{"sh", "-c", c.script}, "", os.Environ(), nil, null, null, null)
			if err != nil {
				t.Fatal(err)
			}
			if !pidfd && p.pidfd != nil {
				p.pidfd.Close()
				p.pidfd = nil
			}
			if got := p.wait(); got != c.want {
				t.Errorf("%q (pidfd %v): status %d, want %d", c.script, pidfd, got, c.want)
			}
		}
	}
	if !sp.pidfds {
		t.Log("clone gives no pidfd here: only the blocking wait was tried")
	}
	if _, err := sp.spawn("/no/such/program", []string{"x"}, "", nil, nil, null, null, null); !os.IsNotExist(err) {
		t.Errorf("a missing program: %v, want not-exist", err)
	}
}

// Where clone gives no pidfd (qemu-user, old kernels), commands start
// without one and are waited for the blocking way.
func TestSpawnWithoutPidfds(t *testing.T) {
	var sp spawner
	sp.once.Do(func() {}) // as if the probe had failed
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	p, err := sp.spawn("/bin/sh", []string{"sh", "-c", "exit 5"}, "", nil, nil, null, null, null)
	if err != nil {
		t.Fatal(err)
	}
	if p.pidfd != nil {
		t.Error("a pidfd was asked for")
	}
	if got := p.wait(); got != 5 {
		t.Errorf("status %d, want 5", got)
	}
	if !clonePidfdWorks() {
		t.Log("this kernel gives no pidfd at clone")
	}
}
