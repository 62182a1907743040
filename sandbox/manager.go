// Package sandbox is hsbx's lifecycle: one long-lived, hardened container
// per (profile, task) key, shared by every process on every host that uses
// the engine.
//
// A Manager (New, or hsbx.Open's Client.Manager) works on one engine; its
// Sandbox(key, spec) is a cheap handle for one key, made from a Spec
// (DefaultSpec, then your changes). All state lives in the engine, so
// handles in different processes agree.
//
//   - Ensure attaches to the running sandbox, starts a stopped one or
//     creates it; concurrent Ensures, in any number of processes, end with
//     one container (the name is derived from the key, so the engine lets
//     one create win). Result says what happened, and Result.Drift names
//     the settings an existing sandbox was made with differently
//     (Spec.OnDrift: warn, recreate or refuse; Recreate on request).
//   - Exec runs a Command (argv, env values never on a command line,
//     stdin, a timeout that kills in the sandbox) and returns its exit
//     status; Output, CombinedOutput and Lines are the shortcuts. Warm, a
//     command costs one engine call, or none through the exec channel.
//   - Session(name).Run runs shell text in a named long-lived shell whose
//     cwd, variables and functions carry over.
//   - Copies (In, Out) move files with docker cp's meaning; Snapshots
//     (Take, Fork, Rollback) save the sandbox's files and make sandboxes
//     from them.
//   - The features hsbx's agent serves are packages of their own, each
//     one step from a handle: files.Of(sb), background.Of(sb),
//     forward.Run(ctx, sb, ...) (through Sandbox.Door).
//   - Stop keeps the sandbox's files; Down removes it (and, on Kubernetes,
//     its claim); Close ends what the handle holds (a per-process
//     sandbox: the sandbox itself).
//
// Errors are typed for errors.Is and errors.As: the runtime package's
// (ErrNotFound, ErrUnreachable, ...) and this package's (ErrForeignName,
// *SpecError, *InterruptedError, *DriftError, ...). The reaper package
// reclaims what crashed processes left behind.
package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/runtime"
)

// Config wires a Manager to its engine and host.
type Config struct {
	Runtime runtime.Runtime
	Logger  *slog.Logger // nil: discard
	// StateDir holds per-key persistent dirs (workspace, home) and the
	// in-use marks every process on the host must agree on; "" means the
	// CLI's, DefaultStateDir(Environ).
	StateDir string
	// CacheDir holds cached engine facts (rootless, cgroups, storage);
	// "" disables the cache.
	CacheDir string
	// Environ is the caller's environment (forwarded env values).
	Environ []string
	// Cwd is the caller's directory (mount_cwd_to_workspace).
	Cwd string
	// UID and GID are the caller's (run_as_host_user).
	UID, GID int
	// StopGrace is how long stop waits before killing (default 10s).
	StopGrace time.Duration
	// Warn receives one line per default left off (nil: logged).
	Warn func(string)
	// Remedies names what a user can do, in warnings and errors that say
	// it, in the caller's terms (nil: the Go package's, GoRemedy).
	Remedies func(Remedy, Key) string
	// OnColdStart runs after Ensure had to create or start a container
	// (never on the warm path): hsbx hangs the orphan sweep here. It must
	// not fail the caller; errors are its own to report.
	OnColdStart func(ctx context.Context)
	// PullTimeout bounds pulling an image the engine does not have, which
	// happens before the create that needs it (0: 10 minutes).
	PullTimeout time.Duration
	// OnPull, when set, is told that image must be pulled and returns where
	// the engine's progress goes (nil: nowhere). The CLI says so on stderr
	// and gives the engine its terminal, for its own progress display.
	OnPull func(image string) io.Writer
	// LivenessDelay is how long a command may stay silent before Exec
	// checks once that the engine still answers (default 10s; negative:
	// never check).
	LivenessDelay time.Duration
	// Channel sends commands in a running sandbox through the exec
	// channel to hsbx's agent in it, not an engine call each (see
	// ChannelStatus). A TTY, or a sandbox the agent cannot run in, takes
	// the plain path. The agent is the one hsbx carries for the engine's
	// platform (internal/agentbin), or Agent when set: a static Linux
	// build of hsbx or cmd/hsbx-agent.
	Channel bool
	Agent   string
	// Holders is the hsbx command's own wiring, not for a program
	// embedding the package: with Channel, it puts the channel in a holder
	// process behind a unix socket in Holders.Dir, shared by every hsbx
	// process, and the channel starts one after a plain exec. Zero (a
	// program's): each Sandbox holds its own channel until Close.
	Holders channel.Holders
	// CopyMaxBytes bounds the data one Copies.Out writes on the host (0: no
	// bound; the CLI's copy_max_size).
	CopyMaxBytes int64
	// CopyChannelMax: a copy of at most this many bytes into or out of a
	// sandbox whose exec channel is up, with an agent running as root,
	// goes through the agent (no engine call; a small copy in a third of
	// the engine cp's time) instead of the engine's cp. 0: never (the
	// CLI's copy_channel_max, 4m by default). The engine makes every other
	// copy, and any the agent hands back.
	CopyChannelMax int64
	// SharedPaths are host directories a remote engine's machine has too,
	// at the same paths (config shared_paths), added to what the runtime's
	// Location knows (podman machine's mounts).
	SharedPaths []string
	// NoRecord leaves commands out of the record of what ran: by default
	// every Exec, session run and file operation appends one line to
	// StateDir/ran.jsonl (internal/record; `hsbx history` shows it).
	NoRecord bool
	// SnapshotMaxBytes bounds what one Snapshot adds to its sandbox's
	// image (0: no bound; the CLI's snapshot_max_size).
	SnapshotMaxBytes int64
}

// DefaultStateDir is the hsbx command's state directory in environment
// env: $XDG_STATE_HOME/hsbx, or ~/.local/state/hsbx; on Windows without
// those, %LOCALAPPDATA%\hsbx\state ("" when no variable names a place).
func DefaultStateDir(env []string) string {
	return xdgDir(goruntime.GOOS, env, "XDG_STATE_HOME", ".local/state", "state")
}

// DefaultCacheDir is the hsbx command's cache directory: $XDG_CACHE_HOME/hsbx,
// or ~/.cache/hsbx; on Windows without those, %LOCALAPPDATA%\hsbx\cache.
func DefaultCacheDir(env []string) string {
	return xdgDir(goruntime.GOOS, env, "XDG_CACHE_HOME", ".cache", "cache")
}

// xdgDir is the XDG directory name names (or HOME/fallback) on goos; on
// Windows, where HOME is seldom set, %LOCALAPPDATA%\hsbx\windows.
func xdgDir(goos string, env []string, name, fallback, windows string) string {
	if d, _ := environ.Lookup(env, name); d != "" {
		return filepath.Join(d, "hsbx")
	}
	if goos == "windows" {
		if d, _ := environ.Lookup(env, "LOCALAPPDATA"); d != "" {
			return filepath.Join(d, "hsbx", windows)
		}
	}
	if h, _ := environ.Lookup(env, "HOME"); h != "" {
		return filepath.Join(h, fallback, "hsbx")
	}
	return ""
}

// Manager creates and finds sandboxes on one engine. It is safe for
// concurrent use.
type Manager struct {
	c      Config
	log    *slog.Logger
	hostMu sync.Mutex
	host   *engineHost
	plat   string // the engine's platform, once known (platform)

	endpoint func() string // a digest of the runtime's Endpoint, once

	recordWarn sync.Once // a record that could not be written, said once
}

// New returns a Manager.
func New(c Config) *Manager {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.StateDir == "" {
		env := c.Environ
		if env == nil {
			env = os.Environ()
		}
		c.StateDir = DefaultStateDir(env)
	}
	m := &Manager{c: c, log: c.Logger}
	m.endpoint = sync.OnceValue(func() string { return endpointDigest(m.c.Runtime) })
	if m.c.Warn == nil {
		m.c.Warn = func(s string) { m.log.Warn(s) }
	}
	if m.c.Remedies == nil {
		m.c.Remedies = GoRemedy
	}
	return m
}

func (m *Manager) coldStart(ctx context.Context) {
	if m.c.OnColdStart != nil {
		m.c.OnColdStart(ctx)
	}
}

// Runtime is the engine the manager drives.
func (m *Manager) Runtime() runtime.Runtime { return m.c.Runtime }

// beforeStartKey is the context key of WithBeforeStart's hook.
type beforeStartKey struct{}

// WithBeforeStart returns ctx carrying fn, which Sandbox.Exec calls (once
// or more; fn must be cheap once done) before it starts anything its
// caller would have to stop and clean up itself: an engine call, a
// process. A warm exec through a holder reads its state and hands the
// command to the holder first (a holder kills the command of a client
// that goes away), then calls it. The CLI waits there for its signal
// handlers, which are put in meanwhile. As net/http/httptrace does, the
// hook rides on the call's context: the one call that needs it gets it,
// and no configuration carries it.
func WithBeforeStart(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, beforeStartKey{}, fn)
}

// beforeStartOf is ctx's WithBeforeStart hook (nil: none).
func beforeStartOf(ctx context.Context) func() {
	fn, _ := ctx.Value(beforeStartKey{}).(func())
	return fn
}

// beforeStart calls ctx's WithBeforeStart hook, when it has one.
func beforeStart(ctx context.Context) {
	if fn := beforeStartOf(ctx); fn != nil {
		fn()
	}
}

func (m *Manager) getenv(k string) (string, bool) { return environ.Lookup(m.c.Environ, k) }

// Action says what Ensure did.
type Action string

// Ensure's outcomes.
const (
	Created Action = "created" // a new container
	Reused  Action = "reused"  // it was running
	Started Action = "started" // it was stopped (or paused) and is running again
)

// Result describes the sandbox after Ensure.
type Result struct {
	ID      string        `json:"id"`
	Name    string        `json:"name"`
	Profile string        `json:"profile"`
	Task    string        `json:"task"`
	State   runtime.State `json:"state"`
	Action  Action        `json:"action"`
	// Drift names the settings the sandbox was made from that differ from
	// these (configuration keys; see DriftPolicy): it was kept as it is
	// (on_drift = warn, or recreate with a command running in it).
	Drift []string `json:"drift,omitempty"`
	// DriftWarned says this call gave the drift warning (Config.Warn); it
	// is given once per sandbox and settings on a host.
	DriftWarned bool `json:"-"`

	network string // "none" when the container is known air-gapped
	// ociRuntime is the runtime it runs under, as the engine names it.
	ociRuntime string
	// config and image are what it was made from (LabelConfig, image);
	// driftMsg is the drift warning for it.
	config, image, driftMsg string
}

// marker is the host's record of the verified container in r.
func (r Result) marker() marker {
	return marker{ID: r.ID, Network: r.network, Config: r.config, Image: r.image, OCIRuntime: r.ociRuntime}
}

// Sandbox is a handle on the sandbox for one key. Handles are cheap; all
// state lives in the engine, so handles in different processes agree.
type Sandbox struct {
	m    *Manager
	key  Key
	spec Spec

	mu             sync.Mutex
	id             string // verified once ensured
	name           string // derived, or per-process when not persisting
	ephemeral      bool   // per-process sandbox: removed by Close
	createdNetwork string // network posture of the container create made
	// storageSeen is when a create here first met the sandbox's name held
	// by no container it can inspect (podman's storage-only leftover).
	storageSeen time.Time
	// forceRecreate: this Ensure replaces what it finds (Recreate).
	forceRecreate bool
	// fromImage: a create makes the sandbox from this image (a
	// snapshot's id), not the spec's.
	fromImage string

	ch channelState
	// touched is when this handle last recorded a use (unix nanoseconds):
	// a program running many commands records one a second, not one each.
	touched atomic.Int64
}

// Sandbox returns the handle for key made to spec.
func (m *Manager) Sandbox(key Key, spec Spec) *Sandbox {
	s := &Sandbox{m: m, key: key, spec: spec, name: key.Name()}
	if !spec.PersistAcrossProcesses {
		s.ephemeral = true
		s.name = key.Name() + "-p" + randomHex(4)
	}
	return s
}

// Key is the sandbox's key.
func (s *Sandbox) Key() Key { return s.key }

// Name is the sandbox's container name.
func (s *Sandbox) Name() string { return s.name }

func (s *Sandbox) rt() runtime.Runtime { return s.m.c.Runtime }
func (s *Sandbox) stateDir() string    { return s.m.c.StateDir }

// endpointDigest names the manager's engine in state directory names.
func (m *Manager) endpointDigest() string {
	if m.endpoint == nil { // a Manager made without New
		return endpointDigest(m.c.Runtime)
	}
	return m.endpoint()
}

func endpointDigest(rt runtime.Runtime) string {
	sum := sha256.Sum256([]byte(rt.Endpoint()))
	return hex.EncodeToString(sum[:8])
}

// fresh is the Result for a container this handle just made (or holds).
func (s *Sandbox) fresh(id string, a Action, network string) Result {
	return Result{ID: id, Name: s.name, Profile: s.key.Profile, Task: s.key.Task, State: runtime.StateRunning, Action: a, network: network,
		config: s.configLabel(), image: s.spec.Image, ociRuntime: s.spec.OCIRuntime}
}

func (s *Sandbox) result(c runtime.Container, a Action) Result {
	network := "any"
	if c.NetworkMode == "none" {
		network = "none"
		if c.Labels[egress.Label] != "" { // "": blanked in a snapshot's image
			network = "allow"
		}
	}
	return Result{ID: c.ID, Name: c.Name, Profile: s.key.Profile, Task: s.key.Task, State: c.State, Action: a, network: network,
		config: c.Labels[LabelConfig], image: c.Image, ociRuntime: c.OCIRuntime}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// execToken marks one command's processes (ExecIDVar): unique, not
// secret — the sandbox sees it in their environment anyway — so from the
// runtime's own generator, without crypto/rand's system call and set-up
// on every command (hsbx's warm exec pays once per process).
func execToken() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], mrand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], mrand.Uint32())
	return hex.EncodeToString(b[:])
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Remedy is something a user can do about what a warning or an error
// says; Config.Remedies names it in the caller's terms.
type Remedy int

const (
	// RemedyRecreate replaces the key's sandbox with one made from the
	// present settings.
	RemedyRecreate Remedy = iota + 1
	// RemedyDown removes the key's sandbox.
	RemedyDown
	// RemedyUp makes the key's sandbox.
	RemedyUp
)

// GoRemedy names r for a Go program: the method that does it.
func GoRemedy(r Remedy, _ Key) string {
	switch r {
	case RemedyRecreate:
		return "Sandbox.Recreate"
	case RemedyDown:
		return "Sandbox.Down"
	case RemedyUp:
		return "Sandbox.Ensure"
	}
	return ""
}
