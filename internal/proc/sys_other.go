//go:build !linux

package proc

import (
	"os"
	"syscall"
)

// sysProcAttr: no parent-death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// maxRSSKB: not measured outside Linux.
func maxRSSKB(*os.ProcessState) int64 { return 0 }
