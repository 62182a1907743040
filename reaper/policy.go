// Package reaper reclaims sandboxes that crashed or abandoned processes
// left behind, and never anything alive or not hsbx's. The policy (Judge)
// is pure: containers and a clock in, verdicts out. The sweep (Sweeper)
// does the engine calls, a constant number whatever the count: one ps, one
// inspect, one rm, one inspect to verify.
package reaper

import (
	"fmt"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// MinMaxAge floors the orphan age threshold, so a lifetime of 0 cannot race
// a sibling's just-exited sandbox.
const MinMaxAge = 120 * time.Second

// MaxAge is the orphan threshold for a lifetime: twice the lifetime,
// floored at MinMaxAge (the Hermes backend's rule).
func MaxAge(lifetime time.Duration) time.Duration {
	return max(2*lifetime, MinMaxAge)
}

// Options say what a sweep may reclaim.
type Options struct {
	Profile string
	// Shared, when set, is the shared container key (Hermes's
	// docker_shared_container_key) whose sandboxes the sweep owns instead
	// of the profile's.
	Shared      string
	AllProfiles bool
	// MaxAge: exited, never-started and dead sandboxes older than this go.
	MaxAge time.Duration
	// Idle, when positive: running sandboxes unused through hsbx for this
	// long, with no live hsbx process using them, go too.
	Idle time.Duration
	// SnapshotMaxAge, when positive: snapshots older than this go too,
	// unless sandboxes or other snapshots stand on them (the engine
	// refuses; they are kept). 0: the sweep never removes snapshots.
	SnapshotMaxAge time.Duration
	Now            time.Time
}

// Usage is what this host knows about a running sandbox's use.
type Usage struct {
	LastUse time.Time // zero: never recorded here
	// Creator is what this host can tell of the process that made the
	// sandbox (per-process sandboxes live as long as it does).
	Creator sandbox.Creator
}

// Verdict is the policy's decision on one container.
type Verdict struct {
	C       runtime.Container
	Profile string
	Task    string
	Remove  bool
	Idle    bool // running and idle: stop, then remove
	// EndOrphans: a per-process sandbox whose creator is gone, kept only
	// by live exec sessions. The commands hsbx started in it (they carry
	// its command marker) are that dead process's leftovers: the sweep
	// ends them first, then removes the sandbox if no session remains.
	EndOrphans bool
	Reason     string
	Age        time.Duration // -1: unknown
}

// Judge decides, container by container. A container without
// hermes-agent=1, of another profile (unless AllProfiles), or running or
// paused (unless idle per Options.Idle) is kept; so is one whose age is
// unknown (missing, unparseable or zero timestamp).
func Judge(cs []runtime.Container, o Options, usage func(runtime.Container) Usage) []Verdict {
	out := make([]Verdict, 0, len(cs))
	for _, c := range cs {
		v := Verdict{C: c, Age: -1}
		v.Profile, v.Task = sandbox.Owner(c.Labels)
		v.Remove, v.Idle, v.Reason, v.Age = judge(c, v.Profile, o, usage)
		out = append(out, v)
	}
	return out
}

func judge(c runtime.Container, profile string, o Options, usage func(runtime.Container) Usage) (remove, idle bool, reason string, age time.Duration) {
	if c.Labels[sandbox.LabelAgent] != "1" {
		return false, false, "not an hsbx/Hermes sandbox (no hermes-agent=1 label)", -1
	}
	if scope := (sandbox.Scope{Profile: o.Profile, Shared: o.Shared}); !o.AllProfiles && !scope.Contains(c.Labels) {
		return false, false, fmt.Sprintf("profile %q, not %q", profile, o.Profile), -1
	}
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return -1
		}
		return o.Now.Sub(t)
	}
	old := func(what string, t time.Time) (bool, bool, string, time.Duration) {
		a := since(t)
		switch {
		case a < 0 && !t.IsZero():
			return false, false, fmt.Sprintf("%s, at a time %s ahead of this host's clock (clock skew): age unknown", what, t.Sub(o.Now).Round(time.Second)), -1
		case a < 0:
			return false, false, what + ", age unknown", -1
		case a < o.MaxAge:
			return false, false, fmt.Sprintf("%s %s ago, younger than %s", what, a.Round(time.Second), o.MaxAge), a
		}
		return true, false, what, a
	}
	switch c.State {
	case runtime.StateExited:
		return old("exited", c.Finished)
	case runtime.StateCreated:
		return old("created, never started", c.Created)
	case runtime.StateDead:
		t := c.Finished
		if t.IsZero() {
			t = c.Created
		}
		return old("dead", t)
	case runtime.StateRunning:
		if c.Labels[sandbox.LabelEphemeral] == "1" && c.Labels[sandbox.LabelKey] != "" {
			// A per-process sandbox lives as long as the process that made
			// it: once that is provably gone (this host, this boot), the
			// sandbox is an orphan whatever its age — unless a command
			// still runs in it (a session of any host).
			who := usage(c).Creator
			switch {
			case who.Gone && len(c.ExecIDs) > 0:
				return false, false, fmt.Sprintf("per-process sandbox whose creator (%s) is gone, but in use: %d live exec session(s)", c.Labels[sandbox.LabelCreator], len(c.ExecIDs)), -1
			case who.Gone:
				return true, true, fmt.Sprintf("per-process sandbox whose creator (%s) is gone", c.Labels[sandbox.LabelCreator]), since(c.Started)
			case who.Alive:
				return false, false, fmt.Sprintf("running, per-process sandbox of a live process (%s)", c.Labels[sandbox.LabelCreator]), -1
			}
			// Made on another host (or boot): only the engine's view is
			// left, and the idle rule below judges it as any sandbox.
		}
		if o.Idle <= 0 || c.Labels[sandbox.LabelKey] == "" {
			return false, false, "running", -1
		}
		if len(c.ExecIDs) > 0 {
			// The engine's truth, whichever host started the command.
			return false, false, fmt.Sprintf("running, in use: %d live exec session(s)", len(c.ExecIDs)), -1
		}
		last := usage(c).LastUse
		if last.IsZero() {
			last = c.Started // never used through hsbx on this host: idle since it started
		}
		a := since(last)
		if a < 0 || a < o.Idle {
			return false, false, "running, in use", a
		}
		return true, true, "idle", a
	}
	return false, false, string(c.State), -1
}
