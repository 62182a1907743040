// Package sandbox is hsbx's lifecycle: one long-lived, hardened container
// per (profile, task) key, shared by every process. Ensure attaches to a
// running sandbox, starts a stopped one or creates it; creation is race-free
// because the container name is derived from the key, so the engine itself
// lets exactly one concurrent create win. Exec runs a command in it with one
// engine call when it is up. Stop, Down and Close tear down according to the
// mode (persist across processes, or one sandbox per process).
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// Config wires a Manager to its engine and host.
type Config struct {
	Runtime runtime.Runtime
	Logger  *slog.Logger // nil: discard
	// StateDir holds per-key persistent dirs (workspace, home);
	// conventionally $XDG_STATE_HOME/hsbx.
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
	// OnColdStart runs after Ensure had to create or start a container
	// (never on the warm path): hsbx hangs the orphan sweep here. It must
	// not fail the caller; errors are its own to report.
	OnColdStart func(ctx context.Context)
}

// Manager creates and finds sandboxes on one engine. It is safe for
// concurrent use.
type Manager struct {
	c      Config
	log    *slog.Logger
	hostMu sync.Mutex
	host   *Host
}

// New returns a Manager.
func New(c Config) *Manager {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	m := &Manager{c: c, log: c.Logger}
	if m.c.Warn == nil {
		m.c.Warn = func(s string) { m.log.Warn(s) }
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

func (m *Manager) getenv(k string) (string, bool) {
	for i := len(m.c.Environ) - 1; i >= 0; i-- {
		if name, v, ok := strings.Cut(m.c.Environ[i], "="); ok && name == k {
			return v, true
		}
	}
	return "", false
}

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
}

// Sandbox is a handle on the sandbox for one key. Handles are cheap; all
// state lives in the engine, so handles in different processes agree.
type Sandbox struct {
	m    *Manager
	key  Key
	spec Spec

	mu        sync.Mutex
	id        string // known once ensured
	name      string // derived, or per-process when not persisting
	ephemeral bool   // per-process sandbox: removed by Close
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

func (s *Sandbox) result(c runtime.Container, a Action) Result {
	return Result{ID: c.ID, Name: c.Name, Profile: s.key.Profile, Task: s.key.Task, State: c.State, Action: a}
}

// ErrForeignName means the derived container name is taken by a container
// hsbx did not create for this key; hsbx will not touch it.
var ErrForeignName = errors.New("container name taken by a container that is not this sandbox")

// Ensure makes the sandbox exist and run: attach if running (one engine
// call), unpause if paused, start if stopped (create a fresh one if start
// fails or it vanished), otherwise create. Concurrent Ensures for one key,
// in any number of processes, end with one container.
func (s *Sandbox) Ensure(ctx context.Context) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ephemeral {
		res, err := s.ensureEphemeral(ctx)
		if err == nil {
			s.m.coldStart(ctx)
		}
		return res, err
	}
	res, err := s.ensure(ctx)
	if err == nil {
		writeMarker(s.m.c.StateDir, s.key.Hash(), res.ID)
		touchLastUse(s.m.c.StateDir, s.key.Hash())
		if res.Action != Reused {
			s.m.coldStart(ctx)
		}
	}
	return res, err
}

// ensureBudget bounds how long Ensure keeps waiting for other processes
// that are creating or starting the same sandbox.
const ensureBudget = 90 * time.Second

// youngCreate is how long a "created" container is taken for another
// process's create in progress (run = create + start) rather than a leftover.
const youngCreate = 20 * time.Second

func (s *Sandbox) ensure(ctx context.Context) (Result, error) {
	deadline := time.Now().Add(ensureBudget)
	var lastErr error
	if !hasMarker(s.m.c.StateDir, s.key.Hash()) {
		// Never seen here: most likely it does not exist, so create at once
		// (one call, like a raw run). If it does exist, the name clashes and
		// the probe below attaches or starts it.
		id, err := s.create(ctx, s.name)
		switch {
		case err == nil:
			s.id = id
			return Result{ID: id, Name: s.name, Profile: s.key.Profile, Task: s.key.Task, State: runtime.StateRunning, Action: Created}, nil
		case !errors.Is(err, runtime.ErrNameInUse):
			return Result{}, err
		}
		lastErr = err
	}
	next := winner(lastErr) // the clash already inspected it: no need to list
	for attempt := 0; ; attempt++ {
		var c runtime.Container
		ok := next != nil
		if ok {
			c, next = *next, nil
		} else {
			if attempt > 0 {
				if time.Now().After(deadline) {
					return Result{}, fmt.Errorf("could not bring up sandbox %s: %w", s.name, lastErr)
				}
				if err := sleepCtx(ctx, backoff(attempt)); err != nil {
					return Result{}, err
				}
			}
			cs, err := s.m.c.Runtime.List(ctx, runtime.ListOptions{Labels: s.key.Filters()})
			if err != nil {
				return Result{}, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
			}
			c, ok = pick(s.key, cs)
		}
		if !ok {
			id, err := s.create(ctx, s.name)
			if errors.Is(err, runtime.ErrNameInUse) {
				lastErr = err
				next = winner(err)
				continue // another process is creating it: attach to theirs
			}
			if err != nil {
				return Result{}, err
			}
			s.id = id
			return Result{ID: id, Name: s.name, Profile: s.key.Profile, Task: s.key.Task, State: runtime.StateRunning, Action: Created}, nil
		}
		switch c.State {
		case runtime.StateRunning:
			s.id = c.ID
			return s.result(c, Reused), nil
		case runtime.StatePaused:
			if err := s.m.c.Runtime.Unpause(ctx, c.ID); err != nil {
				return Result{}, fmt.Errorf("sandbox %s is paused and could not be unpaused (unpause it, or `hsbx down` it): %w", c.Name, err)
			}
			s.id, c.State = c.ID, runtime.StateRunning
			return s.result(c, Started), nil
		case runtime.StateCreated, runtime.StateExited:
			if c.State == runtime.StateCreated && !c.Created.IsZero() && time.Since(c.Created) < youngCreate && time.Now().Before(deadline) {
				// Another process's `run` is between create and start (or
				// failing and about to clean up): let it finish.
				lastErr = fmt.Errorf("sandbox %s is being created by another process", c.Name)
				continue
			}
			err := s.m.c.Runtime.Start(ctx, c.ID)
			if err == nil {
				s.id, c.State = c.ID, runtime.StateRunning
				return s.result(c, Started), nil
			}
			lastErr = err
			if errors.Is(err, runtime.ErrNotFound) {
				continue // vanished meanwhile: look again, then create
			}
			s.m.log.Warn("could not start the stopped sandbox; replacing it", "id", c.ID, "error", err)
			if networkSetupFailed(err) {
				s.m.markNoNetwork()
			}
			if err := s.removeIfStopped(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				lastErr = fmt.Errorf("sandbox %s would not start and could not be removed: %w", c.Name, err)
			}
		case runtime.StateDead:
			if err := s.removeIfStopped(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				lastErr = fmt.Errorf("sandbox %s is dead and could not be removed: %w", c.Name, err)
			}
		default: // restarting, removing, stopping, unknown: the engine is busy with it
			lastErr = fmt.Errorf("sandbox %s is %s", c.Name, c.State)
		}
	}
}

// backoff grows from ~50ms to ~1s, jittered so racing processes spread out.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	if d > time.Second {
		d = time.Second
	}
	var b [1]byte
	_, _ = rand.Read(b[:])
	return d/2 + time.Duration(int64(d/2)*int64(b[0])/255)
}

// pick chooses among the key's containers: running first, then paused,
// then any other; ties keep the engine's order (newest first).
func pick(k Key, cs []runtime.Container) (runtime.Container, bool) {
	rank := func(st runtime.State) int {
		switch st {
		case runtime.StateRunning:
			return 0
		case runtime.StatePaused:
			return 1
		case runtime.StateRestarting, runtime.StateStopping, runtime.StateUnknown:
			return 2
		case runtime.StateCreated, runtime.StateExited:
			return 3
		}
		return 4
	}
	best, found := runtime.Container{}, false
	for _, c := range cs {
		if !k.Matches(c.Labels) || c.Labels[LabelEphemeral] == "1" {
			continue
		}
		if !found || rank(c.State) < rank(best.State) {
			best, found = c, true
		}
	}
	return best, found
}

// removeIfStopped removes a stopped container without force, so a container
// that came alive meanwhile survives.
func (s *Sandbox) removeIfStopped(ctx context.Context, id string) error {
	return s.m.c.Runtime.Remove(ctx, false, id)
}

func (s *Sandbox) ensureEphemeral(ctx context.Context) (Result, error) {
	if s.id != "" {
		return Result{ID: s.id, Name: s.name, Profile: s.key.Profile, Task: s.key.Task, State: runtime.StateRunning, Action: Reused}, nil
	}
	id, err := s.create(ctx, s.name)
	if err != nil {
		return Result{}, err
	}
	s.id = id
	return Result{ID: id, Name: s.name, Profile: s.key.Profile, Task: s.key.Task, State: runtime.StateRunning, Action: Created}, nil
}

// create runs the container. On any failure it removes exactly what this
// attempt made (found by its nonce label, never by name: the name may
// belong to another process's fresh sandbox by then).
func (s *Sandbox) create(ctx context.Context, name string) (string, error) {
	host, err := s.m.hostFacts(ctx)
	if err != nil {
		return "", err
	}
	mounts, err := s.mounts()
	if err != nil {
		return "", err
	}
	spec := s.spec
	if host.NoNetwork && spec.Network && !spec.Explicit["network"] {
		spec.Network = false // learned earlier: this engine cannot network here
		s.m.c.Warn(noNetworkWarning(host))
	}
	warned := map[string]bool{}
	for {
		rs, warnings, err := BuildRun(s.key, name, spec, host, mounts, s.m.getenv)
		if err != nil {
			return "", err
		}
		for _, w := range warnings {
			if !warned[w] {
				warned[w] = true
				s.m.c.Warn(w)
			}
		}
		nonce := randomHex(8)
		rs.Labels[LabelNonce] = nonce
		id, err := s.m.c.Runtime.Run(ctx, rs)
		if err == nil {
			return id, nil
		}
		if errors.Is(err, runtime.ErrNameInUse) {
			return "", s.checkNameOwner(ctx, name, err)
		}
		s.cleanupAttempt(ctx, nonce)
		if spec.Network && !spec.Explicit["network"] && networkSetupFailed(err) {
			s.m.markNoNetwork()
			spec.Network = false
			s.m.c.Warn(noNetworkWarning(host))
			continue
		}
		return "", fmt.Errorf("creating sandbox %s: %w", name, err)
	}
}

// checkNameOwner tells a lost creation race (the name's owner is this key's
// sandbox) from a foreign container squatting on the name.
func (s *Sandbox) checkNameOwner(ctx context.Context, name string, inUse error) error {
	cs, err := s.m.c.Runtime.Inspect(ctx, name)
	if err != nil || len(cs) == 0 {
		return inUse // gone again: the caller looks once more
	}
	if !s.key.Matches(cs[0].Labels) {
		return fmt.Errorf("%w: %s (id %.12s) has no hsbx.key=%s label; remove or rename it", ErrForeignName, name, cs[0].ID, s.key.Hash())
	}
	return &nameTaken{c: cs[0], err: inUse}
}

// nameTaken is a lost creation race with the winner already inspected, so
// Ensure can act on it without listing again.
type nameTaken struct {
	c   runtime.Container
	err error
}

func (e *nameTaken) Error() string { return e.err.Error() }
func (e *nameTaken) Unwrap() error { return e.err }

// winner returns the container a lost creation race found, if any.
func winner(err error) *runtime.Container {
	var nt *nameTaken
	if errors.As(err, &nt) {
		return &nt.c
	}
	return nil
}

func noNetworkWarning(h Host) string {
	return fmt.Sprintf("%s cannot set up networking here (rootless, no /dev/net/tun?): default network left off, sandbox runs with --network none", h.Dialect)
}

func networkSetupFailed(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "slirp4netns") || strings.Contains(msg, "/dev/net/tun") || strings.Contains(msg, "pasta failed")
}

// cleanupAttempt removes the containers one failed create left behind.
func (s *Sandbox) cleanupAttempt(ctx context.Context, nonce string) {
	ctx = context.WithoutCancel(ctx)
	cs, err := s.m.c.Runtime.List(ctx, runtime.ListOptions{Labels: []string{LabelNonce + "=" + nonce}})
	if err != nil {
		s.m.log.Warn("could not check for a half-made sandbox", "nonce", nonce, "error", err)
		return
	}
	var ids []string
	for _, c := range cs {
		if c.Labels[LabelNonce] == nonce && !c.State.Alive() {
			ids = append(ids, c.ID)
		}
	}
	if err := s.m.c.Runtime.Remove(ctx, false, ids...); err != nil {
		s.m.c.Warn(fmt.Sprintf("a failed create left container(s) %s behind and they could not be removed: %v", strings.Join(ids, " "), err))
	}
}

// mounts makes the per-key persistent dirs.
func (s *Sandbox) mounts() (Mounts, error) {
	m := Mounts{CallerCwd: s.m.c.Cwd}
	if !s.spec.Persistent {
		return m, nil
	}
	if s.m.c.StateDir == "" {
		return m, errors.New("persistent sandboxes need a state directory ($XDG_STATE_HOME or HOME)")
	}
	base := filepath.Join(s.m.c.StateDir, "sandboxes", s.key.Hash())
	m.Workspace, m.Home = filepath.Join(base, "workspace"), filepath.Join(base, "home")
	for _, d := range []string{m.Workspace, m.Home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return m, fmt.Errorf("persistent sandbox dir: %w", err)
		}
	}
	return m, nil
}

// Command is one command to run in a sandbox.
type Command struct {
	Argv    []string
	WorkDir string
	// Env: literal values; the names go on argv, the values through the
	// engine client's environment.
	Env         map[string]string
	Interactive bool
	TTY         bool
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	// Timeout kills the command (in the sandbox, not only the client)
	// after this long; 0 = none.
	Timeout time.Duration
}

// ExecIDVar marks every process a command starts (the variable is
// inherited), so the whole tree can be found and killed in the sandbox.
const ExecIDVar = "HSBX_EXEC_ID"

// ErrTimeout is returned (wrapped in *InterruptedError) when Command.Timeout fired.
var ErrTimeout = errors.New("command timed out")

// InterruptedError says the command was stopped before it finished, by
// its timeout or by the caller's context (a signal); its processes in the
// sandbox were killed (Killed) or could not be (KillErr).
type InterruptedError struct {
	Cause   error // ErrTimeout, or the context's cause
	Killed  int   // processes killed in the sandbox
	KillErr error
}

func (e *InterruptedError) Error() string {
	msg := fmt.Sprintf("command interrupted: %v; killed %d process(es) in the sandbox", e.Cause, e.Killed)
	if e.KillErr != nil {
		msg = fmt.Sprintf("command interrupted: %v; its processes in the sandbox could not be killed: %v", e.Cause, e.KillErr)
	}
	return msg
}

func (e *InterruptedError) Unwrap() error { return e.Cause }

// Exec runs c in the sandbox and returns the command's exit status. When
// the sandbox is up this is one engine call (no probe first). When the
// engine says the container is missing, stopped or paused — so the command
// cannot have started — the sandbox is ensured and the command run once
// more; a command that may have started is never run twice.
func (s *Sandbox) Exec(ctx context.Context, c Command) (int, error) {
	s.mu.Lock()
	target := s.name
	if s.ephemeral {
		target = s.id
	}
	s.mu.Unlock()
	if target != "" {
		code, err := s.execOnce(ctx, target, c)
		if !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) && !errors.Is(err, runtime.ErrPaused) {
			return code, err
		}
		s.m.log.Debug("sandbox not up; ensuring it", "name", target, "error", err)
	}
	res, err := s.Ensure(ctx)
	if err != nil {
		return -1, err
	}
	return s.execOnce(ctx, res.ID, c)
}

func (s *Sandbox) execOnce(ctx context.Context, target string, c Command) (int, error) {
	if !s.ephemeral {
		release := holdInUse(s.m.c.StateDir, s.key.Hash())
		defer release()
		touchLastUse(s.m.c.StateDir, s.key.Hash())
	}
	token := randomHex(12)
	env := map[string]string{ExecIDVar: token}
	for k, v := range c.Env {
		env[k] = v
	}
	spec := runtime.ExecSpec{
		ID: target, Cmd: c.Argv, WorkDir: c.WorkDir, Env: env,
		Interactive: c.Interactive, TTY: c.TTY, Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr,
	}
	if s.spec.RunAsHostUser {
		spec.User = fmt.Sprintf("%d:%d", s.m.c.UID, s.m.c.GID)
	}
	execCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.Timeout > 0 {
		execCtx, cancel = context.WithTimeoutCause(ctx, c.Timeout, ErrTimeout)
	}
	defer cancel()
	code, err := s.m.c.Runtime.Exec(execCtx, spec)
	if execCtx.Err() == nil {
		return code, err
	}
	// The client was killed; the command's processes live on in the
	// sandbox (the engine does not stop them). Kill them by their marker.
	ie := &InterruptedError{Cause: context.Cause(execCtx)}
	killCtx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer kcancel()
	ie.Killed, ie.KillErr = s.killMarked(killCtx, target, token)
	return -1, ie
}

// killScript kills every process whose environment holds HSBX_EXEC_ID=$1.
// It needs /bin/sh, tr and grep in the image (busybox and every distro
// image have them).
const killScript = `t="HSBX_EXEC_ID=$1"; n=0
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF "$t"; then kill -9 "$p" 2>/dev/null && n=$((n+1)); fi
done
echo "$n"`

func (s *Sandbox) killMarked(ctx context.Context, target, token string) (int, error) {
	var out, errb strings.Builder
	spec := runtime.ExecSpec{ID: target, Cmd: []string{"sh", "-c", killScript, "hsbx-kill", token}, Stdout: &out, Stderr: &errb}
	if s.spec.RunAsHostUser {
		spec.User = fmt.Sprintf("%d:%d", s.m.c.UID, s.m.c.GID)
	}
	code, err := s.m.c.Runtime.Exec(ctx, spec)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("kill script exited %d: %s", code, strings.TrimSpace(errb.String()))
	}
	var n int
	fmt.Sscan(out.String(), &n)
	return n, nil
}

// Stop stops the sandbox and keeps its filesystem. It reports whether
// there was one to stop.
func (s *Sandbox) Stop(ctx context.Context) (bool, error) {
	cs, err := s.containers(ctx)
	if err != nil || len(cs) == 0 {
		return false, err
	}
	for _, c := range cs {
		if c.State.Alive() {
			if err := s.m.c.Runtime.Stop(ctx, c.ID, s.m.c.StopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return true, fmt.Errorf("stopping sandbox %s: %w", c.Name, err)
			}
		}
	}
	return true, nil
}

// Down stops and removes every container of the key, whatever the mode,
// then checks with the engine that they are gone. It returns the removed
// containers.
func (s *Sandbox) Down(ctx context.Context) ([]runtime.Container, error) {
	cs, err := s.containers(ctx)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	if err := s.removeAll(ctx, cs); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.id = ""
	s.mu.Unlock()
	removeMarker(s.m.c.StateDir, s.key.Hash())
	return cs, nil
}

// removeAll stops (gracefully: the --init process forwards SIGTERM) and
// removes cs, then verifies.
func (s *Sandbox) removeAll(ctx context.Context, cs []runtime.Container) error {
	var ids, alive []string
	for _, c := range cs {
		ids = append(ids, c.ID)
		if c.State.Alive() {
			alive = append(alive, c.ID)
		}
	}
	for _, id := range alive {
		if err := s.m.c.Runtime.Stop(ctx, id, s.m.c.StopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			s.m.log.Warn("stop failed; removing by force", "id", id, "error", err)
		}
	}
	if err := s.m.c.Runtime.Remove(ctx, true, ids...); err != nil {
		return fmt.Errorf("removing sandbox %s: %w", s.name, err)
	}
	left, err := s.m.c.Runtime.Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("checking sandbox %s is gone: %w", s.name, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("removing sandbox %s: the engine reported success but %d container(s) remain", s.name, len(left))
	}
	return nil
}

// containers lists the key's containers (the handle's own, for a
// per-process sandbox).
func (s *Sandbox) containers(ctx context.Context) ([]runtime.Container, error) {
	s.mu.Lock()
	ephemeral, id := s.ephemeral, s.id
	s.mu.Unlock()
	if ephemeral {
		if id == "" {
			return nil, nil
		}
		cs, err := s.m.c.Runtime.Inspect(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) {
			err = nil
		}
		return cs, err
	}
	cs, err := s.m.c.Runtime.List(ctx, runtime.ListOptions{Labels: s.key.Filters()})
	if err != nil {
		return nil, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
	}
	return slices.DeleteFunc(cs, func(c runtime.Container) bool { return !s.key.Matches(c.Labels) }), nil
}

// Close ends this handle's use of the sandbox. In persist mode that is a
// no-op: the sandbox keeps running for the next process. A per-process
// sandbox is stopped and removed, even when ctx is already cancelled (a
// signal), within a bounded time.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	ephemeral, id := s.ephemeral, s.id
	s.mu.Unlock()
	if !ephemeral || id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.m.c.StopGrace+30*time.Second)
	defer cancel()
	cs, err := s.containers(ctx)
	if err != nil || len(cs) == 0 {
		return err
	}
	if err := s.removeAll(ctx, cs); err != nil {
		return err
	}
	s.mu.Lock()
	s.id = ""
	s.mu.Unlock()
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
