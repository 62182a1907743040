package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/runtime"
)

// StopResult says what Stop found.
type StopResult int

// Stop's outcomes.
const (
	NoSandbox      StopResult = iota // nothing to stop
	Stopped                          // it ran and was stopped
	AlreadyStopped                   // it was not running
)

// Stop stops the sandbox and keeps its filesystem.
func (s *Sandbox) Stop(ctx context.Context) (StopResult, error) {
	cs, err := s.containers(ctx)
	if err != nil || len(cs) == 0 {
		return NoSandbox, err
	}
	res := AlreadyStopped
	for _, c := range cs {
		s.endChannel(ctx, c.ID, false)
		if c.State.Alive() {
			res = Stopped
			if err := s.rt().Stop(ctx, c.ID, s.m.c.StopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return res, fmt.Errorf("stopping sandbox %s: %w", c.Name, err)
			}
			if !s.rt().Capabilities().StopKeeps {
				s.forget(c.ID) // a stopped Pod is a deleted one: its id is gone for good
			}
		}
	}
	return res, nil
}

// Removed is what Down removed.
type Removed struct {
	Containers []runtime.Container
	// Claims are the key's persistent volume claims (Kubernetes: its
	// /workspace and /root), removed after its Pods.
	Claims []string
}

// Down stops and removes every container of the key (hsbx-made, or made
// by Hermes for exactly this key), whatever the mode, then checks with the
// engine that they are gone. On a runtime that keeps persistent files in
// claims (kubectl) it then removes the key's claim — one that carries the
// key's labels, with the cluster's word that it is gone — whether or not a
// Pod was there (stop keeps the claim); without a storage class configured
// that is best effort: a failure to look is logged, not returned. The
// host directories of a persistent sandbox stay (the CLI's down --purge
// removes them).
func (s *Sandbox) Down(ctx context.Context) (Removed, error) {
	var r Removed
	cs, err := s.teardownSet(ctx)
	if err != nil {
		return r, err
	}
	for _, c := range cs {
		s.endChannel(ctx, c.ID, false)
	}
	if len(cs) > 0 {
		if err := s.removeAll(ctx, cs); err != nil {
			return r, err
		}
		r.Containers = cs
		s.mu.Lock()
		s.id = ""
		s.mu.Unlock()
		removeMarker(s.engineDir())
		s.sayIfRecreated(ctx, cs)
	}
	if cr, ok := s.rt().(runtime.ClaimRemover); ok && !s.rt().Capabilities().HostDirs {
		claims, err := cr.RemoveClaims(ctx, runtime.Claim{Name: s.key.Name(), Labels: s.key.Labels()})
		r.Claims = claims
		switch {
		case errors.Is(err, runtime.ErrForeignClaim):
			s.m.c.Warn(err.Error()) // named and left alone, as a squatting container is
			err = nil
		case err != nil && s.spec.StorageClass == "":
			// No claims configured: a user who may not read claims (only
			// Pods) still gets a clean down; one left from when a class
			// was set is looked for, best effort.
			s.m.log.Debug("looking for the sandbox's claim failed", "error", err)
			err = nil
		}
		if err != nil {
			return r, fmt.Errorf("removing the persistent files of sandbox %s: %w", s.name, err)
		}
	}
	return r, nil
}

// teardownSet is what down removes, whatever the mode: the key's shared
// sandbox (hsbx- or Hermes-made), this handle's own per-process one, and
// the key's per-process sandboxes whose creator provably died (this host,
// this boot: a SIGKILL or crash, so its Close never ran). A per-process
// sandbox of a live process, or of one on another host (nothing certain
// from here), is left to that process (or the reaper's idle rule) and
// named in a warning.
func (s *Sandbox) teardownSet(ctx context.Context) ([]runtime.Container, error) {
	s.mu.Lock()
	own := s.id
	s.mu.Unlock()
	full, err := s.keyContainers(ctx)
	if err != nil {
		return nil, err
	}
	var out []runtime.Container
	for _, c := range full {
		if c.Labels[LabelEphemeral] != "1" {
			if s.key.Owns(c) {
				out = append(out, c)
			}
			continue
		}
		if !s.key.Matches(c.Labels) {
			continue
		}
		who := CreatorOf(c.Labels[LabelCreator])
		switch {
		case c.ID == own || who.Gone:
			out = append(out, c)
		case who.Alive:
			s.m.c.Warn(fmt.Sprintf("per-process sandbox %s belongs to a live process (%s) and ends with it: left alone", c.Name, c.Labels[LabelCreator]))
		default:
			s.m.c.Warn(fmt.Sprintf("per-process sandbox %s was made on another host or before a reboot (%s), so its process cannot be judged: left alone (the idle reaper removes it)", c.Name, c.Labels[LabelCreator]))
		}
	}
	return out, nil
}

// keyOwned lists the key's containers, the ones that mount its host dirs: its
// shared sandbox and its per-process ones.
func (s *Sandbox) keyOwned(ctx context.Context) ([]runtime.Container, error) {
	full, err := s.keyContainers(ctx)
	return slices.DeleteFunc(full, func(c runtime.Container) bool { return !s.key.Owns(c) }), err
}

// sayIfRecreated looks once more after a down removed cs: an exec or up of
// another process that started meanwhile makes a new sandbox of the key
// (it announces that too); down says so rather than report the key gone.
func (s *Sandbox) sayIfRecreated(ctx context.Context, removed []runtime.Container) {
	now, err := s.containers(ctx)
	if err != nil {
		return
	}
	for _, c := range now {
		if !slices.ContainsFunc(removed, func(r runtime.Container) bool { return r.ID == c.ID }) {
			s.m.c.Warn(fmt.Sprintf("a new sandbox of this key, %.12s, was made while down ran (by another process's exec or up); it was left alone: run down again to remove it", c.ID))
		}
	}
}

// Squatter returns the container that holds the sandbox's derived name
// without being the sandbox, if any (one engine call). Teardown never
// touches it; callers say so.
func (s *Sandbox) Squatter(ctx context.Context) (runtime.Container, bool) {
	cs, err := s.rt().Inspect(ctx, s.name)
	if err != nil || len(cs) != 1 || s.key.Matches(cs[0].Labels) {
		return runtime.Container{}, false
	}
	return cs[0], true
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
		if err := s.rt().Stop(ctx, id, s.m.c.StopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			s.m.log.Warn("stop failed; removing by force", "id", id, "error", err)
		}
	}
	if err := s.rt().Remove(ctx, true, ids...); err != nil {
		return fmt.Errorf("removing sandbox %s: %w", s.name, err)
	}
	left, err := s.rt().Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("checking sandbox %s is gone: %w", s.name, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("removing sandbox %s: the engine reported success but %d container(s) remain", s.name, len(left))
	}
	for _, c := range cs { // verified gone: a sandbox's CA key goes with it
		egress.RemoveCA(s.keyStateDir(), c.Labels[egress.NonceLabel])
	}
	return nil
}

// containers lists the key's containers, labels checked from inspect (the
// handle's own, for a per-process sandbox).
func (s *Sandbox) containers(ctx context.Context) ([]runtime.Container, error) {
	s.mu.Lock()
	ephemeral, id := s.ephemeral, s.id
	s.mu.Unlock()
	if ephemeral {
		if id == "" {
			return nil, nil
		}
		cs, err := s.rt().Inspect(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) {
			err = nil
		}
		return cs, err
	}
	full, err := s.candidates(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(full, func(c runtime.Container) bool { return !s.key.Owns(c) }), nil
}

// Close ends this handle's use of the sandbox. In persist mode that is a
// no-op: the sandbox keeps running for the next process. A per-process
// sandbox is stopped and removed, even when ctx is already cancelled (a
// signal), within a bounded time.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeChannel()
	s.closeRelay()
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
