package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Sweeper runs sweeps against one engine.
type Sweeper struct {
	RT        runtime.Runtime
	StateDir  string // usage records (idle); "" disables idle reaping
	Log       *slog.Logger
	StopGrace time.Duration
}

// Entry is one sandbox in a sweep's report: what it is and the verdict's
// reason. Removed and kept sandboxes are described alike.
type Entry struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Profile    string `json:"profile"`
	Task       string `json:"task"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	AgeSeconds int64  `json:"age_seconds"`
}

// Removed is a reclaimed sandbox.
type Removed = Entry

// Kept is a sandbox left alone, and why.
type Kept = Entry

// Failure is a sandbox the sweep could not handle; the sweep went on.
type Failure struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

// Report is what a sweep did (or, dry, would do).
type Report struct {
	Removed []Removed `json:"removed"`
	Kept    []Kept    `json:"kept"`
	Errors  []Failure `json:"errors"`
	// Snapshots are the snapshots past Options.SnapshotMaxAge: removed,
	// or kept and why (absent when the sweep does not judge snapshots).
	Snapshots []SnapshotVerdict `json:"snapshots,omitempty"`
}

// SnapshotVerdict is one snapshot past its age.
type SnapshotVerdict struct {
	Name       string `json:"name"`
	Profile    string `json:"profile"`
	Task       string `json:"task"`
	AgeSeconds int64  `json:"age_seconds"`
	Removed    bool   `json:"removed"`
	Reason     string `json:"reason"`
}

func (s *Sweeper) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s.Log
}

// Sweep finds the candidates, judges them and (unless dry) removes the
// orphans in three steps: judge, stop the idle ones, remove and verify.
// Removal is never forced, so a container that came alive since it was
// judged survives, and it is verified with the engine afterwards. An engine
// failure before any verdict is returned as an error and nothing is
// removed; a failure with one container is reported and the sweep goes on.
func (s *Sweeper) Sweep(ctx context.Context, o Options, dry bool) (Report, error) {
	rep := Report{Removed: []Removed{}, Kept: []Kept{}, Errors: []Failure{}}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.SnapshotMaxAge > 0 {
		if err := s.sweepSnapshots(ctx, o, &rep, dry); err != nil {
			rep.Errors = append(rep.Errors, Failure{ID: "snapshots", Error: err.Error()}) // the sandboxes' sweep goes on
		}
	}
	doomed, err := s.judge(ctx, o, &rep)
	if err != nil || len(doomed) == 0 {
		return rep, err
	}
	if dry {
		for _, v := range doomed {
			rep.Removed = append(rep.Removed, removed(v))
		}
		return rep, nil
	}
	doomed = s.endOrphans(ctx, doomed, &rep)
	doomed, release := s.stopIdle(ctx, doomed, &rep)
	defer release()
	return rep, s.removeAndVerify(ctx, doomed, &rep)
}

// judge lists the scope's sandboxes (ps, then inspect for exact labels and
// live exec sessions), records the kept ones in rep and returns the rest.
func (s *Sweeper) judge(ctx context.Context, o Options, rep *Report) ([]Verdict, error) {
	filters := []string{sandbox.LabelAgent + "=1"}
	if !o.AllProfiles {
		filters = append(filters, sandbox.LabelProfile+"="+sandbox.Scope{Profile: o.Profile, Shared: o.Shared}.HermesProfile())
	}
	listed, err := s.RT.List(ctx, runtime.ListOptions{Labels: filters})
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	if len(listed) == 0 {
		return nil, nil
	}
	ids := make([]string, len(listed))
	for i, c := range listed {
		ids[i] = c.ID
	}
	cs := s.inspect(ctx, ids, rep) // labels re-checked from inspect, not the filter
	usage := func(c runtime.Container) Usage {
		t, _ := keystate.LastUse(s.StateDir, c.Labels[sandbox.LabelKey])
		u := Usage{LastUse: t}
		if c.Labels[sandbox.LabelEphemeral] == "1" {
			u.Creator = sandbox.CreatorOf(c.Labels[sandbox.LabelCreator])
		}
		return u
	}
	verdicts := Judge(cs, o, usage)
	s.recheckExecs(ctx, verdicts, o, usage)
	var doomed []Verdict
	for _, v := range verdicts {
		switch {
		case !v.Remove:
			rep.Kept = append(rep.Kept, entry(v, v.Reason))
		case v.Idle && s.StateDir == "":
			rep.Kept = append(rep.Kept, entry(v, "running (no state dir to tell idle from busy)"))
		default:
			doomed = append(doomed, v)
		}
	}
	return doomed, nil
}

// removeAndVerify removes doomed in one batch (never forced), asks the
// engine what is left, retries those one by one, and reports each.
func (s *Sweeper) removeAndVerify(ctx context.Context, doomed []Verdict, rep *Report) error {
	if len(doomed) == 0 {
		return nil
	}
	ids := make([]string, len(doomed))
	for i, v := range doomed {
		ids[i] = v.C.ID
	}
	if err := s.RT.Remove(ctx, false, ids...); err != nil {
		s.log().Debug("batch rm reported an error; checking what it removed", "error", err)
	}
	left, err := s.stillThere(ctx, ids)
	if err != nil {
		return fmt.Errorf("checking what the engine removed: %w", err)
	}
	if len(left) > 0 { // per-container fallback, only where the batch did not do its job
		for id := range left {
			if err := s.RT.Remove(ctx, false, id); err != nil {
				left[id] = err
			}
		}
		again, err := s.stillThere(ctx, keys(left))
		if err != nil {
			return fmt.Errorf("checking what the engine removed: %w", err)
		}
		for id := range left {
			if _, still := again[id]; !still {
				delete(left, id)
			}
		}
	}
	for _, v := range doomed {
		if err, still := left[v.C.ID]; still {
			msg := "the engine reported success but the container is still there"
			if err != nil {
				msg = err.Error()
			}
			rep.Errors = append(rep.Errors, Failure{ID: v.C.ID, Error: msg})
			continue
		}
		rep.Removed = append(rep.Removed, removed(v))
		s.dropCA(v.C)
		s.log().Info("reaped sandbox", "id", v.C.ID, "task", v.Task, "profile", v.Profile, "reason", v.Reason)
	}
	return nil
}

// stopIdle stops the idle sandboxes among doomed and returns those to
// remove. An idle sandbox goes only with every user gone: no live hsbx
// process on this host (the in-use lock, held until the sweep ends so no
// new command starts in between) and no live exec session on any host
// (checked from the engine once more, right before the stop).
func (s *Sweeper) stopIdle(ctx context.Context, doomed []Verdict, rep *Report) ([]Verdict, func()) {
	var out, idle []Verdict
	var releases []func()
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, v := range doomed {
		if !v.Idle {
			out = append(out, v)
			continue
		}
		release, ok := keystate.LockIdle(s.StateDir, v.C.Labels[sandbox.LabelKey])
		if !ok {
			rep.Kept = append(rep.Kept, entry(v, "running, in use by a live hsbx process"))
			continue
		}
		releases = append(releases, release)
		idle = append(idle, v)
	}
	if len(idle) == 0 {
		return out, releaseAll
	}
	ids := make([]string, len(idle))
	for i, v := range idle {
		ids[i] = v.C.ID
	}
	now, err := s.RT.Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		for _, v := range idle {
			rep.Errors = append(rep.Errors, Failure{ID: v.C.ID, Error: fmt.Sprintf("re-checking idle sandbox: %v", err)})
		}
		return out, releaseAll
	}
	s.liveExecs(ctx, now)
	busy := map[string]int{}
	for _, c := range now {
		busy[c.ID] = len(c.ExecIDs)
	}
	for _, v := range idle {
		if n, there := busy[v.C.ID]; !there || n > 0 {
			reason := "gone meanwhile"
			if there {
				reason = fmt.Sprintf("running, in use: %d live exec session(s)", n)
			}
			rep.Kept = append(rep.Kept, entry(v, reason))
			continue
		}
		if err := s.RT.Stop(ctx, v.C.ID, s.StopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			rep.Errors = append(rep.Errors, Failure{ID: v.C.ID, Error: fmt.Sprintf("stopping idle sandbox: %v", err)})
			continue
		}
		out = append(out, v)
	}
	return out, releaseAll
}

// recheckExecs revisits the sandboxes kept only for their exec sessions
// (idle by every other measure): where none of the sessions runs (podman
// keeps those that failed to start), the sandbox is idle after all. Only
// these few cost engine calls.
func (s *Sweeper) recheckExecs(ctx context.Context, verdicts []Verdict, o Options, usage func(runtime.Container) Usage) {
	for i, v := range verdicts {
		if v.Remove || len(v.C.ExecIDs) == 0 {
			continue
		}
		c := v.C
		c.ExecIDs = nil
		again := Judge([]runtime.Container{c}, o, usage)[0]
		if !again.Remove {
			continue // kept for another reason too
		}
		live, err := s.RT.LiveExecs(ctx, v.C)
		if err != nil {
			s.log().Debug("could not tell live exec sessions; counting the sandbox as in use", "id", v.C.ID, "error", err)
			continue
		}
		switch {
		case len(live) == 0:
			verdicts[i] = again
		case orphanedPerProcess(v.C, usage):
			again.C.ExecIDs, again.EndOrphans = live, true
			again.Reason += fmt.Sprintf("; its %d live exec session(s) are ended first where they are hsbx's commands (kept if another remains)", len(live))
			verdicts[i] = again
		}
	}
}

// orphanedPerProcess: c is a per-process sandbox whose creator provably
// ran on this host, in this boot, and is gone.
func orphanedPerProcess(c runtime.Container, usage func(runtime.Container) Usage) bool {
	return c.Labels[sandbox.LabelEphemeral] == "1" && c.Labels[sandbox.LabelKey] != "" && usage(c).Creator.Gone
}

// endOrphans ends the leftover commands of the dead creators' sandboxes
// among doomed (EndOrphans) and waits, briefly, for the engine to drop
// their exec sessions; stopIdle then checks once more that none remains.
// A sandbox whose commands cannot be ended is kept, and says why.
func (s *Sweeper) endOrphans(ctx context.Context, doomed []Verdict, rep *Report) []Verdict {
	out := doomed[:0]
	for _, v := range doomed {
		if !v.EndOrphans {
			out = append(out, v)
			continue
		}
		n, err := sandbox.EndOrphanCommands(ctx, s.RT, v.C.ID)
		if err != nil {
			rep.Kept = append(rep.Kept, entry(v, fmt.Sprintf("per-process sandbox whose creator is gone, in use: its leftover commands could not be ended: %v", err)))
			continue
		}
		s.log().Info("ended the leftover commands of a per-process sandbox whose creator is gone", "id", v.C.ID, "processes", n)
		// Until the engine drops a session (of those the kill ended): at
		// most a few seconds.
		for deadline := time.Now().Add(5 * time.Second); n > 0 && time.Now().Before(deadline); {
			cs, err := s.RT.Inspect(ctx, v.C.ID)
			if err != nil || len(cs) != 1 {
				break
			}
			live, err := s.RT.LiveExecs(ctx, cs[0])
			if err != nil || len(live) < len(v.C.ExecIDs) || ctx.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		v.Reason = fmt.Sprintf("per-process sandbox whose creator (%s) is gone; %d leftover command process(es) ended", v.C.Labels[sandbox.LabelCreator], n)
		out = append(out, v)
	}
	return out
}

// liveExecs narrows each running sandbox's ExecIDs to the sessions that
// run now (podman lists failed ones too). When that cannot be told, the
// list stays as it is: the sandbox counts as in use.
func (s *Sweeper) liveExecs(ctx context.Context, cs []runtime.Container) {
	for i, c := range cs {
		if c.State != runtime.StateRunning || len(c.ExecIDs) == 0 || c.Labels[sandbox.LabelKey] == "" {
			continue
		}
		live, err := s.RT.LiveExecs(ctx, c)
		if err != nil {
			s.log().Debug("could not tell live exec sessions; counting the sandbox as in use", "id", c.ID, "error", err)
			continue
		}
		cs[i].ExecIDs = live
	}
}

// inspect inspects all ids in one call; where that call fails as a whole
// it falls back to one call per id, reporting those that still fail.
func (s *Sweeper) inspect(ctx context.Context, ids []string, rep *Report) []runtime.Container {
	cs, err := s.RT.Inspect(ctx, ids...)
	if err == nil || errors.Is(err, runtime.ErrNotFound) {
		return cs // missing ones are already gone
	}
	s.log().Debug("batch inspect failed; inspecting one by one", "error", err)
	cs = cs[:0]
	for _, id := range ids {
		one, err := s.RT.Inspect(ctx, id)
		switch {
		case err == nil:
			cs = append(cs, one...)
		case errors.Is(err, runtime.ErrNotFound):
		default:
			rep.Errors = append(rep.Errors, Failure{ID: id, Error: fmt.Sprintf("inspect: %v", err)})
		}
	}
	return cs
}

// stillThere returns the ids that still exist (one inspect call).
func (s *Sweeper) stillThere(ctx context.Context, ids []string) (map[string]error, error) {
	cs, err := s.RT.Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return nil, err
	}
	left := map[string]error{}
	for _, c := range cs {
		left[c.ID] = nil
	}
	return left, nil
}

func keys(m map[string]error) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func removed(v Verdict) Removed { return entry(v, v.Reason) }

// entry describes v's sandbox with the given reason.
func entry(v Verdict, reason string) Entry {
	age := int64(-1)
	if v.Age >= 0 {
		age = int64(v.Age / time.Second)
	}
	return Entry{ID: v.C.ID, Name: v.C.Name, Profile: v.Profile, Task: v.Task, State: string(v.C.State),
		Reason: reason, AgeSeconds: age}
}

// Summary is the one-line account of a report.
func (r Report) Summary(dry bool) string {
	verb := "reaped"
	if dry {
		verb = "would reap"
	}
	parts := []string{fmt.Sprintf("%s %d sandbox(es)", verb, len(r.Removed)), fmt.Sprintf("kept %d", len(r.Kept))}
	if len(r.Snapshots) > 0 {
		n := 0
		for _, v := range r.Snapshots {
			if v.Removed {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d snapshot(s) of %d past snapshot_max_age", verb, n, len(r.Snapshots)))
	}
	if len(r.Errors) > 0 {
		parts = append(parts, fmt.Sprintf("%d error(s)", len(r.Errors)))
	}
	return strings.Join(parts, ", ")
}

// sweepSnapshots removes the scope's snapshots (every profile's with
// AllProfiles) created before o.SnapshotMaxAge ago. Removal is never
// forced: one a sandbox or another snapshot stands on is kept, and said.
func (s *Sweeper) sweepSnapshots(ctx context.Context, o Options, rep *Report, dry bool) error {
	cm, ok := s.RT.(runtime.Committer)
	if !ok {
		return nil // no snapshots on this engine
	}
	m := sandbox.New(sandbox.Config{Runtime: s.RT, Logger: s.Log, StateDir: s.StateDir, Warn: func(string) {}})
	var scopes []sandbox.Scope
	if o.AllProfiles {
		imgs, err := cm.Images(ctx, sandbox.LabelSnapshotScope)
		if err != nil {
			return fmt.Errorf("listing snapshots: %w", err)
		}
		seen := map[sandbox.Scope]bool{}
		for _, img := range imgs {
			if sc, ok := sandbox.SnapshotScope(img); ok && !seen[sc] {
				seen[sc] = true
				scopes = append(scopes, sc)
			}
		}
	} else {
		scopes = []sandbox.Scope{{Profile: o.Profile, Shared: o.Shared}}
	}
	for _, sc := range scopes {
		list, err := m.Snapshots(ctx, sc)
		if err != nil {
			return err
		}
		for _, si := range list {
			age := o.Now.Sub(si.Created)
			if si.Created.IsZero() || age < o.SnapshotMaxAge {
				continue
			}
			v := SnapshotVerdict{Name: si.Name, Profile: si.Profile, Task: si.Task, AgeSeconds: int64(age / time.Second),
				Reason: fmt.Sprintf("snapshot older than %s", o.SnapshotMaxAge)}
			if !dry {
				if err := m.RemoveSnapshot(ctx, sc, si.Name); err != nil {
					v.Reason = err.Error()
					rep.Snapshots = append(rep.Snapshots, v)
					continue
				}
				s.log().Info("reaped snapshot", "name", si.Name, "profile", si.Profile, "age", age)
			}
			v.Removed = true
			rep.Snapshots = append(rep.Snapshots, v)
		}
	}
	return nil
}

// dropCA removes a reaped sandbox's CA files (brokered secrets) from its
// key's state directory on this host: its key goes with it.
func (s *Sweeper) dropCA(c runtime.Container) {
	key := c.Labels[sandbox.LabelKey]
	if s.StateDir == "" || key == "" || strings.Trim(key, "0123456789abcdef") != "" {
		return
	}
	egress.RemoveCA(keystate.Dir(s.StateDir, key), c.Labels[egress.NonceLabel])
}
