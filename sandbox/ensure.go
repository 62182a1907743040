package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
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
	if err := s.checkPlace(); err != nil {
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
