// Package usage is what each host records of its use of each sandbox, for
// the idle reaper and for hsbx's own decisions (a replacement waits for
// the commands that run): each sandbox key has a directory under the state
// dir with
//
//   - last-use: its mtime is the last time an hsbx process used the sandbox;
//   - in-use.lock: every process holds a shared flock on it while it runs a
//     command there. The kernel drops the lock when the process dies, even
//     by SIGKILL, so a stale file never pins a sandbox.
package usage

import (
	"os"
	"path/filepath"
	"time"

	"github.com/hsbx/hsbx/internal/filelock"
)

// Dir is the key's directory under the state dir.
func Dir(stateDir, keyHash string) string {
	return filepath.Join(stateDir, "sandboxes", keyHash)
}

// Touch records a use now (best effort).
func Touch(stateDir, keyHash string) {
	if stateDir != "" {
		TouchFile(filepath.Join(Dir(stateDir, keyHash), "last-use"))
	}
}

// TouchFile sets p's times to now, making it (and its directory) when
// missing (best effort).
func TouchFile(p string) {
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		if os.MkdirAll(filepath.Dir(p), 0o755) != nil {
			return
		}
		if f, err := os.Create(p); err == nil {
			_ = f.Close()
		}
	}
}

// Hold takes the shared in-use lock for the duration of a command; the
// returned func releases it. Failure to lock only loses idle protection.
func Hold(stateDir, keyHash string) func() {
	if stateDir == "" {
		return func() {}
	}
	release, err := filelock.Shared(lockPath(stateDir, keyHash))
	if err != nil {
		return func() {}
	}
	return release
}

// LastUse is when an hsbx process last used the sandbox with keyHash on
// this host (ok false: never recorded here).
func LastUse(stateDir, keyHash string) (time.Time, bool) {
	st, err := os.Stat(filepath.Join(Dir(stateDir, keyHash), "last-use"))
	if err != nil {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// LockIdle takes the in-use lock exclusively without waiting. ok is false
// when a live process is using the sandbox (or the lock cannot be taken);
// otherwise the caller holds it (new commands wait) until release.
func LockIdle(stateDir, keyHash string) (release func(), ok bool) {
	release, ok, err := TryIdle(stateDir, keyHash)
	return release, ok && err == nil
}

// TryIdle is LockIdle that tells a lock it could not take (err) from one
// that a live process holds (ok false, err nil).
func TryIdle(stateDir, keyHash string) (release func(), ok bool, err error) {
	return filelock.TryExclusive(lockPath(stateDir, keyHash))
}

func lockPath(stateDir, keyHash string) string {
	return filepath.Join(Dir(stateDir, keyHash), "in-use.lock")
}
