package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/reaper"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

type counter struct{ n atomic.Int32 }

func (c *counter) Enabled(context.Context, slog.Level) bool  { return true }
func (c *counter) Handle(context.Context, slog.Record) error { c.n.Add(1); return nil }
func (c *counter) WithAttrs([]slog.Attr) slog.Handler        { return c }
func (c *counter) WithGroup(string) slog.Handler             { return c }

func TestSweepOnEveryEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			calls := &counter{}
			rt := tg.OpenWith(t, &proc.Runner{Log: slog.New(calls)})
			profile := fmt.Sprintf("hsbx-reaptest-%d", time.Now().UnixNano()%1e9)
			run := func(name string, labels map[string]string, cmd ...string) string {
				id, err := rt.Run(ctx, runtime.RunSpec{Name: profile + "-" + name, Labels: labels, Image: tg.Image, Cmd: cmd, Args: []string{"--network", "none"}})
				if err != nil && !errors.Is(err, runtime.ErrEngine) {
					t.Fatalf("run %s: %v", name, err)
				}
				return id
			}
			ours := map[string]string{"hermes-agent": "1", "hermes-profile": profile, "hermes-task-id": "x", "hsbx-reaptest": profile}
			other := map[string]string{"hermes-agent": "1", "hermes-profile": profile + "-other", "hsbx-reaptest": profile}
			foreign := map[string]string{"hermes-profile": profile, "hsbx-reaptest": profile}
			t.Cleanup(func() {
				cs, _ := rt.List(context.Background(), runtime.ListOptions{Labels: []string{"hsbx-reaptest=" + profile}})
				for _, c := range cs {
					_ = rt.Remove(context.Background(), true, c.ID)
				}
			})
			// Each with a key and a nonce, whose CA files (brokered
			// secrets) are in the state dir: the reaped one's go with it.
			withCA := func(key, nonce string) map[string]string {
				l := maps.Clone(ours)
				l[sandbox.LabelKey], l[sandbox.LabelNonce] = key, nonce
				return l
			}
			state := t.TempDir()
			for _, kn := range [][2]string{{"00aa00aa00aa00aa", "exitednonce"}, {"11bb11bb11bb11bb", "runningnonce"}} {
				dir := keystate.Dir(state, kn[0])
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				for _, ext := range []string{".pem", ".key"} {
					if err := os.WriteFile(filepath.Join(dir, "egress-ca-"+kn[1]+ext), []byte("x"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			exited := run("exited", withCA("00aa00aa00aa00aa", "exitednonce"), "true")
			running := run("running", withCA("11bb11bb11bb11bb", "runningnonce"), "sleep", "infinity")
			otherProfile := run("other", other, "true")
			notOurs := run("foreign", foreign, "true")
			if !tg.Fake {
				// a create whose start fails: the engines leave it "created"
				if _, err := rt.Run(ctx, runtime.RunSpec{Name: profile + "-halfmade", Labels: ours, Image: tg.Image,
					Cmd: []string{"true"}, Args: []string{"--network", "none", "--user", "hsbx-no-such-user"}}); err == nil {
					t.Fatal("run with an unknown user succeeded")
				}
			}
			time.Sleep(1200 * time.Millisecond)   // let the exited ones age past the 1s max age
			recent := run("recent", ours, "true") // exits now: younger than the max age
			time.Sleep(300 * time.Millisecond)

			sw := &reaper.Sweeper{RT: rt, StateDir: state}
			calls.n.Store(0)
			rep, err := sw.Sweep(ctx, reaper.Options{Profile: profile, MaxAge: 1100 * time.Millisecond, Now: time.Now()}, false)
			if err != nil {
				t.Fatal(err)
			}
			if n := calls.n.Load(); n != 4 {
				t.Errorf("sweep made %d engine calls, want 4 (ps, inspect, rm, inspect)", n)
			}
			want := 1
			if !tg.Fake {
				want = 2
			}
			if len(rep.Removed) != want || len(rep.Errors) != 0 {
				t.Fatalf("report %+v", rep)
			}
			gone := map[string]bool{}
			for _, r := range rep.Removed {
				gone[r.ID] = true
			}
			if !gone[exited] {
				t.Errorf("the exited orphan was not removed: %+v", rep)
			}
			for name, id := range map[string]string{"running": running, "recent": recent, "other profile": otherProfile, "foreign": notOurs} {
				if cs, err := rt.Inspect(ctx, id); err != nil || len(cs) != 1 {
					t.Errorf("%s container was touched: %v", name, err)
				}
			}
			if cs, _ := rt.Inspect(ctx, exited); len(cs) != 0 {
				t.Errorf("reported removed but still there")
			}
			cas, _ := filepath.Glob(filepath.Join(state, "sandboxes", "*", "egress-ca-*"))
			if len(cas) != 2 || !strings.Contains(strings.Join(cas, " "), "runningnonce") {
				t.Errorf("CA files after the sweep: %q, want the running sandbox's only", cas)
			}
		})
	}
}

// TestIdleSweepSparesALiveHolder: a running sandbox with a command in
// flight is never idle-reaped, whether the sweep runs on the host that
// started the command (its in-use lock) or on another host, another user or
// a program with its own state dir (the engine's live exec sessions), and
// whether the command went through the exec channel's agent (whose exec
// session is live while it serves) or the plain path.
func TestIdleSweepSparesALiveHolder(t *testing.T) {
	for _, c := range []struct {
		name               string
		otherHost, channel bool
	}{{"same-host", false, false}, {"other-host", true, false}, {"other-host-channel", true, true}} {
		t.Run(c.name, func(t *testing.T) { idleSweepSparesBusy(t, c.otherHost, c.channel) })
	}
}

func idleSweepSparesBusy(t *testing.T, otherHost, viaChannel bool) {
	for _, tg := range withKube(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			rt := tg.Open(t)
			profile := fmt.Sprintf("hsbx-idletest-%d", time.Now().UnixNano()%1e9)
			m, spec := managerFor(t, tg, rt)
			idle := m.Sandbox(sandbox.Key{Profile: profile, Task: "idle"}, spec)
			busyM := m
			if viaChannel {
				busyM = sandbox.New(sandbox.Config{Runtime: rt, StateDir: tg.StateDir, CacheDir: t.TempDir(), Environ: tg.Env,
					StopGrace: 2 * time.Second, Channel: true, Agent: enginetest.AgentBinary(t)})
			}
			busy := busyM.Sandbox(sandbox.Key{Profile: profile, Task: "busy"}, spec)
			t.Cleanup(func() { idle.Down(context.Background()); busy.Down(context.Background()) })
			idleRes, err := idle.Ensure(ctx)
			if err != nil {
				t.Fatal(err)
			}
			busyRes, err := busy.Ensure(ctx)
			if err != nil {
				t.Fatal(err)
			}
			execCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			if viaChannel {
				// The channel opens on the first exec; then the command
				// that is in flight during the sweep goes through it.
				if code, err := busy.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); code != 0 || err != nil {
					t.Fatalf("first exec: %d %v", code, err)
				}
				if st := busy.ChannelStatus(busyRes.ID); st != "up" {
					t.Fatalf("channel %q, want up", st)
				}
				defer busy.Close(ctx)
			}
			go func() { busy.Exec(execCtx, sandbox.Command{Argv: []string{"sleep", "60"}}); close(done) }()
			time.Sleep(1500 * time.Millisecond) // the exec runs by now

			stateDir := tg.StateDir
			if otherHost {
				stateDir = t.TempDir() // knows nothing of this host's locks or uses
			}
			sw := &reaper.Sweeper{RT: rt, StateDir: stateDir, StopGrace: 2 * time.Second}
			rep, err := sw.Sweep(ctx, reaper.Options{Profile: profile, MaxAge: time.Hour, Idle: time.Millisecond, Now: time.Now()}, false)
			cancel()
			<-done
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Removed) != 1 || rep.Removed[0].ID != idleRes.ID || rep.Removed[0].Reason != "idle" {
				t.Fatalf("removed %+v (errors %+v)", rep.Removed, rep.Errors)
			}
			kept := false
			for _, k := range rep.Kept {
				kept = kept || (k.ID == busyRes.ID && strings.HasPrefix(k.Reason, "running, in use"))
			}
			if !kept {
				t.Errorf("busy sandbox not kept as in use: %+v", rep.Kept)
			}
			if cs, err := rt.Inspect(ctx, busyRes.ID); err != nil || cs[0].State != runtime.StateRunning {
				t.Errorf("the busy sandbox was touched: %+v %v", cs, err)
			}
		})
	}
}

// An exec that failed to start (a typo'd command) leaves a session in
// podman's ExecIDs that runs nothing: it must not pin the sandbox against
// the idle sweep.
func TestIdleSweepIgnoresFailedExecs(t *testing.T) {
	for _, tg := range withKube(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			rt := tg.Open(t)
			profile := fmt.Sprintf("hsbx-typotest-%d", time.Now().UnixNano()%1e9)
			m, spec := managerFor(t, tg, rt)
			spec.Network = tg.Dialect() == runtime.Kubectl // air-gapped Pods are refused
			sb := m.Sandbox(sandbox.Key{Profile: profile, Task: "typo"}, spec)
			t.Cleanup(func() { sb.Down(context.Background()) })
			res, err := sb.Ensure(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"no-such-command"}}); err != nil || code < 126 {
				t.Fatalf("typo'd command: %d %v", code, err)
			}
			sw := &reaper.Sweeper{RT: rt, StateDir: t.TempDir(), StopGrace: 2 * time.Second}
			rep, err := sw.Sweep(ctx, reaper.Options{Profile: profile, MaxAge: time.Hour, Idle: time.Millisecond, Now: time.Now()}, false)
			if err != nil || len(rep.Removed) != 1 || rep.Removed[0].ID != res.ID {
				t.Fatalf("idle sweep after a failed exec: removed %+v kept %+v errors %+v (%v)", rep.Removed, rep.Kept, rep.Errors, err)
			}
		})
	}
}

// withKube is every engine target and the real Kubernetes cluster.
func withKube(t *testing.T) []enginetest.Target {
	ts := enginetest.Targets(t)
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		ts = append(ts, kt)
	}
	return ts
}

// On Kubernetes the same verdicts in a constant number of kubectl calls:
// finished Pods older than the max age go (one delete for all); running
// ones, younger ones, other profiles' and Pods without our labels stay.
func TestSweepOnKubernetes(t *testing.T) {
	tg := enginetest.Kube(t)
	ctx := context.Background()
	calls := &counter{}
	rt := tg.OpenWith(t, &proc.Runner{Log: slog.New(calls)})
	profile := fmt.Sprintf("hsbx-reaptest-%d", time.Now().UnixNano()%1e9)
	ours := func(task string) map[string]string {
		return map[string]string{"hermes-agent": "1", "hermes-profile": profile, "hermes-task-id": task, "hsbx.nonce": "n-" + task}
	}
	other := map[string]string{"hermes-agent": "1", "hermes-profile": profile + "-other", "hsbx.nonce": "n-other"}
	foreign := map[string]string{"hermes-profile": profile, "hsbx.nonce": "n-foreign"}
	run := func(name string, labels map[string]string, cmd ...string) string {
		id, err := rt.Run(ctx, runtime.RunSpec{Name: name, Labels: labels, Image: tg.Image, Cmd: cmd})
		if err != nil {
			t.Fatalf("run %s: %v", name, err)
		}
		return id
	}
	waitExited := func(ids ...string) {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			cs, err := rt.Inspect(ctx, ids...)
			n := 0
			for _, c := range cs {
				if c.State == runtime.StateExited {
					n++
				}
			}
			if err == nil && n == len(ids) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pods did not finish: %+v %v", cs, err)
			}
		}
	}
	// Each exits after 3 s: one that ended before kubectl saw it run is
	// refused ("ended before it ran"), as a 1 s one was on a loaded machine.
	exited1 := run("exited1", ours("a"), "sleep", "3")
	exited2 := run("exited2", ours("b"), "sleep", "3")
	running := run("running", ours("c"), "sleep", "infinity")
	otherProfile := run("other", other, "sleep", "3")
	notOurs := run("foreign", foreign, "sleep", "3")
	waitExited(exited1, exited2, otherProfile, notOurs)
	time.Sleep(4 * time.Second) // the exited ones age past the max age
	recent := run("recent", ours("d"), "sleep", "3")
	waitExited(recent)

	// The cluster reports finish times late and to the second: place "now"
	// and the max age between the finish times it reports.
	cs, err := rt.Inspect(ctx, exited1, exited2, recent)
	if err != nil || len(cs) != 3 {
		t.Fatalf("inspect: %+v %v", cs, err)
	}
	last := cs[0].Finished // the later of the old ones
	if cs[1].Finished.After(last) {
		last = cs[1].Finished
	}
	gap := cs[2].Finished.Sub(last)
	if gap < 2*time.Second {
		t.Fatalf("finish times %v %v %v: want the recent one seconds later", cs[0].Finished, cs[1].Finished, cs[2].Finished)
	}
	sw := &reaper.Sweeper{RT: rt}
	calls.n.Store(0)
	rep, err := sw.Sweep(ctx, reaper.Options{Profile: profile, MaxAge: 500*time.Millisecond + gap/2, Now: cs[2].Finished.Add(500 * time.Millisecond)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.n.Load(); n != 6 {
		t.Errorf("sweep made %d kubectl calls, want 6 (get by label, get by name, and for the removal get, one delete, wait, then get to verify)", n)
	}
	gone := map[string]bool{}
	for _, r := range rep.Removed {
		gone[r.ID] = true
	}
	if len(rep.Removed) != 2 || !gone[exited1] || !gone[exited2] || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for name, id := range map[string]string{"running": running, "recent": recent, "other profile": otherProfile, "foreign": notOurs} {
		if cs, err := rt.Inspect(ctx, id); err != nil || len(cs) != 1 {
			t.Errorf("%s Pod was touched: %v", name, err)
		}
	}
	if cs, _ := rt.Inspect(ctx, exited1, exited2); len(cs) != 0 {
		t.Errorf("reported removed but still there: %+v", cs)
	}
}

// managerFor is a sandbox manager on tg's engine and a spec for its image.
func managerFor(t *testing.T, tg enginetest.Target, rt runtime.Runtime) (*sandbox.Manager, sandbox.Spec) {
	m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: tg.StateDir, CacheDir: t.TempDir(), Environ: tg.Env, StopGrace: 2 * time.Second})
	spec := sandbox.DefaultSpec()
	spec.Image = tg.Image
	return m, spec
}

// A per-process sandbox whose creator died (a SIGKILLed process on this
// host: its Close never ran) on every engine and the real cluster: kept by
// a sweep while a command runs in it (on Kubernetes the command's marker
// says so), removed by the first sweep after — no --idle, whatever its age
// — and found and removed by down in either mode.
func TestPerProcessOfADeadCreatorEveryEngine(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no boot id here")
	}
	creator := strings.TrimSpace(string(boot)) + "/" + strconv.Itoa(dead.Process.Pid) // exited: no such process now
	for _, tg := range withKube(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			rt := tg.Open(t)
			kube := tg.Dialect() == runtime.Kubectl
			profile := fmt.Sprintf("hsbx-reaptest-%d", time.Now().UnixNano()%1e9)
			key := sandbox.Key{Profile: profile, Task: "eph"}
			spec := sandbox.DefaultSpec()
			spec.Image, spec.PersistAcrossProcesses = tg.Image, false
			mk := func(name string) string {
				labels := key.Labels()
				labels[sandbox.LabelEphemeral], labels[sandbox.LabelCreator] = "1", creator
				var args []string
				if !kube {
					args = []string{"--init", "--network", "none"}
				}
				id, err := rt.Run(ctx, runtime.RunSpec{Name: profile + "-" + name, Labels: labels, Image: tg.Image, Cmd: []string{"sleep", "infinity"}, Args: args})
				if err != nil {
					t.Fatalf("run %s: %v", name, err)
				}
				t.Cleanup(func() { _ = rt.Remove(context.Background(), true, id) })
				return id
			}
			id := mk("swept")
			// a command runs in it (from "another host": not this one's
			// lock) until the test says (a file appears) or a sweep ends
			// it: a 4 s sleep ended before the sweep on a loaded machine.
			gate := fmt.Sprintf("/tmp/hsbx-reap-go-%s", profile) // a fake sandbox's processes are the host's
			t.Cleanup(func() { _ = os.Remove(gate) })
			run := func(marker string) chan struct{} {
				done := make(chan struct{})
				go func() {
					defer close(done)
					spec := runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", `while [ ! -e "$G" ]; do sleep 1; done`}, Env: map[string]string{"G": gate}}
					if tg.Fake { // the fake engine's shell has no loops: a time, as before
						spec.Cmd = []string{"sleep", "4"}
					}
					if marker != "" {
						spec.Env[runtime.ExecMarker] = marker
					}
					_, _ = rt.Exec(ctx, spec)
				}()
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					cs, err := rt.Inspect(ctx, id)
					if err != nil || len(cs) != 1 {
						t.Fatal(cs, err)
					}
					if live, err := rt.LiveExecs(ctx, cs[0]); err == nil && len(live) == 1 {
						break // the engine's word that it runs
					}
					if time.Now().After(deadline) {
						t.Fatal("the command never started")
					}
				}
				return done
			}
			sw := &reaper.Sweeper{RT: rt, StateDir: t.TempDir(), StopGrace: 2 * time.Second}
			opts := reaper.Options{Profile: profile, MaxAge: time.Hour, Now: time.Now()}
			if !kube { // kubectl sees only commands that carry the marker
				// A session that is not hsbx's (no marker) keeps it.
				done := run("")
				rep, err := sw.Sweep(ctx, opts, false)
				if err != nil || len(rep.Removed) != 0 || len(rep.Kept) != 1 || !strings.Contains(rep.Kept[0].Reason, "in use: 1 live exec session") {
					t.Fatalf("sweep with a foreign command running: removed %+v kept %+v errors %+v (%v)", rep.Removed, rep.Kept, rep.Errors, err)
				}
				if !tg.Fake {
					if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"touch", gate}}); err != nil {
						t.Fatal(err)
					}
				}
				<-done
				if !tg.Fake {
					if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"rm", "-f", gate}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The dead creator's own command (it carries the marker) is
			// ended, and the sandbox goes.
			done := run("eph-cmd")
			opts.Now = time.Now()
			rep, err := sw.Sweep(ctx, opts, false)
			if err != nil || len(rep.Removed) != 1 || rep.Removed[0].ID != id || !strings.Contains(rep.Removed[0].Reason, "leftover command process(es) ended") {
				t.Fatalf("sweep with the dead creator's command running: removed %+v kept %+v errors %+v (%v)", rep.Removed, rep.Kept, rep.Errors, err)
			}
			<-done
			if cs, err := rt.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) || len(cs) != 0 {
				t.Fatalf("the swept sandbox: %+v %v", cs, err)
			}

			// down finds one, in this mode and in the shared mode
			m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: t.TempDir(), Environ: tg.Env, StopGrace: 2 * time.Second, Warn: func(string) {}})
			for _, persist := range []bool{false, true} {
				id := mk(fmt.Sprintf("down-%v", persist))
				s := spec
				s.PersistAcrossProcesses = persist
				removed, err := m.Sandbox(key, s).Down(ctx)
				if err != nil || len(removed.Containers) != 1 || removed.Containers[0].ID != id {
					t.Fatalf("down (persist_across_processes = %v): %+v %v", persist, removed, err)
				}
			}
		})
	}
}
