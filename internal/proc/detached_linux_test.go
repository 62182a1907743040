package proc

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// A detached process inherits no descriptor but the null device's, even
// one this process inherited without close-on-exec (a `$(...)` pipe).
func TestStartDetachedInheritsNothing(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	syscall.SetNonblock(int(w.Fd()), false)
	// Clear close-on-exec, as for a descriptor inherited from a shell.
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), syscall.F_SETFD, 0); e != 0 {
		t.Fatal(e)
	}
	pid, err := StartDetached([]string{"/bin/sleep", "5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if target != os.DevNull {
			t.Errorf("fd %s -> %s inherited", e.Name(), target)
		}
	}
	if sid, _ := getsid(pid); sid != pid {
		t.Errorf("session %d, want its own (%d)", sid, pid)
	}
}

func getsid(pid int) (int, error) {
	s, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(s), nil
}
