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

// RunMode names no mode off Linux: the agent runs only in sandboxes.
func RunMode(args []string, build string) (code int, ok bool) { return 0, false }
