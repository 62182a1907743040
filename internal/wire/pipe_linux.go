package wire

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is what GrowPipe asks for: room for several chunks while the
// reader gathers (the kernel's pipe-max-size, 1 MiB by default, caps it).
const pipeSize = 1 << 20

// GrowPipe enlarges the pipe f is either end of, so a fast writer does
// not stall while the reader gathers. Best effort. (Not through Fd, which
// would make the pipe blocking: closing it would no longer end a read.)
func GrowPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}
