//go:build !linux && !darwin && !windows

package proc

import (
	"os"
	"syscall"
)

// sysProcAttr: no parent-death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// maxRSSKB: not measured outside Linux.
func maxRSSKB(*os.ProcessState) int64 { return 0 }

// detachedAttr: the exec channel's holder runs only on Linux.
func detachedAttr() *syscall.SysProcAttr { return nil }

func closeInheritedOnExec() {}

// terminate: Windows has no SIGTERM to send; the child is killed.
func terminate(p *os.Process) error { return p.Kill() }
