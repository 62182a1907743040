//go:build unix

package channel

import (
	"os"
	"syscall"
)

// canPassFiles: this system passes descriptors over a unix socket.
const canPassFiles = true

// rightsSpace is the control-message room for n passed descriptors.
func rightsSpace(n int) int { return syscall.CmsgSpace(n * 4) }

// parseRights turns the descriptors of an SCM_RIGHTS message into files,
// close-on-exec (Linux receives them so; other systems may not).
func parseRights(oob []byte) []*os.File {
	if len(oob) == 0 {
		return nil
	}
	msgs, _ := syscall.ParseSocketControlMessage(oob)
	var files []*os.File
	for _, m := range msgs {
		fds, _ := syscall.ParseUnixRights(&m)
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files
}

// unixRights is the SCM_RIGHTS message passing fds.
func unixRights(fds ...int) []byte { return syscall.UnixRights(fds...) }
