//go:build linux || darwin

package channel

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// checkPeer refuses a connection from (or to) another user: the kernel's
// record of the peer's uid (peerUID, per OS), never anything the peer says.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var uid int
	var cerr error
	if err := raw.Control(func(fd uintptr) { uid, cerr = peerUID(int(fd)) }); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if uid != os.Getuid() {
		return fmt.Errorf("peer uid %d is not this user's (%d)", uid, os.Getuid())
	}
	return nil
}
