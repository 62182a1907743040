//go:build unix

package channel

import (
	"context"
	"net"
	"os"
)

// maxSocketPath is the longest path a unix socket can be bound to: 108
// bytes of sun_path on Linux, 104 on macOS, less the terminating NUL.
const maxSocketPath = 103

// Listen makes the holder's socket at path (a stale one is replaced: the
// caller holds the socket's lock) readable by this user only.
func Listen(path string) (net.Listener, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(path, 0o600)
	return ln, nil
}

// dialSocket connects to the unix socket at path.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// keepSocketFile tells a listener that its socket file is no longer its
// own (another holder made a new one): closing must not remove it.
func keepSocketFile(ln net.Listener) {
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
}
