//go:build !linux && !darwin && !windows

package privdir

import (
	"errors"
	"os"
)

// Open makes (when asked) and opens path. On this OS ownership is not
// checked: its directories are guarded by ACLs hsbx does not read, and
// hsbx's exec channel (which keeps sockets there) is off here.
func Open(path string, o Options) (*Dir, error) {
	if path == "" {
		return nil, errors.New("no directory given")
	}
	if o.Create {
		mode := o.Mode.Perm()
		if mode == 0 {
			mode = 0o700
		}
		if err := os.MkdirAll(path, mode); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &Dir{f: f, path: path}, nil
}

// OpenFile is os.OpenFile on this OS.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag, perm)
}

// TryLock is not available on this OS (the exec channel is off here).
func TryLock(path string) (release func(), ok bool, err error) {
	return nil, false, errors.New("file locks for the exec channel need Linux or macOS")
}
