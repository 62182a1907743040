package channel

import "golang.org/x/sys/unix"

// peerUID is the peer's uid when it connected or listened (LOCAL_PEERCRED).
func peerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
