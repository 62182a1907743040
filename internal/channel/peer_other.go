//go:build !linux && !darwin

package channel

import (
	"errors"
	"net"
)

// checkPeer: no peer check is written for this OS (Windows has AF_UNIX but
// no peer credentials), so nothing is accepted or trusted: the CLI's
// holder does not run here (the Go package's in-process channel needs no
// socket).
func checkPeer(c *net.UnixConn) error {
	return errors.New("the exec channel's socket needs a Linux or macOS host (peer credentials)")
}
