//go:build !linux && !darwin && !windows

package channel

import (
	"errors"
	"net"
)

// checkPeer: no peer check is written for this OS, so nothing is
// accepted or trusted: the CLI's holder does not run here (the Go
// package's in-process channel needs no socket).
func checkPeer(c net.Conn) error {
	return errors.New("the exec channel's socket needs a Linux, macOS or Windows host (peer credentials)")
}
