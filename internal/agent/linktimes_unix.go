//go:build unix

package agent

import (
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// linkTimes sets link name's own times (never its target's), through its
// directory opened under root.
func linkTimes(root *os.Root, name string, t time.Time) error {
	dir, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer dir.Close()
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(int(dir.Fd()), path.Base(name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
