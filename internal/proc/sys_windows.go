//go:build windows

package proc

import (
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

// sysProcAttr: Windows has no parent-death signal; an engine client
// outlives a killed hsbx until its own call ends (every call has a
// timeout).
func sysProcAttr() *syscall.SysProcAttr { return nil }

// maxRSSKB: not measured on Windows.
func maxRSSKB(*os.ProcessState) int64 { return 0 }

// detachedAttr: the exec channel's holder runs in a process group of its
// own with no console, so a Ctrl-C in hsbx's console never reaches it and
// closing that console does not end it.
func detachedAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP | windows.DETACHED_PROCESS, HideWindow: true}
}

// closeInheritedOnExec: Go passes a child only the handles it names.
func closeInheritedOnExec() {}

// terminate: Windows has no SIGTERM to send; the child is killed.
func terminate(p *os.Process) error { return p.Kill() }
