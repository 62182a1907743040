package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// Sessions through the Go package on every target (the fakes, docker,
// rootful and rootless podman, the Kubernetes cluster): state carries
// over with no engine call, a timeout keeps the session, concurrent
// scripts on one session run one at a time, sessions are apart, a script
// that ends its shell says so and so does the next run, list and close.
func TestSessionsEveryEngine(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb, _ := e.channelUp("sess")
		run := func(ss *sandbox.Session, text string, timeout time.Duration) (sandbox.ScriptResult, string, string, error) {
			t.Helper()
			var out, errOut bytes.Buffer
			res, err := ss.Run(ctx, text, sandbox.Script{Stdout: &out, Stderr: &errOut, Timeout: timeout})
			return res, out.String(), errOut.String(), err
		}
		a := sb.Session("a", "")
		first, _, _, err := run(a, `mkdir -p /tmp/sess-a && cd /tmp/sess-a && X="a,b=c d"; export Y=1; f() { echo "fn $1"; }`, 0)
		if err != nil || first.Code != 0 || !first.New || first.Reset != "" || first.ShellID == "" {
			t.Fatalf("first run: %+v %v", first, err)
		}
		e.log.reset()
		res, out, errOut, err := run(a, `pwd; echo "$X"; f x; echo err >&2; (exit 4)`, 0)
		if err != nil || res.Code != 4 || out != "/tmp/sess-a\na,b=c d\nfn x\n" || errOut != "err\n" || res.New || res.ShellID != first.ShellID {
			t.Fatalf("state did not carry over: %+v %q %q %v", res, out, errOut, err)
		}
		if n := len(e.log.all()); n != 0 {
			t.Errorf("a warm session run made %d engine calls, want 0:\n%s", n, strings.Join(e.log.all(), "\n"))
		}
		// $? carries over too.
		if _, out, _, _ := run(a, `echo $?`, 0); out != "4\n" {
			t.Errorf("$? after a status of 4: %q", out)
		}

		// Another session is another shell.
		b := sb.Session("b", "")
		if res, out, _, err := run(b, `pwd; echo "${X:-unset}"`, 0); err != nil || !res.New || res.ShellID == first.ShellID || out == "/tmp/sess-a\na,b=c d\n" {
			t.Fatalf("session b: %+v %q %v", res, out, err)
		}

		// A timeout stops the script, not the session.
		start := time.Now()
		_, _, _, err = run(a, `sleep 60; echo after`, time.Second)
		var ie *sandbox.InterruptedError
		if !errors.As(err, &ie) || !errors.Is(ie.Cause, sandbox.ErrCommandTimeout) {
			t.Fatalf("timeout: %v", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("the timeout took %s", d)
		}
		if res, out, _, err := run(a, `pwd; echo "$X"`, 0); err != nil || res.ShellID != first.ShellID || out != "/tmp/sess-a\na,b=c d\n" {
			t.Fatalf("after the timeout: %+v %q %v", res, out, err)
		}

		// Concurrent read-modify-write scripts on one session: one at a
		// time, none lost.
		if _, _, _, err := run(a, `N=0`, 0); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, err := a.Run(ctx, `n=$N; sleep 0.05; N=$((n+1))`, sandbox.Script{}); err != nil || res.Code != 0 {
					t.Errorf("concurrent run: %+v %v", res, err)
				}
			}()
		}
		wg.Wait()
		if _, out, _, _ := run(a, `echo $N`, 0); out != "8\n" {
			t.Errorf("8 concurrent increments gave %q", out)
		}

		// A script that ends its shell says so; the next run says reset.
		res, _, _, err = run(a, `exit 3`, 0)
		if err != nil || res.Code != 3 || res.Ended == "" {
			t.Fatalf("exit 3: %+v %v", res, err)
		}
		res, out, _, err = run(a, `pwd; echo "${X:-unset}"`, 0)
		if err != nil || !res.New || res.Reset == "" || res.ShellID == first.ShellID || strings.Contains(out, "a,b=c") {
			t.Fatalf("after exit 3: %+v %q %v", res, out, err)
		}

		infos, err := sb.Sessions(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, in := range infos {
			names[in.Name] = true
		}
		if !names["a"] || !names["b"] || len(infos) != 2 {
			t.Fatalf("sessions: %+v", infos)
		}
		// Close ends what the session started, however it detached.
		tag := "7" + strings.Trim(e.base, "t-") // this target's: the fakes' jobs are the host's processes
		if res, _, _, err := run(b, `setsid sleep `+tag+`1 & (trap "" HUP; sleep `+tag+`2) & sh -c 'trap "" HUP; exec sleep `+tag+`3' & true`, 0); err != nil || res.Code != 0 {
			t.Fatalf("starting detached jobs: %+v %v", res, err)
		}
		jobs := func() string {
			var out bytes.Buffer
			_, _ = sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep "^sleep ` + tag + `" || true`}, Stdout: &out})
			return strings.TrimSpace(out.String())
		}
		for deadline := time.Now().Add(5 * time.Second); strings.Count(jobs(), "\n") < 2 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		}
		if got := jobs(); strings.Count(got, "\n") != 2 {
			t.Fatalf("the 3 detached jobs did not all start: %q", got)
		}
		for _, ss := range []*sandbox.Session{a, b} {
			if err := ss.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ss.Close(ctx); !errors.Is(err, sandbox.ErrNoSession) {
				t.Fatalf("closing %s twice: %v", ss.Name(), err)
			}
		}
		if infos, err := sb.Sessions(ctx, ""); err != nil || len(infos) != 0 {
			t.Fatalf("after close: %+v %v", infos, err)
		}
		if left := jobs(); left != "" {
			t.Fatalf("after close, the session's jobs still run: %q", left)
		}
		if _, err := sb.RunScript(ctx, "../x", sandbox.Script{Text: "true"}); !errors.Is(err, sandbox.ErrBadSessionName) {
			t.Fatalf("a bad name: %v", err)
		}
	})
}

// Two hosts (state directories) making first contact with a sandbox at
// once (on an engine reached over ssh too: two machines sharing it), eight session runs each, on fresh sandboxes (1 in the gate, 8
// under make soak; run with -count to hunt a race longer): every run works, whichever host's
// agent install lands first (one host's copy never rewrites a file the
// other's agent is starting a keeper from: "text file busy").
func TestFirstContactFromTwoHosts(t *testing.T) {
	eachWithSSH(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		trials := enginetest.Count(1, 8)
		for trial := range trials {
			key := e.key(fmt.Sprintf("contact%d", trial))
			var hosts []*sandbox.Sandbox
			for range 2 {
				m := e.managerWith(func(c *sandbox.Config) { c.StateDir = e.tg.AnotherStateDir(t) })
				hosts = append(hosts, m.Sandbox(key, e.spec()))
			}
			if _, err := hosts[0].Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for h, sb := range hosts {
				for i := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var out, errOut bytes.Buffer
						res, err := sb.RunScript(ctx, fmt.Sprintf("h%d-%d", h, i), sandbox.Script{Text: "echo ok", Stdout: &out, Stderr: &errOut})
						if err != nil || res.Code != 0 || out.String() != "ok\n" {
							t.Errorf("trial %d, host %d, run %d: %+v %v (stdout %q, stderr %q)", trial, h, i, res, err, out.String(), errOut.String())
						}
					}()
				}
			}
			wg.Wait()
			for _, sb := range hosts {
				_ = sb.Close(ctx)
			}
			if _, err := hosts[0].Down(ctx); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				return
			}
		}
	})
}

// Every host (machine: on an engine reached over ssh too) hears that the
// shell it last used is gone, whichever host arrives first: after another host's close and run, and after a restart
// of the sandbox (a new Pod on Kubernetes).
func TestEveryHostHearsOfAReset(t *testing.T) {
	eachWithSSH(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		key := e.key("reset")
		var a, b *sandbox.Session
		var sbA *sandbox.Sandbox
		for i, ss := range []**sandbox.Session{&a, &b} {
			m := e.managerWith(func(c *sandbox.Config) { c.StateDir, c.Channel = e.tg.AnotherStateDir(t), i == 0 })
			sb := m.Sandbox(key, e.spec())
			t.Cleanup(func() { _ = sb.Close(ctx) })
			*ss = sb.Session("s", "")
			if i == 0 {
				sbA = sb
			}
		}
		run := func(ss *sandbox.Session, text string) (sandbox.ScriptResult, string) {
			t.Helper()
			var out bytes.Buffer
			res, err := ss.Run(ctx, text, sandbox.Script{Stdout: &out})
			if err != nil || res.Code != 0 {
				t.Fatalf("%q: %+v %v", text, res, err)
			}
			return res, out.String()
		}
		if res, _ := run(a, `cd /tmp; export V=fromA`); !res.New || res.Reset != "" {
			t.Fatalf("A's first run: %+v", res)
		}
		if res, out := run(b, `echo "$V"`); res.New || res.Reset != "" || out != "fromA\n" {
			t.Fatalf("B joining A's shell: %+v %q", res, out)
		}
		// B closes it and starts another: A is told, though the shell it
		// reaches is not new.
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if res, _ := run(b, `export V=fromB2`); !res.New || res.Reset != "" {
			t.Fatalf("B's run after its close: %+v (a close is not a reset for the host that closed)", res)
		}
		res, out := run(a, `echo "$V in $PWD"`)
		if res.New || !strings.Contains(res.Reset, "the shell this host last used is gone") || out == "fromA in /tmp\n" {
			t.Fatalf("A after B's close and run: %+v %q, want a reset", res, out)
		}
		if res, _ := run(a, `true`); res.Reset != "" {
			t.Fatalf("A told twice: %+v", res)
		}
		// A restart: B arrives first, A second; both are told.
		if _, err := sbA.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for _, ss := range []*sandbox.Session{b, a} {
			if res, _ := run(ss, `true`); res.Reset == "" {
				t.Fatalf("after a restart: %+v, want a reset", res)
			}
		}
	})
}

// taskCount is how many tasks (processes and their threads: what
// pids_limit counts) the sandbox has, counted from inside it.
func taskCount(t *testing.T, sb *sandbox.Sandbox) int {
	t.Helper()
	var out bytes.Buffer
	code, err := sb.Exec(context.Background(), sandbox.Command{Argv: []string{"sh", "-c", `n=0; for p in /proc/[0-9]*/task/*; do n=$((n+1)); done; echo $n`}, Stdout: &out})
	var n int
	if _, serr := fmt.Sscan(out.String(), &n); err != nil || code != 0 || serr != nil {
		t.Fatalf("counting tasks: %d %v %q", code, err, out.String())
	}
	return n - 1 // not the counting shell itself
}

// 200 sessions under the default limits (pids_limit 256) under make
// soak, 20 in the gate: each is one shell, all work and are listed, and
// closing them gives every process back.
func TestTwoHundredSessions(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb, _ := e.channelUp("scale")
		fake := strings.HasPrefix(e.tg.Name, "fake")
		before := 0
		if !fake { // the fakes' sessions are this host's processes
			before = taskCount(t, sb)
		}
		n := enginetest.Count(20, 200)
		for i := range n {
			var out bytes.Buffer
			res, err := sb.RunScript(ctx, fmt.Sprintf("s%d", i), sandbox.Script{Text: "echo ok", Stdout: &out})
			if err != nil || res.Code != 0 || !res.New || out.String() != "ok\n" {
				t.Fatalf("session %d of %d: %+v %v %q", i+1, n, res, err, out.String())
			}
		}
		if !fake {
			during := taskCount(t, sb)
			t.Logf("%d tasks before, %d with %d sessions", before, during, n)
			if during-before > n+16 {
				t.Errorf("%d sessions took %d tasks, want about one each", n, during-before)
			}
		}
		infos, err := sb.Sessions(ctx, "")
		if err != nil || len(infos) != n {
			t.Fatalf("listing %d sessions: %d listed, %v", n, len(infos), err)
		}
		for i := range n {
			if err := sb.Session(fmt.Sprintf("s%d", i), "").Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if fake {
			return
		}
		after := 0
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			// The agent's Go runtime keeps the few threads it grew while
			// busy (a constant, not one a session).
			if after = taskCount(t, sb); after <= before+4 {
				t.Logf("%d tasks after closing them all", after)
				return
			}
		}
		t.Errorf("%d tasks before the sessions, %d after closing them all", before, after)
	})
}

// At the process limit a new session is refused with ErrResourceExhausted
// (not a crash, not the script's status), every earlier one keeps
// working, and so does a new one once others are closed; a command that
// cannot start for want of processes is hsbx's failure too, never 126.
func TestSessionsAtTheProcessLimit(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if strings.HasPrefix(e.tg.Name, "fake") {
			t.Skip("the fakes enforce no process limit")
		}
		e.skipOnKube("Kubernetes sets the pids limit per node, not per Pod")
		ctx := context.Background()
		spec := e.spec()
		spec.PidsLimit = 40
		spec.Explicit = map[string]bool{"pids_limit": true}
		sb := e.channelManager().Sandbox(e.key("limit"), spec)
		t.Cleanup(func() { _, _ = sb.Down(ctx) })
		if _, err := sb.Ensure(ctx); err != nil {
			var se *sandbox.SpecError
			if errors.As(err, &se) {
				t.Skipf("this engine cannot limit processes: %v", err)
			}
			t.Fatal(err)
		}
		opened := 0
		for ; opened < 60; opened++ {
			var errOut bytes.Buffer
			res, err := sb.RunScript(ctx, fmt.Sprintf("s%d", opened), sandbox.Script{Text: "echo ok", Stderr: &errOut})
			if err == nil && res.Code == 0 {
				continue
			}
			var sess *sandbox.SessionError
			if !errors.Is(err, sandbox.ErrResourceExhausted) || !errors.As(err, &sess) || sess.Session != fmt.Sprintf("s%d", opened) || errOut.Len() != 0 {
				t.Fatalf("session %d at the limit: %+v %v (stderr %q), want ErrResourceExhausted", opened, res, err, errOut.String())
			}
			break
		}
		if opened == 0 || opened == 60 {
			t.Fatalf("%d sessions opened under pids_limit 40", opened)
		}
		for i := range opened {
			var out bytes.Buffer
			if res, err := sb.RunScript(ctx, fmt.Sprintf("s%d", i), sandbox.Script{Text: "echo still", Stdout: &out}); err != nil || res.Code != 0 || res.New || out.String() != "still\n" {
				t.Fatalf("session %d after the limit: %+v %v %q", i, res, err, out.String())
			}
		}
		// Fill what is left with a session's background jobs: then a
		// command cannot start (hsbx's error, not 126), a copy out falls
		// back to the engine's cp, and closing the session frees them.
		if _, err := sb.RunScript(ctx, "s0", sandbox.Script{Text: `i=0; while [ $i -lt 60 ]; do sleep 1000 & i=$((i+1)); done 2>/dev/null; true`}); err != nil {
			t.Fatal(err)
		}
		// Commands at once, each refused: the agent that refuses them
		// makes no thread it cannot have (it would die, and every
		// command with it).
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}})
				if !errors.Is(err, sandbox.ErrResourceExhausted) {
					t.Errorf("exec with no process left: %d %v, want ErrResourceExhausted, never 126", code, err)
				}
			}()
		}
		wg.Wait()
		dst := filepath.Join(t.TempDir(), "hostname")
		if err := sb.Copies().Out(ctx, "/etc/hostname", dst); err != nil {
			t.Errorf("cp out with no process left: %v, want the engine's cp to make it", err)
		} else if b, _ := os.ReadFile(dst); len(b) == 0 {
			t.Errorf("cp out with no process left made an empty file")
		}
		for i := range 4 {
			if err := sb.Session(fmt.Sprintf("s%d", i), "").Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := sb.RunScript(ctx, "again", sandbox.Script{Text: "true"}); err != nil || res.Code != 0 {
			t.Fatalf("a session after closing some: %+v %v", res, err)
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			t.Fatalf("exec after closing the session that filled the sandbox: %d %v", code, err)
		}
	})
}

// A process of the sandbox's user on the session server's socket that
// accepts and never answers: a run with a timeout ends with it (timed
// out, never "the channel broke"), a listing and a run without one fail
// within their bounds, and commands go on working.
func TestSessionServerSquatted(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.managerWith(func(c *sandbox.Config) { c.Agent = enginetest.HostileAgentBinary(t) })
		sb := m.Sandbox(e.key("squat"), e.spec())
		t.Cleanup(func() { _, _ = sb.Down(ctx); _ = sb.Close(ctx) })
		var out bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `echo "${HSBX_SESSIONS_DIR:-/tmp}/.hsbx-sessions2-$(id -u)/.server.sock"`}, Stdout: &out}); err != nil || code != 0 {
			t.Fatalf("finding the sessions directory: %d %v", code, err)
		}
		sock := strings.TrimSpace(out.String())
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"/proc/self/exe", "squat", sock}}); err != nil || code != 0 {
			t.Fatalf("squatting %s: %d %v", sock, code, err)
		}

		start := time.Now()
		_, err := sb.RunScript(ctx, "s", sandbox.Script{Text: "true", Timeout: 2 * time.Second})
		var ie *sandbox.InterruptedError
		if d := time.Since(start); !errors.As(err, &ie) || !errors.Is(ie.Cause, sandbox.ErrCommandTimeout) || d > 8*time.Second {
			t.Fatalf("a run with a 2s timeout: %v after %s, want the timeout", err, d)
		}
		start = time.Now()
		if _, err := sb.Sessions(ctx, ""); err == nil || !strings.Contains(err.Error(), "did not answer") || time.Since(start) > 10*time.Second {
			t.Fatalf("listing: %v after %s", err, time.Since(start))
		}
		start = time.Now()
		_, err = sb.RunScript(ctx, "s", sandbox.Script{Text: "true"})
		var se *sandbox.SessionError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, "did not answer within") || time.Since(start) > 16*time.Second {
			t.Fatalf("a run without a timeout: %v after %s", err, time.Since(start))
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			t.Fatalf("a command after all that: %d %v", code, err)
		}
	})
}
