//go:build linux || darwin

package channel

import (
	"net"
	"strings"
	"testing"
)

// The peer check of this OS accepts this user's own connection, on both
// ends (crossuser_linux_test.go refuses another user's, where it can
// switch users).
func TestCheckPeerAcceptsThisUser(t *testing.T) {
	ln, sock := listenSocket(t, "p.sock")
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			err = checkPeer(c)
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := checkPeer(c); err != nil {
		t.Errorf("client's check of its listener: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Errorf("listener's check of its client: %v", err)
	}
}

func TestSocketPathFits(t *testing.T) {
	if err := SocketPathFits("/run/user/1000/hsbx"); err != nil {
		t.Errorf("a short directory: %v", err)
	}
	long := "/var/folders/zz/" + strings.Repeat("x", 70) + "/T/hsbx-501/hsbx"
	if err := SocketPathFits(long); err == nil || !strings.Contains(err.Error(), "TMPDIR") {
		t.Errorf("a directory too long for a socket: %v", err)
	}
}
