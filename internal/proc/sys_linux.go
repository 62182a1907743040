package proc

import "syscall"

// sysProcAttr makes every child die with hsbx (the parent-death signal), so
// a SIGKILLed hsbx never leaves an engine client running under PID 1.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
