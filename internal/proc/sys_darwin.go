package proc

import (
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr: macOS has no parent-death signal; a child outlives a
// SIGKILLed hsbx until its own timeout ends it.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// maxRSSKB is a finished child's peak resident set size in KiB (macOS
// reports bytes).
func maxRSSKB(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss / 1024
	}
	return 0
}

// detachedAttr: the exec channel's holder leaves hsbx's session.
func detachedAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// closeInheritedOnExec marks every descriptor above stderr close-on-exec
// (Go opens its own that way; inherited ones may not be).
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/dev/fd")
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
