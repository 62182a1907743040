// Package filelock is hsbx's one way to take an advisory lock on a file,
// shared or exclusive, on every OS hsbx builds for (github.com/gofrs/flock:
// flock(2) on Unix, LockFileEx on Windows). The kernel drops a lock when
// its holder dies, even by SIGKILL, so a stale file never holds anything.
package filelock

import (
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

func open(path string) (*flock.Flock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return flock.New(path, flock.SetPermissions(0o644)), nil
}

// Shared waits for a shared lock on path (made if missing). release drops it.
func Shared(path string) (release func(), err error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	if err := f.RLock(); err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// Exclusive waits for an exclusive lock on path (made if missing).
func Exclusive(path string) (release func(), err error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	if err := f.Lock(); err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// TryExclusive takes an exclusive lock on path without waiting: ok is
// false when another holder has it (shared or exclusive).
func TryExclusive(path string) (release func(), ok bool, err error) {
	f, err := open(path)
	if err != nil {
		return nil, false, err
	}
	ok, err = f.TryLock()
	if err != nil || !ok {
		_ = f.Close()
		return nil, false, err
	}
	return func() { _ = f.Close() }, true, nil
}
