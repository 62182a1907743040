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
	for _, c := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 3", 3}, {"exit 255", 255}, {"kill -TERM $$", 143}, {"kill -KILL $$", 137}, {"sleep 0.2; exit 7", 7}} {
		for _, pidfd := range []bool{true, false} {
			p, err := spawn(sh, []string{"sh", "-c", c.script}, "", os.Environ(), null, null, null)
			if err != nil {
				t.Fatal(err)
			}
			if pidfd && p.pidfd == nil {
				t.Log("this kernel gives no pidfd: only the blocking wait is tried")
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
	if _, err := spawn("/no/such/program", []string{"x"}, "", nil, null, null, null); !os.IsNotExist(err) {
		t.Errorf("a missing program: %v, want not-exist", err)
	}
}
