package channel

import "syscall"

// peerUID is the connected peer's uid (SO_PEERCRED).
func peerUID(fd int) (int, error) {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
