//go:build !linux

package channel

import (
	"errors"
	"net"
)

// checkPeer: the channel is Linux-only (Open refuses elsewhere).
func checkPeer(c *net.UnixConn) error { return errors.New("the exec channel needs a Linux host") }
