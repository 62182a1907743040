// Package keystate owns the directory this host keeps for each sandbox key
// under the state directory, <state dir>/sandboxes/<key hash>/, and names
// every file in it:
//
//	workspace/, home/    a persistent sandbox's /workspace and /root (bind-mounted)
//	last-use             its mtime: when an hsbx process last used the sandbox (the idle reaper)
//	in-use.lock          a shared flock each command holds while it runs; the kernel
//	                     drops it when the process dies, even by SIGKILL
//	drift-busy-<id>      drift's replacement of container id found a command running
//	engine-<digest>/     what this host knows of the key's sandbox on one engine
//	                     (runtime.Runtime.Endpoint's digest):
//	  container          the marker: the container it verified for the key
//	  warned-<what>      a warning given once
//	  sessions/<name>    the id of session name's shell
package keystate

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

// EngineDir is the key's directory for one engine ("" without a state dir).
func EngineDir(stateDir, keyHash, engineDigest string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(Dir(stateDir, keyHash), "engine-"+engineDigest)
}

// MarkerFile is the marker in an engine directory.
func MarkerFile(engineDir string) string { return filepath.Join(engineDir, "container") }

// WarnedFile records, in an engine directory, a warning given once.
func WarnedFile(engineDir, what string) string { return filepath.Join(engineDir, "warned-"+what) }

// SessionFile holds the id of session name's shell, in an engine directory.
func SessionFile(engineDir, name string) string {
	return filepath.Join(engineDir, "sessions", name)
}

// DriftBusyFile records that drift's replacement of container id found a
// command running in it.
func DriftBusyFile(stateDir, keyHash, id string) string {
	return filepath.Join(Dir(stateDir, keyHash), "drift-busy-"+id[:min(12, len(id))])
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

// TrySnapshot takes the key's snapshot lock without waiting: ok is false
// while another process of this host saves a snapshot of the sandbox.
func TrySnapshot(stateDir, keyHash string) (release func(), ok bool, err error) {
	return filelock.TryExclusive(filepath.Join(Dir(stateDir, keyHash), "snapshot.lock"))
}

func lockPath(stateDir, keyHash string) string {
	return filepath.Join(Dir(stateDir, keyHash), "in-use.lock")
}

// EgressLogFile is the key's network log (network = allow): every
// connection decision its relay made, one JSON object a line.
func EgressLogFile(stateDir, keyHash string) string {
	return filepath.Join(Dir(stateDir, keyHash), "egress.log")
}
