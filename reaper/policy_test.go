package reaper

import (
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func ctr(state runtime.State, labels map[string]string, created, started, finished time.Duration) runtime.Container {
	at := func(d time.Duration) time.Time {
		if d < 0 {
			return time.Time{}
		}
		return now.Add(-d)
	}
	return runtime.Container{ID: "id", State: state, Labels: labels, Created: at(created), Started: at(started), Finished: at(finished)}
}

func ctrExecs(c runtime.Container, ids ...string) runtime.Container {
	c.ExecIDs = ids
	return c
}

func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

var ours = lbl("hermes-agent", "1", "hermes-profile", "default", "hermes-task-id", "t")

func TestJudge(t *testing.T) {
	o := Options{Profile: "default", MaxAge: 10 * time.Minute, Now: now}
	h := time.Hour
	cases := []struct {
		name   string
		c      runtime.Container
		o      Options
		remove bool
		reason string
	}{
		{"stale exited", ctr(runtime.StateExited, ours, 2*h, 2*h, h), o, true, "exited"},
		{"recently exited", ctr(runtime.StateExited, ours, 2*h, 2*h, time.Minute), o, false, "younger than 10m0s"},
		{"exited exactly at max age", ctr(runtime.StateExited, ours, 2*h, 2*h, 10*time.Minute), o, true, "exited"},
		{"exited, zero FinishedAt", ctr(runtime.StateExited, ours, 2*h, 2*h, -1), o, false, "age unknown"},
		{"created never started, old", ctr(runtime.StateCreated, ours, h, -1, -1), o, true, "created, never started"},
		{"created, young", ctr(runtime.StateCreated, ours, time.Second, -1, -1), o, false, "younger"},
		{"created, no time", ctr(runtime.StateCreated, ours, -1, -1, -1), o, false, "age unknown"},
		{"dead by finish", ctr(runtime.StateDead, ours, 3*h, 3*h, h), o, true, "dead"},
		{"dead by creation", ctr(runtime.StateDead, ours, 3*h, -1, -1), o, true, "dead"},
		{"running, old", ctr(runtime.StateRunning, ours, 100*h, 100*h, -1), o, false, "running"},
		{"paused, old", ctr(runtime.StatePaused, ours, 100*h, 100*h, -1), o, false, "paused"},
		{"restarting", ctr(runtime.StateRestarting, ours, 100*h, 100*h, h), o, false, "restarting"},
		{"unknown state", ctr(runtime.StateUnknown, ours, 100*h, 100*h, h), o, false, "unknown"},
		{"no label", ctr(runtime.StateExited, lbl("hermes-profile", "default"), 2*h, 2*h, h), o, false, "no hermes-agent=1"},
		{"wrong label value", ctr(runtime.StateExited, lbl("hermes-agent", "true", "hermes-profile", "default"), 2*h, 2*h, h), o, false, "no hermes-agent=1"},
		{"other profile", ctr(runtime.StateExited, lbl("hermes-agent", "1", "hermes-profile", "research"), 2*h, 2*h, h), o, false, `profile "research"`},
		{"other profile, all", ctr(runtime.StateExited, lbl("hermes-agent", "1", "hermes-profile", "research"), 2*h, 2*h, h), Options{AllProfiles: true, MaxAge: o.MaxAge, Now: now}, true, "exited"},
		{"profile sanitizing alike (raw label differs)", ctr(runtime.StateExited, lbl("hermes-agent", "1", "hermes-profile", "a_b", "hsbx.profile", "a/b"), 2*h, 2*h, h), Options{Profile: "a_b", MaxAge: o.MaxAge, Now: now}, false, `profile "a/b"`},
		{"Hermes-made, sanitized profile matches", ctr(runtime.StateExited, lbl("hermes-agent", "1", "hermes-profile", "a_b"), 2*h, 2*h, h), Options{Profile: "a/b", MaxAge: o.MaxAge, Now: now}, true, "exited"},
		{"idle off: running kept", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k"), h, h, -1), o, false, "running"},
		{"idle: unused", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k"), 3*h, 3*h, -1), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, true, "idle"},
		{"idle: used recently", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "recent"), 3*h, 3*h, -1), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, false, "in use"},
		{"idle: not ours to judge (no hsbx.key)", ctr(runtime.StateRunning, ours, 3*h, 3*h, -1), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, false, "running"},
		// Per-process sandboxes: their creator decides, where this host can tell.
		{"per-process: creator from another host, idle rule off", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "other/1"), 3*h, 3*h, -1), o, false, "running"},
		{"per-process: creator from another host, judged idle", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "other/1"), 3*h, 3*h, -1), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, true, "idle"},
		{"per-process: creator gone", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "gone"), time.Second, time.Second, -1), o, true, "per-process sandbox whose creator (gone) is gone"},
		{"per-process: creator gone, a command runs", ctrExecs(ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "gone"), 3*h, 3*h, -1), "e1"), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, false, "in use: 1 live exec session"},
		{"per-process: creator alive, never idle", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "alive"), 3*h, 3*h, -1), Options{Profile: "default", MaxAge: o.MaxAge, Idle: h, Now: now}, false, "per-process sandbox of a live process"},
		{"per-process: creator gone, another profile", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "other", "hsbx.key", "k", "hsbx.ephemeral", "1", "hsbx.creator", "gone"), 3*h, 3*h, -1), o, false, "profile"},
		{"per-process label without hsbx.key: not judged by its creator", ctr(runtime.StateRunning, lbl("hermes-agent", "1", "hermes-profile", "default", "hsbx.ephemeral", "1", "hsbx.creator", "gone"), 3*h, 3*h, -1), o, false, "running"},
	}
	usage := func(c runtime.Container) Usage {
		if c.Labels["hsbx.key"] == "recent" {
			return Usage{LastUse: now.Add(-time.Minute)}
		}
		return Usage{Creator: sandbox.Creator{Gone: c.Labels["hsbx.creator"] == "gone", Alive: c.Labels["hsbx.creator"] == "alive"}}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge([]runtime.Container{tc.c}, tc.o, usage)[0]
			if v.Remove != tc.remove || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("Judge = remove %v %q, want %v %q", v.Remove, v.Reason, tc.remove, tc.reason)
			}
		})
	}
}

func TestMaxAge(t *testing.T) {
	for lifetime, want := range map[time.Duration]time.Duration{
		300 * time.Second: 600 * time.Second, // 2 x lifetime
		0:                 120 * time.Second, // floor
		30 * time.Second:  120 * time.Second,
		90 * time.Second:  180 * time.Second,
	} {
		if got := MaxAge(lifetime); got != want {
			t.Errorf("MaxAge(%s) = %s, want %s", lifetime, got, want)
		}
	}
}

func BenchmarkJudge10k(b *testing.B) {
	cs := make([]runtime.Container, 10000)
	states := []runtime.State{runtime.StateExited, runtime.StateRunning, runtime.StateCreated, runtime.StatePaused}
	for i := range cs {
		cs[i] = ctr(states[i%4], ours, time.Duration(i)*time.Second, time.Duration(i)*time.Second, time.Duration(i%900)*time.Second)
	}
	o := Options{Profile: "default", MaxAge: 10 * time.Minute, Now: now}
	b.ReportAllocs()
	for b.Loop() {
		Judge(cs, o, func(runtime.Container) Usage { return Usage{} })
	}
}
