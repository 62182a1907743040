package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// noGVisorRemote is why a test skips gVisor on podman reached over ssh.
const noGVisorRemote = "podman's remote client cannot choose an OCI runtime: hsbx refuses oci_runtime there (TestRemoteEngineOverSSH)"

// gvisor is the test's spec under gVisor on e's engine, or a skip (an
// error under HSBX_REQUIRE_ENGINES=1) where the target has none.
func (e *env) gvisor() sandbox.Spec {
	e.t.Helper()
	if e.tg.GVisor == "" && e.kube() {
		// docs/containment.md: Debian ships no containerd-shim-runsc-v1;
		// the runc shim driving runsc never reports a Pod's container
		// started, and gVisor's own shim (built from the Go module proxy)
		// cannot start on these machines (it may not set its OOM score).
		e.t.Skip("the project's cluster has no gVisor RuntimeClass (docs/containment.md says why)")
	}
	if e.tg.GVisor == "" {
		msg := "no gVisor on " + e.tg.Name + " (HSBX_IT_GVISOR_* unset: scripts/engines.sh and scripts/kube.sh set them)"
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			e.t.Fatal(msg)
		}
		e.t.Skip(msg)
	}
	s := e.spec()
	s.OCIRuntime = e.tg.GVisor
	s.Explicit = map[string]bool{"oci_runtime": true}
	return s
}

// Under gVisor (oci_runtime) everything hsbx promises holds: the sandbox
// runs under the runtime asked for (its kernel is gVisor's), the exec
// channel and its agent, sessions, copies into the image's layer and
// into tmpfs and back, a timeout that kills, drift, and the refusals: a
// runtime the engine lacks (nothing made) and an existing sandbox under
// another runtime (not used, not removed).
func TestGVisorEveryEngine(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.gvisor()
		m := e.channelManager()
		sb := m.Sandbox(e.key("gv"), spec)
		t.Cleanup(func() { _ = sb.Close(ctx) })
		res, err := sb.Ensure(ctx)
		if err != nil || res.Action != sandbox.Created {
			t.Fatalf("Ensure under %s: %+v %v", spec.OCIRuntime, res, err)
		}
		cs, err := e.rt.Inspect(ctx, res.ID)
		if err != nil || len(cs) != 1 || cs[0].OCIRuntime != spec.OCIRuntime {
			t.Fatalf("the engine says it runs under %q (%v), want %q", cs[0].OCIRuntime, err, spec.OCIRuntime)
		}
		var out bytes.Buffer
		e.log.reset()
		if !e.tg.Fake {
			// gVisor's kernel says it is Linux 4.4.0, whatever the host's.
			if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"uname", "-r"}, Stdout: &out}); err != nil || code != 0 || strings.TrimSpace(out.String()) != "4.4.0" {
				t.Fatalf("uname -r under gVisor: %q %d %v", out.String(), code, err)
			}
		}
		// The channel: up, and a warm command makes no engine call.
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		if got := sb.ChannelStatus(res.ID); got != "up" {
			t.Fatalf("the exec channel under gVisor is %q", got)
		}
		// podman's cp cannot write into a gVisor sandbox (nor docker's
		// where gVisor sees it, in the fake): the agent went in from inside.
		fromInside := slices.ContainsFunc(e.log.all(), func(c string) bool { return strings.Contains(c, " tar -x -f - -C /") })
		if (e.tg.Fake || e.tg.Dialect() == runtime.Podman) && !fromInside {
			t.Errorf("the agent was not written from inside the sandbox:\n%s", strings.Join(e.log.all(), "\n"))
		}
		e.log.reset()
		out.Reset()
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "warm"}, Stdout: &out}); err != nil || code != 0 || out.String() != "warm\n" {
			t.Fatalf("warm exec: %q %d %v", out.String(), code, err)
		}
		if n := len(e.log.all()); n != 0 {
			t.Errorf("a warm exec under gVisor made %d engine calls:\n%s", n, strings.Join(e.log.all(), "\n"))
		}
		// A session keeps its state.
		ss := sb.Session("gv", "")
		if r, err := ss.Run(ctx, `cd /tmp && G=kept`, sandbox.Script{}); err != nil || r.Code != 0 {
			t.Fatalf("session: %+v %v", r, err)
		}
		out.Reset()
		if r, err := ss.Run(ctx, `pwd; echo $G`, sandbox.Script{Stdout: &out}); err != nil || r.Code != 0 || out.String() != "/tmp\nkept\n" {
			t.Fatalf("session state: %q %+v %v", out.String(), r, err)
		}
		// Copies: into the image's layer and into tmpfs, larger than the
		// channel's fast path (so through the agent, not the engine's cp,
		// whose writes gVisor does not show), and back out.
		src := filepath.Join(t.TempDir(), "big")
		data := bytes.Repeat([]byte("gvisor "), 1<<20) // 7 MiB
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		dsts := []string{"/gv-root.bin", "/tmp/gv-tmp.bin"}
		if e.tg.Fake {
			// The fakes run the agent on this host, paths as they are: each
			// fake its own files (two at once in "/" lost bytes to each
			// other), where any user may write.
			dsts = []string{filepath.Join(t.TempDir(), "gv-root.bin"), filepath.Join(t.TempDir(), "gv-tmp.bin")}
		}
		for _, dst := range dsts {
			if err := sb.Copies().In(ctx, src, dst); err != nil {
				t.Fatalf("CopyIn %s: %v", dst, err)
			}
			back := filepath.Join(t.TempDir(), "back")
			if err := sb.Copies().Out(ctx, dst, back); err != nil {
				t.Fatalf("CopyOut %s: %v", dst, err)
			}
			if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s came back with %d bytes (%v), want %d", dst, len(got), err, len(data))
			}
			out.Reset()
			if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"wc", "-c", dst}, Stdout: &out}); err != nil || code != 0 || !strings.HasPrefix(strings.TrimSpace(out.String()), "7340032") {
				t.Fatalf("inside, %s is %q (%d %v)", dst, out.String(), code, err)
			}
		}
		// Sessions at scale: the engine's pids limit counts gVisor's own
		// host tasks (about 8 a process); given pids_limit as it is, the
		// sandbox died at its 21st session.
		if !e.tg.Fake {
			n := enginetest.Count(40, 200)
			for i := range n {
				var out bytes.Buffer
				r, err := sb.RunScript(ctx, fmt.Sprintf("gv%d", i), sandbox.Script{Text: "echo ok", Stdout: &out})
				if err != nil || r.Code != 0 || out.String() != "ok\n" {
					t.Fatalf("session %d of %d under gVisor: %+v %v %q", i+1, n, r, err, out.String())
				}
			}
			if cs, err := e.rt.Inspect(ctx, res.ID); err != nil || len(cs) != 1 || cs[0].State != runtime.StateRunning {
				t.Fatalf("after %d sessions under gVisor the sandbox is %+v (%v)", n, cs, err)
			}
			for i := range n {
				_ = sb.Session(fmt.Sprintf("gv%d", i), "").Close(ctx)
			}
		}

		// First contact: each agent-backed feature, on the plain path (no
		// channel), finds no agent of its own in the sandbox (runsc's
		// answer through docker is on stdout), installs it, and runs what
		// it was asked once, reporting it as done.
		firstContact(t, e, e.manager().Sandbox(e.key("gv"), spec))
		// Every agent mode as another user has that user's permissions
		// (the engine's exec --user does not hold a process to them under
		// gVisor: the agent switches user).
		if !e.tg.Fake {
			userConfined(t, sb, "/"+e.base+"gvconfined")
			var se *sandbox.SpecError
			err := files.Of(e.manager().Sandbox(e.key("gv"), spec)).Write(ctx, "/"+e.base+"gvconfined/ro", strings.NewReader("x"), files.Options{User: "nobody"})
			if !errors.As(err, &se) || se.Setting != "user" || !strings.Contains(err.Error(), "gVisor") {
				t.Errorf("as nobody without the channel under gVisor: %v, want the user refused (only the agent confines it)", err)
			}
		}

		// A timeout kills the command in the sandbox.
		start := time.Now()
		_, err = sb.Exec(ctx, sandbox.Command{Argv: []string{"sleep", "60"}, Timeout: time.Second})
		if !errors.Is(err, sandbox.ErrCommandTimeout) || time.Since(start) > 20*time.Second {
			t.Fatalf("timeout under gVisor: %v after %s", err, time.Since(start))
		}

		// Drift: the runtime is a setting the sandbox is made from.
		plain := e.spec()
		again, err := e.channelManager().Sandbox(e.key("gv"), plain).Ensure(ctx)
		if err != nil || again.ID != res.ID || !slices.Equal(again.Drift, []string{"oci_runtime"}) {
			t.Fatalf("Ensure without oci_runtime: %+v %v", again, err)
		}

		// Asked for gVisor, found one under the default: refused, kept.
		other, err := e.manager().Sandbox(e.key("plain"), plain).Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ie *sandbox.IsolationError
		_, err = e.manager().Sandbox(e.key("plain"), spec).Ensure(ctx)
		if !errors.As(err, &ie) || !errors.Is(err, sandbox.ErrIsolation) || ie.Want != spec.OCIRuntime {
			t.Fatalf("Ensure under gVisor of a sandbox under the default: %v", err)
		}
		if cs, err := e.rt.Inspect(ctx, other.ID); err != nil || len(cs) != 1 || cs[0].State != runtime.StateRunning {
			t.Fatalf("the refused sandbox is not kept as it was: %+v %v", cs, err)
		}

		// A per-process sandbox under gVisor: made, used, and gone with
		// its process's Close.
		eph := spec
		eph.PersistAcrossProcesses = false
		esb := e.channelManager().Sandbox(e.key("gv-eph"), eph)
		eres, err := esb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if code, err := esb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "eph"}, Stdout: &out}); err != nil || code != 0 || out.String() != "eph\n" {
			t.Fatalf("per-process sandbox under gVisor: %q %d %v", out.String(), code, err)
		}
		if err := esb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if cs, _ := e.rt.Inspect(ctx, eres.ID); len(cs) != 0 && cs[0].State != runtime.StateRemoving {
			t.Fatalf("Close left the per-process sandbox: %+v", cs)
		}

		// Down removes it, as any other.
		if _, err := sb.Down(ctx); err != nil {
			t.Fatal(err)
		}
		if cs, _ := e.rt.Inspect(ctx, res.ID); len(cs) != 0 {
			t.Fatalf("down left %+v", cs)
		}
	})
}

// A runtime the engine lacks is refused before anything is made, on every
// engine (the cluster's RuntimeClass admission included), with the
// runtimes it has named.
func TestOCIRuntimeRefusedBeforeAnythingIsMade(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		none := e.spec()
		none.OCIRuntime = "hsbx-no-such-runtime"
		e.log.reset()
		_, err := e.manager().Sandbox(e.key("none"), none).Ensure(ctx)
		var oe *sandbox.OCIRuntimeError
		if !errors.As(err, &oe) || !errors.Is(err, runtime.ErrNoOCIRuntime) || oe.Runtime != none.OCIRuntime {
			t.Fatalf("an unknown runtime: %v", err)
		}
		left, err := e.rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx.task=" + e.key("none").Task}})
		if err != nil || len(left) != 0 {
			t.Fatalf("an unknown runtime left %+v (%v)", left, err)
		}
		// docker and kubectl list what they have: refused without a run;
		// podman is not asked (it takes any path, and judges at create).
		// (One info is the host's facts, asked once and cached.)
		if e.tg.Dialect() == runtime.Podman && count(e.log.all(), " info ") > 1 {
			t.Errorf("podman was asked for its runtimes, which cannot settle it:\n%s", strings.Join(e.log.all(), "\n"))
		}
		if e.tg.Dialect() != runtime.Podman && slices.ContainsFunc(e.log.all(), func(c string) bool { return strings.Contains(c, " run ") || strings.Contains(c, " create ") }) {
			t.Errorf("an engine that lists its runtimes was asked to make one anyway:\n%s", strings.Join(e.log.all(), "\n"))
		}
	})
}

// What a runtime's start failure says to do, for the failures of gVisor
// measured here (the engines' words, from their stderr).
func TestOCIRuntimeErrorHints(t *testing.T) {
	for _, tc := range []struct {
		dialect runtime.Dialect
		msg     string
		want    string
	}{
		{runtime.Docker, `docker: Error response from daemon: OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/27732/ns/net": cannot run with network enabled in root network namespace: unknown`, "--network=host"},
		{runtime.Podman, `Error: /usr/bin/runsc: creating container: cannot set up cgroup for root: configuring cgroup: mkdir /sys/fs/cgroup/cpuacct/1fa7: permission denied: OCI permission denied`, "--ignore-cgroups"},
		{runtime.Docker, "something else", "oci_runtime = \"\""},
	} {
		e := &sandbox.OCIRuntimeError{Runtime: "runsc", Dialect: tc.dialect, Err: errors.New(tc.msg)}
		if h := e.Hint(); !strings.Contains(h, tc.want) {
			t.Errorf("%s: hint %q, want it to name %q", tc.msg, h, tc.want)
		}
	}
	missing := &sandbox.OCIRuntimeError{Runtime: "gvisor", Dialect: runtime.Kubectl, Err: runtime.ErrNoOCIRuntime}
	if !strings.Contains(missing.Error(), `the cluster has no RuntimeClass "gvisor"`) || !strings.Contains(missing.Hint(), "kubectl get runtimeclasses") {
		t.Errorf("kubectl: %q / %q", missing.Error(), missing.Hint())
	}
}

// firstContact runs each agent-backed feature through sb (a handle without
// the channel, on a running sandbox) as the first to find the agent
// missing (a copy takes the channel under gVisor: its first contact is
// the channel's): on the real engines the agent is removed before each, on the
// fakes (which cannot remove it) the first is the background process,
// the one a caller that retries would run twice.
func firstContact(t *testing.T, e *env, sb *sandbox.Sandbox) {
	t.Helper()
	ctx := context.Background()
	dir := "/" + e.base + "first"
	if e.tg.Fake {
		dir = t.TempDir() // the fakes' agent works on this host's files
	}
	fresh := func() {
		if e.tg.Fake {
			return
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "rm -f /.hsbx-agent-*; mkdir -p " + dir}}); err != nil || code != 0 {
			t.Fatalf("removing the agent: %d %v", code, err)
		}
	}
	marker := e.base + "first-bg"
	fresh()
	p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "true # " + marker}})
	if err != nil {
		t.Fatalf("a background process on first contact: %v", err)
	}
	procs, err := background.Of(sb).List(ctx, "")
	n := 0
	for _, pi := range procs {
		if strings.Contains(strings.Join(pi.Argv, " "), marker) {
			n++
		}
	}
	if err != nil || n != 1 {
		t.Fatalf("after one start on first contact: %d processes of it (%v), want 1", n, err)
	}
	if info, err := p.Wait(ctx); err != nil || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Errorf("the background process: %+v %v", info, err)
	}
	for _, f := range []struct {
		name string
		do   func() error
	}{
		{"write", func() error { return files.Of(sb).Write(ctx, dir+"/f", strings.NewReader("first"), files.Options{}) }},
		{"read", func() error {
			var b bytes.Buffer
			if err := files.Of(sb).Read(ctx, dir+"/f", &b, files.Options{}); err != nil || b.String() != "first" {
				return fmt.Errorf("%q %v", b.String(), err)
			}
			return nil
		}},
		{"list", func() error {
			ents, err := files.Of(sb).List(ctx, dir, files.Options{})
			if err != nil || len(ents) != 1 || ents[0].Name != "f" {
				return fmt.Errorf("%+v %v", ents, err)
			}
			return nil
		}},
		{"remove", func() error { return files.Of(sb).Remove(ctx, dir+"/f", files.Options{}) }},
		{"session", func() error {
			var out bytes.Buffer
			r, err := sb.Session("first", "").Run(ctx, "echo ok", sandbox.Script{Stdout: &out})
			if err != nil || r.Code != 0 || out.String() != "ok\n" {
				return fmt.Errorf("%+v %q %v", r, out.String(), err)
			}
			return nil
		}},
		{"forward", func() error {
			// The connection's bytes are the listener's alone: no
			// engine's words in them.
			if _, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"nc", "-l", "-p", "8091", "-e", "echo", "hi"}}); err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond)
			fresh()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { _ = forward.Run(fctx, sb, ln, forward.Options{Port: 8091}) }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			got, err := io.ReadAll(c)
			if string(got) != "hi\n" {
				return fmt.Errorf("the connection carried %q (%v), want the listener's hi", got, err)
			}
			return nil
		}},
	} {
		if e.tg.Fake && f.name != "write" {
			continue // its agent is there now
		}
		if f.name != "forward" { // it removes the agent once its listener runs
			fresh()
		}
		if err := f.do(); err != nil {
			t.Errorf("%s on first contact: %v", f.name, err)
		}
	}
}
