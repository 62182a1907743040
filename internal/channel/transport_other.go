//go:build !unix && !windows

package channel

import (
	"context"
	"errors"
	"net"
)

const maxSocketPath = 103

var errNoHolders = errors.New("the exec channel's holders need a Linux, macOS or Windows host")

// Listen: no holder runs on this OS.
func Listen(string) (net.Listener, error) { return nil, errNoHolders }

func dialSocket(context.Context, string) (net.Conn, error) { return nil, errNoHolders }

func keepSocketFile(net.Listener) {}
