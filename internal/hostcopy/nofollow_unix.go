//go:build !windows

package hostcopy

import "syscall"

// noFollow opens a file without following a link at its name.
const noFollow = syscall.O_NOFOLLOW
