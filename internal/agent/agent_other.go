//go:build !linux

package agent

import (
	"errors"
	"io"
)

// Serve is only available on Linux, where sandboxes run.
func Serve(r io.Reader, w io.Writer, build string) error {
	return errors.New("the hsbx agent runs only on Linux")
}

// KillMarked is only available on Linux, where sandboxes run.
func KillMarked(marker string) int { return 0 }
