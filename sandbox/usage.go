package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Usage tracking for the idle reaper, on the host: each sandbox key has a
// directory under the state dir with
//
//   - last-use: its mtime is the last time an hsbx process used the sandbox;
//   - in-use.lock: every process holds a shared flock on it while it runs a
//     command there. The kernel drops the lock when the process dies, even
//     by SIGKILL, so a stale file never pins a sandbox.

func usageDir(stateDir, keyHash string) string {
	return filepath.Join(stateDir, "sandboxes", keyHash)
}

// touchLastUse records a use now (best effort).
func touchLastUse(stateDir, keyHash string) {
	if stateDir == "" {
		return
	}
	dir := usageDir(stateDir, keyHash)
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	p := filepath.Join(dir, "last-use")
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		if f, err := os.Create(p); err == nil {
			f.Close()
		}
	}
}

// holdInUse takes the shared in-use lock for the duration of a command; the
// returned func releases it. Failure to lock only loses idle protection.
func holdInUse(stateDir, keyHash string) func() {
	if stateDir == "" {
		return func() {}
	}
	dir := usageDir(stateDir, keyHash)
	if os.MkdirAll(dir, 0o755) != nil {
		return func() {}
	}
	f, err := os.OpenFile(filepath.Join(dir, "in-use.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_SH) != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing drops the lock
}

// LastUse is when an hsbx process last used the sandbox with keyHash on
// this host (ok false: never recorded here).
func LastUse(stateDir, keyHash string) (time.Time, bool) {
	st, err := os.Stat(filepath.Join(usageDir(stateDir, keyHash), "last-use"))
	if err != nil {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// LockIdle takes the in-use lock exclusively without waiting. ok is false
// when a live process is using the sandbox; otherwise the caller holds it
// (new commands wait) until release.
func LockIdle(stateDir, keyHash string) (release func(), ok bool) {
	dir := usageDir(stateDir, keyHash)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false
	}
	f, err := os.OpenFile(filepath.Join(dir, "in-use.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// The marker records that this host has seen the sandbox for a key (its
// container id). Without it, Ensure tries to create straight away — the
// derived name makes that safe, as a conflict falls back to the probe — so
// a cold `up` costs one engine call, like a raw `run`.

func markerPath(stateDir, keyHash string) string {
	return filepath.Join(usageDir(stateDir, keyHash), "container")
}

func hasMarker(stateDir, keyHash string) bool {
	if stateDir == "" {
		return true // no state: always probe first
	}
	_, err := os.Stat(markerPath(stateDir, keyHash))
	return err == nil
}

func writeMarker(stateDir, keyHash, id string) {
	if stateDir == "" {
		return
	}
	p := markerPath(stateDir, keyHash)
	if b, err := os.ReadFile(p); err == nil && string(b) == id {
		return
	}
	if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
		tmp := p + "." + strconv.Itoa(os.Getpid())
		if os.WriteFile(tmp, []byte(id), 0o644) == nil {
			_ = os.Rename(tmp, p)
		}
	}
}

func removeMarker(stateDir, keyHash string) {
	if stateDir != "" {
		_ = os.Remove(markerPath(stateDir, keyHash))
	}
}
