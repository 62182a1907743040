package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The sandbox's process limit (pids_limit) counts every task in it: its
// commands' processes and threads, and hsbx's own (the agent and the
// session server are Go programs, whose runtime dies when it cannot make
// a thread it needs). So hsbx keeps some of the limit for itself: a new
// session's shell is refused with sessionReserve tasks left, a command
// with commandReserve, each as the sandbox being out of processes — never
// a crash of what serves the sandbox's other commands and sessions.
const (
	sessionReserve = 16
	commandReserve = 6
)

// pidsFiles are where a sandbox reads its cgroup's limit and use: cgroups
// v2, then v1.
var pidsFiles = [][2]string{
	{"/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids.current"},
	{"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids/pids.current"},
}

// pidsUse is the sandbox's process limit and use; ok false when it has no
// limit or does not say.
func pidsUse() (limit, current int, ok bool) {
	for _, f := range pidsFiles {
		mb, err1 := os.ReadFile(f[0])
		cb, err2 := os.ReadFile(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		m, err1 := strconv.Atoi(strings.TrimSpace(string(mb)))
		c, err2 := strconv.Atoi(strings.TrimSpace(string(cb)))
		if err1 != nil || err2 != nil { // "max": no limit
			return 0, 0, false
		}
		return m, c, true
	}
	return 0, 0, false
}

// keepRoom is an error wrapping EAGAIN when fewer than reserve of the
// sandbox's processes are left.
func keepRoom(reserve int, what string) error {
	limit, cur, ok := pidsUse()
	if !ok || limit-cur >= reserve {
		return nil
	}
	return fmt.Errorf("%s: the sandbox has %d of its %d processes in use (pids_limit), and hsbx keeps %d for its own: %w",
		what, cur, limit, reserve, syscall.EAGAIN)
}
