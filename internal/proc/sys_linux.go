package proc

import (
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr makes every child die with hsbx (the parent-death signal), so
// a SIGKILLed hsbx never leaves an engine client running under PID 1.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// maxRSSKB is a finished child's peak resident set size in KiB.
func maxRSSKB(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}

func detachedAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// closeInheritedOnExec marks every descriptor above stderr close-on-exec
// (Go opens its own that way; inherited ones may not be).
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// terminate asks a child to end (SIGTERM), for Cmd.Graceful.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
