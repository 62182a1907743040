package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// ErrForeignName means the derived container name is taken by a container
// hsbx did not create for this key; hsbx will not touch it.
var ErrForeignName = errors.New("container name taken by a container that is not this sandbox")

// Ensure makes the sandbox exist and run: attach if running, unpause if
// paused, start if stopped (create a fresh one if start fails or it
// vanished), otherwise create. Concurrent Ensures for one key, in any
// number of processes, end with one container. A sandbox the Hermes
// backend made for exactly this key counts as this sandbox.
//
// Engine calls: one when this host verified the sandbox before (inspect by
// id); otherwise a probe (ps, then inspect of what it found) before any
// action, so a sandbox made elsewhere — by another host or by Hermes — is
// found rather than duplicated.
//
// A sandbox made from other settings than the handle's (see Drift) is
// handled by Spec.OnDrift: used as it is with one warning (warn, the
// default), replaced when no command runs in it (recreate), or refused
// with a *DriftError (error). Result.Drift names the settings.
func (s *Sandbox) Ensure(ctx context.Context) (Result, error) { return s.ensureFrom(ctx, nil, false) }

// Recreate replaces the key's sandbox with one made from the handle's
// settings, whether or not they differ (`hsbx up --recreate`), and returns
// the new one, up. Files in /workspace and /root are kept when the sandbox
// is persistent; its sessions and the rest of its filesystem are not. A
// sandbox a command runs in is not replaced: an error wrapping ErrBusy.
// With no sandbox it is Ensure.
func (s *Sandbox) Recreate(ctx context.Context) (Result, error) { return s.ensureFrom(ctx, nil, true) }

// ensureFrom is Ensure starting from a container the caller has just
// inspected and found to be this sandbox, not running (nil: none), so no
// call is spent finding it again; force replaces what it finds (Recreate).
func (s *Sandbox) ensureFrom(ctx context.Context, known *runtime.Container, force bool) (Result, error) {
	if err := s.key.Validate(); err != nil {
		return Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forceRecreate = force
	defer func() { s.forceRecreate = false }()
	if s.ephemeral {
		res, err := s.ensureEphemeral(ctx)
		if err == nil {
			s.keepRelay(ctx, res.ID)
			s.m.coldStart(ctx)
		}
		return res, err
	}
	res, err := s.ensure(ctx, known)
	if err == nil {
		s.keepRelay(ctx, res.ID)
		writeMarker(s.engineDir(), res.marker())
		keystate.Touch(s.stateDir(), s.key.Hash())
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
// process's create in progress (run = create + start) rather than a
// leftover, when its creator cannot be checked.
const youngCreate = 20 * time.Second

func (s *Sandbox) ensure(ctx context.Context, known *runtime.Container) (Result, error) {
	if known != nil {
		if res, done, err := s.activate(ctx, *known, true); done {
			return res, err
		}
	} else if mk, ok := readMarker(s.engineDir()); ok {
		cs, err := s.rt().Inspect(ctx, mk.ID)
		switch {
		case err == nil && len(cs) == 1 && s.key.Owns(cs[0]):
			res, done, err := s.activate(ctx, cs[0], true)
			if done {
				return res, err
			}
		case err != nil && !errors.Is(err, runtime.ErrNotFound):
			return Result{}, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
		}
		// Gone (or, impossibly, not it): find it by its labels.
	}
	deadline := time.Now().Add(ensureBudget)
	for attempt := 1; ; attempt++ {
		res, done, err := s.findOnce(ctx, time.Now().Before(deadline))
		if done {
			return res, err
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("could not bring up sandbox %s: %w", s.name, err)
		}
		s.m.log.Debug("sandbox busy; looking again", "name", s.name, "reason", err)
		if err := sleepCtx(ctx, backoff(attempt)); err != nil {
			return Result{}, err
		}
	}
}

// findOnce probes for the sandbox and acts once: create it when absent,
// else bring up what was found. done is false when another process is busy
// with it (creating, starting, removing): the caller looks again.
func (s *Sandbox) findOnce(ctx context.Context, patient bool) (Result, bool, error) {
	c, found, err := s.probe(ctx)
	if err != nil {
		return Result{}, true, err
	}
	if !found {
		id, err := s.create(ctx, s.name)
		var nt *nameTakenError
		switch {
		case err == nil:
			s.id = id
			return s.fresh(id, Created, s.createdNetwork), true, nil
		case errors.As(err, &nt):
			c = nt.c // lost the race: act on the winner the clash inspected
		case errors.Is(err, runtime.ErrNameInUse):
			return Result{}, false, err // gone again meanwhile
		default:
			return Result{}, true, err
		}
	}
	return s.activate(ctx, c, patient)
}

// probe finds the key's sandbox: a ps on the labels Hermes filters on,
// then one inspect of the matches for exact labels (docker's ps label
// string is ambiguous) and the network mode. Hermes-made sandboxes whose
// labels cannot identify the key are warned about once and left alone.
func (s *Sandbox) probe(ctx context.Context) (runtime.Container, bool, error) {
	full, err := s.candidates(ctx)
	if err != nil {
		return runtime.Container{}, false, err
	}
	var cands []runtime.Container
	for _, c := range full {
		if s.key.Matches(c.Labels) {
			cands = append(cands, c)
			continue
		}
		why := s.key.Adoptable(c)
		switch {
		case why == nil:
			cands = append(cands, c)
		case !errors.Is(why, ErrNotHermes) && !warnedOnce(s.engineDir(), c.ID[:min(12, len(c.ID))]):
			s.m.c.Warn(fmt.Sprintf("the Hermes-made sandbox %s (%.12s) has this task's labels, but hsbx will not attach to it: %v; hsbx keeps its own sandbox %s next to it", c.Name, c.ID, why, s.name))
		}
	}
	c, ok := pick(cands)
	return c, ok, nil
}

// candidates lists the containers that carry the key's Hermes labels (ps),
// then inspects them in one call for exact labels and network mode;
// per-process sandboxes are left out. Two calls, none when ps finds none.
func (s *Sandbox) candidates(ctx context.Context) ([]runtime.Container, error) {
	full, err := s.keyContainers(ctx)
	return slices.DeleteFunc(full, func(c runtime.Container) bool { return c.Labels[LabelEphemeral] == "1" }), err
}

// keyContainers lists and inspects every container the key's filters find,
// per-process sandboxes included (ps, then inspect for exact labels).
func (s *Sandbox) keyContainers(ctx context.Context) ([]runtime.Container, error) {
	listed, err := s.rt().List(ctx, runtime.ListOptions{Labels: s.key.Filters()})
	if err != nil {
		return nil, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
	}
	if len(listed) == 0 {
		return nil, nil
	}
	ids := make([]string, len(listed))
	for i, c := range listed {
		ids[i] = c.ID
	}
	full, err := s.rt().Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) { // one removed meanwhile is fine
		return nil, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
	}
	return full, nil
}

// pick chooses among the key's containers: running first, then paused,
// then any other; ties keep the engine's order (newest first).
func pick(cs []runtime.Container) (runtime.Container, bool) {
	rank := func(st runtime.State) int {
		switch st {
		case runtime.StateRunning:
			return 0
		case runtime.StatePaused:
			return 1
		case runtime.StateRestarting, runtime.StateStopping, runtime.StateStarting, runtime.StateUnknown:
			return 2
		case runtime.StateCreated, runtime.StateExited:
			return 3
		}
		return 4
	}
	if len(cs) == 0 {
		return runtime.Container{}, false
	}
	return slices.MinFunc(cs, func(a, b runtime.Container) int { return rank(a.State) - rank(b.State) }), true
}

// activate brings up c, a container verified to be the sandbox. done is
// false when c is busy with another process or could not be brought up
// and is out of the way now: the caller looks again.
func (s *Sandbox) activate(ctx context.Context, c runtime.Container, patient bool) (Result, bool, error) {
	if s.fromImage != "" {
		// A fork or rollback makes the key's sandbox anew, and never
		// takes one it finds: made meanwhile, or there all along.
		return Result{}, true, fmt.Errorf("%w: task %q has sandbox %s (%.12s) already; fork into a new task, or roll it back (hsbx snapshot rollback)", ErrSandboxExists, s.key.Task, c.Name, c.ID)
	}
	young := !c.Created.IsZero() && time.Since(c.Created) < youngCreate
	if c.State == runtime.StateCreated && young && patient && !creatorGone(c.Labels[LabelCreator]) {
		// Another process's `run` is between create and start (or
		// failing and about to clean up): let it finish.
		return Result{}, false, fmt.Errorf("sandbox %s is being created by another process", c.Name)
	}
	drift, msg, said, kept, err := s.judgeDrift(ctx, c)
	if err != nil || !kept {
		return Result{}, err != nil, err // replaced: the caller looks again and makes it anew
	}
	if err := s.checkNetwork(c); err != nil {
		return Result{}, true, err
	}
	if err := s.checkIsolation(c); err != nil {
		return Result{}, true, err
	}
	res, done, err := s.bringUp(ctx, c)
	res.Drift, res.DriftWarned, res.driftMsg = drift, said, msg
	return res, done, err
}

// bringUp is activate's part that attaches, unpauses or starts c.
func (s *Sandbox) bringUp(ctx context.Context, c runtime.Container) (Result, bool, error) {
	rt := s.m.c.Runtime
	switch c.State {
	case runtime.StateRunning:
		s.id = c.ID
		return s.result(c, Reused), true, nil
	case runtime.StatePaused:
		if err := rt.Unpause(ctx, c.ID); err != nil {
			return Result{}, true, fmt.Errorf("sandbox %s is paused and could not be unpaused (unpause it, or %s): %w", c.Name, s.remedy(RemedyDown), err)
		}
		s.id, c.State = c.ID, runtime.StateRunning
		return s.result(c, Started), true, nil
	case runtime.StateCreated, runtime.StateExited:
		err := rt.Start(ctx, c.ID)
		if err == nil {
			s.id, c.State = c.ID, runtime.StateRunning
			return s.result(c, Started), true, nil
		}
		if errors.Is(err, runtime.ErrNotFound) {
			return Result{}, false, err // vanished meanwhile: look again, then create
		}
		s.m.log.Warn("could not start the stopped sandbox; replacing it", "id", c.ID, "error", err)
		if errors.Is(err, runtime.ErrNetworkSetup) {
			s.m.markNoNetwork()
		}
		if rerr := s.removeIfStopped(ctx, c.ID); rerr != nil && !errors.Is(rerr, runtime.ErrNotFound) {
			return Result{}, false, fmt.Errorf("sandbox %s would not start and could not be removed: %w", c.Name, rerr)
		}
		return Result{}, false, err
	case runtime.StateDead:
		if err := s.removeIfStopped(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return Result{}, false, fmt.Errorf("sandbox %s is dead and could not be removed: %w", c.Name, err)
		}
		return Result{}, false, fmt.Errorf("sandbox %s was dead", c.Name)
	}
	// restarting, removing, stopping, unknown: the engine is busy with it
	return Result{}, false, fmt.Errorf("sandbox %s is %s", c.Name, c.State)
}

// checkNetwork fails closed when an air-gapped sandbox is asked for and
// the existing one has a network (made before network = off was set, or
// by a tool that ignored it). hsbx does not remove it: it may hold work.
func (s *Sandbox) checkNetwork(c runtime.Container) error {
	relays := c.Labels[egress.Label] != "" // "": blanked in a snapshot's image
	if !s.spec.Network && s.spec.Egress == nil && relays && c.NetworkMode == "none" {
		// Asked for off, found allow: its relay would let out what off
		// does not.
		return &NetworkModeError{Name: c.Name, ID: c.ID, Mode: "allow (an egress relay)", Task: s.key.Task, Want: "off"}
	}
	if s.spec.Network || c.NetworkMode == "none" {
		return nil
	}
	want := "off"
	if s.spec.Egress != nil {
		want = "allow"
	}
	return &NetworkModeError{Name: c.Name, ID: c.ID, Mode: c.NetworkMode, Task: s.key.Task, Want: want}
}

// NetworkModeError says network is off but the key's existing sandbox has
// a network (made before, or by a tool that ignored the setting): it is
// not used, and hsbx does not remove it (it may hold work). It is a
// *SpecError for the setting network too.
type NetworkModeError struct {
	Name, ID, Mode string
	Task           string // the sandbox's task
	Want           string // the network asked for: "off" ("" too) or "allow"
}

func (e *NetworkModeError) want() string {
	if e.Want == "" {
		return "off"
	}
	return e.Want
}

func (e *NetworkModeError) Error() string {
	return fmt.Sprintf("network: network is %s, but the existing sandbox %s (%.12s) has network mode %q", e.want(), e.Name, e.ID, e.Mode)
}

// Unwrap makes it a *SpecError of the setting network.
func (e *NetworkModeError) Unwrap() error {
	return &SpecError{Setting: "network", Msg: fmt.Sprintf("network is %s, but the existing sandbox %s has network mode %q", e.want(), e.Name, e.Mode)}
}

// Hint says how to go on, in the Go package's terms (the hsbx command
// gives its own).
func (e *NetworkModeError) Hint() string {
	return "Sandbox.Recreate replaces it with one whose network is " + e.want() + " (Sandbox.Down removes it), or set Spec.Network and Spec.Egress to what it has"
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

// removeIfStopped removes a stopped container without force, so a container
// that came alive meanwhile survives.
func (s *Sandbox) removeIfStopped(ctx context.Context, id string) error {
	return s.rt().Remove(ctx, false, id)
}

func (s *Sandbox) ensureEphemeral(ctx context.Context) (Result, error) {
	if s.id != "" {
		return s.fresh(s.id, Reused, s.createdNetwork), nil
	}
	id, err := s.create(ctx, s.name)
	if err != nil {
		return Result{}, err
	}
	s.id = id
	return s.fresh(id, Created, s.createdNetwork), nil
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
	image := spec.Image
	if s.fromImage != "" {
		image = s.fromImage // a snapshot's: local, never pulled
	}
	s6, missing := s.m.imageInit(ctx, image)
	pulled := false
	if missing && s.fromImage != "" {
		return "", fmt.Errorf("%w: the snapshot's image %.19s is gone", ErrNoSnapshot, s.fromImage)
	}
	if missing {
		if err := s.m.pull(ctx, spec.Image); err != nil {
			return "", err
		}
		pulled = true
		s6, _ = s.m.imageInit(ctx, spec.Image)
	}
	spec.ImageInit = s6
	if err := s.checkOCIRuntime(ctx, spec.OCIRuntime, host.OCIRuntimes); err != nil {
		return "", err
	}
	if host.NoNetwork && spec.Network && !spec.Explicit["network"] {
		spec.Network = false // learned earlier: this engine cannot network here
		s.m.c.Warn(noNetworkWarning(host))
	}
	warned := map[string]bool{}
	for {
		rs, warnings, err := buildRun(s.key, name, spec, host, mounts, s.m.getenv)
		if err != nil {
			return "", err
		}
		if spec.Egress != nil && !s.m.c.Channel {
			return "", &SpecError{"network", "network = allow relays through the exec channel, which is off here (exec_channel = false, or a host where hsbx cannot run it); set exec_channel = true, or network = off"}
		}
		for _, w := range warnings {
			if !warned[w] {
				warned[w] = true
				s.m.c.Warn(w)
			}
		}
		// What it is made from as the caller asked (s.spec, not spec as
		// adjusted to this engine: a learned no-network is no difference).
		rs.Labels[LabelConfig] = s.configLabel()
		if s.fromImage != "" {
			rs.Image = s.fromImage
		}
		nonce := randomHex(8)
		rs.Labels[LabelNonce] = nonce
		if cr := creatorLabel(); cr != "" {
			rs.Labels[LabelCreator] = cr
		}
		ca, err := s.newSecretsCA(spec, name, nonce)
		if err != nil {
			return "", err
		}
		id, err := s.rt().Run(ctx, rs)
		if err != nil && ca != nil {
			s.dropCA(nonce)
		}
		if err == nil && !spec.Network {
			err = s.proveOffline(ctx, id, name)
			if err == nil && ca != nil {
				err = s.installTrust(ctx, id, ca)
			}
			if err != nil {
				if ca != nil {
					s.dropCA(nonce)
				}
				return "", err
			}
			if ca != nil {
				egress.PruneCAs(s.keyStateDir(), nonce) // the key's earlier sandboxes' CAs
			}
		}
		if err == nil {
			s.createdNetwork = "any"
			if !spec.Network {
				s.createdNetwork = "none"
			}
			if spec.Egress != nil {
				s.createdNetwork = "allow"
			}
			return id, nil
		}
		if errors.Is(err, runtime.ErrNameInUse) {
			return "", s.checkNameOwner(ctx, name, err)
		}
		s.cleanupAttempt(ctx, nonce)
		if errors.Is(err, runtime.ErrImageNotFound) && !pulled && s.fromImage == "" && s.rt().Capabilities().Pulls {
			// The image went since it was last seen (a cached fact, or an
			// rmi between the look and the create): pull it, then once more.
			s.m.forgetImage(spec.Image)
			if err := s.m.pull(ctx, spec.Image); err != nil {
				return "", err
			}
			pulled = true
			continue
		}
		if spec.Network && !spec.Explicit["network"] && errors.Is(err, runtime.ErrNetworkSetup) {
			s.m.markNoNetwork()
			spec.Network = false
			s.m.c.Warn(noNetworkWarning(host))
			continue
		}
		if spec.OCIRuntime != "" && !errors.Is(err, runtime.ErrTimeout) && !errors.Is(err, runtime.ErrUnreachable) && !errors.Is(err, runtime.ErrImageNotFound) {
			// Refused (no such runtime) or failed to start under it.
			err = &OCIRuntimeError{Runtime: spec.OCIRuntime, Dialect: s.rt().Dialect(), Err: err}
		}
		return "", fmt.Errorf("creating sandbox %s: %w", name, err)
	}
}

// checkNameOwner tells a lost creation race (the name's owner is this key's
// sandbox) from a foreign container squatting on the name.
func (s *Sandbox) checkNameOwner(ctx context.Context, name string, inUse error) error {
	cs, err := s.rt().Inspect(ctx, name)
	if err != nil || len(cs) == 0 {
		s.clearStorageLeftover(ctx, name)
		return inUse // gone again: the caller looks once more
	}
	if !s.key.Matches(cs[0].Labels) {
		return fmt.Errorf("%w: %s (id %.12s) has no hsbx.key=%s label; remove or rename it", ErrForeignName, name, cs[0].ID, s.key.Hash())
	}
	return &nameTakenError{c: cs[0], err: inUse}
}

// clearStorageLeftover handles a name the engine says is in use while no
// container of it can be inspected: with podman, a storage container that
// an interrupted `run` left (Ctrl-C in an earlier up). Another process's
// create passes through that state for a moment, so it is removed only
// once it has stood for youngCreate as seen from here; until then the
// caller keeps looking. The name is this sandbox's (it holds the key's
// hash), and inspect has just found no container of it: `podman rm
// --storage` would remove a listed container too.
func (s *Sandbox) clearStorageLeftover(ctx context.Context, name string) {
	sr, ok := s.rt().(runtime.StorageRemover)
	if !ok || !s.rt().Capabilities().StorageLeftovers {
		return
	}
	now := time.Now()
	if s.storageSeen.IsZero() {
		s.storageSeen = now
		return
	}
	if now.Sub(s.storageSeen) < youngCreate {
		return
	}
	s.storageSeen = time.Time{}
	removed, err := sr.RemoveStorage(ctx, name)
	switch {
	case err != nil:
		s.m.log.Warn("could not remove a storage-only container holding the sandbox's name", "name", name, "error", err)
	case removed:
		s.m.c.Warn(fmt.Sprintf("removed a storage-only container that held sandbox %s's name for %s (an interrupted create had left it; podman lists no such container)", name, youngCreate))
	}
}

// nameTakenError is a lost creation race with the winner already inspected, so
// Ensure can act on it without listing again.
type nameTakenError struct {
	c   runtime.Container
	err error
}

func (e *nameTakenError) Error() string { return e.err.Error() }
func (e *nameTakenError) Unwrap() error { return e.err }

func noNetworkWarning(h engineHost) string {
	return fmt.Sprintf("%s cannot set up networking here (rootless, no /dev/net/tun?): default network left off, sandbox runs with --network none", h.Dialect)
}

// cleanupAttempt removes the containers one failed create left behind.
func (s *Sandbox) cleanupAttempt(ctx context.Context, nonce string) {
	ctx = context.WithoutCancel(ctx)
	cs, err := s.rt().List(ctx, runtime.ListOptions{Labels: []string{LabelNonce + "=" + nonce}})
	if err != nil {
		s.m.log.Warn("could not check for a half-made sandbox", "nonce", nonce, "error", err)
		return
	}
	var ids []string
	var kept []runtime.Container
	for _, c := range cs {
		switch {
		case c.Labels[LabelNonce] != nonce:
		case c.State.Alive():
			kept = append(kept, c) // started: a sandbox, maybe in use already
		default:
			ids = append(ids, c.ID)
		}
	}
	if err := s.rt().Remove(ctx, false, ids...); err != nil {
		// Ask the engine what is left: a start that was on its way (an
		// interrupted `run`'s) may have landed meanwhile.
		left, lerr := s.rt().List(ctx, runtime.ListOptions{Labels: []string{LabelNonce + "=" + nonce}})
		var stuck []string
		for _, c := range left {
			switch {
			case lerr != nil || c.Labels[LabelNonce] != nonce:
			case c.State.Alive():
				kept = append(kept, c)
			default:
				stuck = append(stuck, c.ID)
			}
		}
		if lerr != nil || len(stuck) > 0 {
			s.m.c.Warn(fmt.Sprintf("a failed create left container(s) %s behind and they could not be removed: %v", strings.Join(ids, " "), err))
		}
	}
	for _, c := range kept {
		s.m.c.Warn(fmt.Sprintf("the create of sandbox %s did not finish here, but the engine made and started it (%.12s): it is running, is kept, and the next up uses it (%s removes it)", c.Name, c.ID, s.remedy(RemedyDown)))
	}
}

// hostBase is where the key's persistent dirs live: Hermes's layout under
// SandboxDir (TERMINAL_SANDBOX_DIR) when set, else hsbx's own under the
// state dir ("" without either).
func (s *Sandbox) hostBase() string {
	switch {
	case s.spec.SandboxDir != "":
		return filepath.Join(s.spec.SandboxDir, "docker", TaskDirName(s.key.Task))
	case s.stateDir() != "":
		return keystate.Dir(s.stateDir(), s.key.Hash())
	}
	return ""
}

// mounts makes the per-key persistent dirs: Hermes's layout under
// SandboxDir (TERMINAL_SANDBOX_DIR) when set, so both tools see the same
// files for a task, else hsbx's own under the state dir. On Kubernetes
// there are no host dirs: the key's claim is named for the key.
func (s *Sandbox) mounts() (mountPaths, error) {
	m := mountPaths{CallerCwd: s.m.c.Cwd}
	if !s.spec.Persistent {
		return m, nil
	}
	if !s.rt().Capabilities().HostDirs {
		m.Claim = s.key.Name()
		return m, nil
	}
	base := s.hostBase()
	if base == "" {
		return m, errors.New("persistent sandboxes need a state directory ($XDG_STATE_HOME or HOME)")
	}
	m.Workspace, m.Home = filepath.Join(base, "workspace"), filepath.Join(base, "home")
	for _, d := range []string{m.Workspace, m.Home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return m, fmt.Errorf("persistent sandbox dir: %w", err)
		}
	}
	return m, nil
}
