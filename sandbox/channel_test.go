package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// channelManager is e.manager() with the in-process exec channel on.
func (e *env) channelManager() *sandbox.Manager { return e.managerWith(func(*sandbox.Config) {}) }

// managerWith is channelManager's Manager adjusted by tweak: another
// host's state dir, another agent, the channel off.
func (e *env) managerWith(tweak func(*sandbox.Config)) *sandbox.Manager {
	c := sandbox.Config{
		Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
		Environ: e.tg.Env, UID: 0, GID: 0, StopGrace: 5 * time.Second,
		Warn: func(string) {}, Channel: true, Agent: enginetest.AgentBinary(e.t),
	}
	tweak(&c)
	return sandbox.New(c)
}

// execRoute is how a test's commands reach the sandbox: through the exec
// channel, or the plain path (the channel off).
type execRoute struct {
	name    string
	channel bool
}

// eachRoute runs fn as a subtest through the channel and on the plain
// path, each with a Manager of its own.
func (e *env) eachRoute(t *testing.T, fn func(t *testing.T, route execRoute, m *sandbox.Manager)) {
	for _, r := range []execRoute{{"channel", true}, {"plain", false}} {
		t.Run(r.name, func(t *testing.T) { fn(t, r, e.managerWith(func(c *sandbox.Config) { c.Channel = r.channel })) })
	}
}

// channelUp is a sandbox of task with its in-process channel up (one
// command has gone through it), closed when the test ends.
func (e *env) channelUp(task string) (*sandbox.Sandbox, sandbox.Result) {
	e.t.Helper()
	ctx := context.Background()
	sb := e.channelManager().Sandbox(e.key(task), e.spec())
	e.t.Cleanup(func() { _ = sb.Close(ctx) })
	res, err := sb.Ensure(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil {
		e.t.Fatal(err)
	}
	if got := sb.ChannelStatus(res.ID); got != "up" {
		e.t.Fatalf("channel %q, want up", got)
	}
	return sb, res
}

// Every exec behaviour, on both paths, on every engine: the channel must
// be indistinguishable from the plain exec but for its speed.
func TestExecSemanticsBothPaths(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, path := range []string{"plain", "channel"} {
			t.Run(path, func(t *testing.T) {
				ctx := context.Background()
				sb := e.shared(t, path == "channel")
				res, err := sb.Ensure(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"plain": "off", "channel": "up"}[path]
				if got := sb.ChannelStatus(res.ID); got != want {
					t.Fatalf("channel status %q, want %q", got, want)
				}
				e.log.reset()
				checkExecSemantics(t, sb)
				if n := len(e.log.all()); path == "channel" && n != 0 {
					t.Errorf("the channel made %d engine calls, want 0:\n%s", n, strings.Join(e.log.all(), "\n"))
				}
			})
		}
	})
}

func checkExecSemantics(t *testing.T, sb *sandbox.Sandbox) {
	ctx := context.Background()
	run := func(c sandbox.Command) (int, string, string, error) {
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		code, err := sb.Exec(ctx, c)
		return code, out.String(), errb.String(), err
	}
	cases := []struct {
		name        string
		cmd         sandbox.Command
		code        int
		out, errOut string
	}{
		{"status and streams", sandbox.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, 3, "out\n", "err\n"},
		{"engine words are the command's", sandbox.Command{Argv: []string{"sh", "-c", "echo 'Error: No such container: x' >&2; exit 1"}}, 1, "", "Error: No such container: x\n"},
		{"env verbatim", sandbox.Command{Argv: []string{"sh", "-c", `echo "[$X]"`}, Env: map[string]string{"X": "a,b=c d"}}, 0, "[a,b=c d]\n", ""},
		{"workdir", sandbox.Command{Argv: []string{"pwd"}, WorkDir: "/tmp"}, 0, "/tmp\n", ""},
		{"no stdin", sandbox.Command{Argv: []string{"cat"}}, 0, "", ""},
		{"status 255", sandbox.Command{Argv: []string{"sh", "-c", "exit 255"}}, 255, "", ""},
	}
	for _, c := range cases {
		code, out, errOut, err := run(c.cmd)
		if err != nil || code != c.code || out != c.out || errOut != c.errOut {
			t.Errorf("%s: got (%d, %q, %q, %v), want (%d, %q, %q)", c.name, code, out, errOut, err, c.code, c.out, c.errOut)
		}
	}

	// stdin streamed and output byte-exact, 20 MB each way
	data := bytes.Repeat([]byte("hsbx\x00\xff\n"), 20<<20/7)
	sum := sha256.Sum256(data)
	h := sha256.New()
	code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"cat"}, Stdin: bytes.NewReader(data), Stdout: h})
	if err != nil || code != 0 || !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Errorf("20 MB through cat: %d %v, checksum equal %v", code, err, bytes.Equal(h.Sum(nil), sum[:]))
	}

	// --timeout kills the command's processes in the sandbox
	ie := interruptStarted(t, time.Second, func(wait time.Duration, out io.Writer) error {
		_, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo up; sleep 307 & sleep 308"}, Timeout: wait, Stdout: out})
		return err
	})
	if !errors.Is(ie, sandbox.ErrCommandTimeout) || ie.KillErr != nil || ie.Killed < 1 {
		t.Errorf("timeout: %v", ie)
	}
	_, ps, _, _ := run(sandbox.Command{Argv: []string{"ps"}})
	if strings.Contains(ps, "sleep 307") || strings.Contains(ps, "sleep 308") {
		t.Errorf("the timed-out command lives on:\n%s", ps)
	}

	// 16 concurrent commands keep their own status and output
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, _, err := run(sandbox.Command{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i)}})
			if err != nil || code != i || out != fmt.Sprintf("%d\n", i) {
				mu.Lock()
				t.Errorf("concurrent %d: %d %q %v", i, code, out, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// The agent dying (killed in the sandbox) breaks only the command it ran:
// that one is reported, never rerun, and the next exec works.
func TestChannelSurvivesTheAgentDying(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.channelManager().Sandbox(e.key("agentdies"), e.spec())
		t.Cleanup(func() { _ = sb.Close(ctx) })
		res, err := sb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || sb.ChannelStatus(res.ID) != "up" {
			t.Fatalf("channel not up: %v %s", err, sb.ChannelStatus(res.ID))
		}
		// The command kills its own agent (its parent): the channel breaks
		// under it. It ran once; it is not retried.
		var out bytes.Buffer
		count := "/tmp/count-" + e.base // the fakes' sandboxes share the host's /tmp
		_, err = sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo ran >> " + count + "; kill -9 $PPID; sleep 5"}, Stdout: &out})
		if err == nil {
			t.Fatal("a command whose channel broke reported success")
		}
		// Its processes live on without the agent (sleep 5): hsbx, finding
		// the sandbox running, kills them by their marker and says so.
		if m := regexp.MustCompile(`hsbx stopped the command \((\d+) processes killed\)`).FindStringSubmatch(err.Error()); m == nil || m[1] == "0" {
			t.Fatalf("the orphaned command was not stopped: %v", err)
		}
		out.Reset()
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "cat " + count + "; rm -f " + count}, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		if out.String() != "ran\n" {
			t.Fatalf("the command ran %q times, want once", out.String())
		}
	})
}

// forgeScript is a hostile process in the sandbox (not the command): it
// finds every hsbx agent and writes to its stdout, through /proc, a
// forged exit frame (status 42) for streams 1..7 and then half a frame
// (a header promising 1 MiB); it prints how many writes got through and
// how many agents it found (none found would prove nothing).
const forgeScript = `n=0 a=0
for p in /proc/[0-9]*; do
  tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qE '^/.hsbx-agent-[0-9a-f]*(\.new-[0-9a-f]* install-as [^ ]*)? agent' || continue
  a=$((a+1))
  for s in 1 2 3 4 5 6 7; do
    printf "\010\000\000\000\00$s\000\000\000\013{\"code\":42}" 2>/dev/null > "$p/fd/1" && n=$((n+1))
  done
  printf '\005\000\000\000\001\000\020\000' 2>/dev/null > "$p/fd/1" && n=$((n+1))
done
echo "$n $a"`

// The sandbox is untrusted: a process in it other than the command must
// not be able to speak for the agent — end a running command early with a
// forged status, inject output, or wedge the channel with a cut frame.
func TestChannelFramesCannotBeForgedFromTheSandbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes run the agent on the host, as root, whom no agent can keep out")
		}
		ctx := context.Background()
		sb, res := e.channelUp("forge")
		type result struct {
			code int
			out  string
			err  error
		}
		done := make(chan result, 1)
		go func() {
			var out bytes.Buffer
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "sleep 3; echo real; exit 7"}, Stdout: &out})
			done <- result{code, out.String(), err}
		}()
		time.Sleep(500 * time.Millisecond) // the command is running
		// The hostile process comes in another way: a plain exec.
		plain := e.manager().Sandbox(e.key("forge"), e.spec())
		var fout, ferr bytes.Buffer
		code, err := plain.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", forgeScript}, Stdout: &fout, Stderr: &ferr})
		if err != nil || code != 0 {
			t.Fatalf("forger: %d %v %s", code, err, ferr.String())
		}
		switch f := strings.Fields(fout.String()); {
		case len(f) != 2 || f[1] == "0":
			t.Errorf("the forger found no agent to write to (%q): the test proves nothing", fout.String())
		case f[0] != "0":
			t.Errorf("a process in the sandbox wrote %s frame(s) into the agent's channel", f[0])
		}
		r := <-done
		if r.err != nil || r.code != 7 || r.out != "real\n" {
			t.Fatalf("the channel's command ended %d %q %v, want 7 \"real\\n\"", r.code, r.out, r.err)
		}
		// Not wedged: the channel still serves.
		var out bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "after"}, Stdout: &out}); err != nil || code != 0 || out.String() != "after\n" {
			t.Fatalf("after the forger: %d %q %v", code, out.String(), err)
		}
		if got := sb.ChannelStatus(res.ID); got != "up" {
			t.Fatalf("channel %q after the forger, want up", got)
		}
	})
}

// pause pauses container id with the engine's own CLI, or skips the test
// where the engine cannot (rootless podman on cgroups v1).
func (e *env) pause(t *testing.T, id string) {
	t.Helper()
	cmd := exec.Command(e.tg.Bin, "pause", id)
	cmd.Env = e.tg.Env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("this engine cannot pause here: %v: %s", err, out)
	}
}

// A paused sandbox with its channel up: the agent is frozen and would
// take the command and never answer. The command must not hang: it is
// not sent, and the plain path (which unpauses) runs it, once.
func TestChannelPausedSandboxRunsOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes' pause freezes no process")
		}
		e.skipOnKube("a Pod cannot be paused")
		ctx := context.Background()
		sb, res := e.channelUp("paused")
		e.pause(t, res.ID)
		time.Sleep(channel.QuietBefore + 100*time.Millisecond) // the agent has been quiet
		var out bytes.Buffer
		execCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		code, err := sb.Exec(execCtx, sandbox.Command{Argv: []string{"sh", "-c", "echo x >> /tmp/ran; cat /tmp/ran | wc -l"}, Stdout: &out})
		if err != nil || code != 0 || strings.TrimSpace(out.String()) != "1" {
			t.Fatalf("exec on a paused sandbox: %d %q %v, want 0 and one run", code, out.String(), err)
		}
	})
}

// A sandbox paused while a command waits on its channel (or right after
// the agent's last answer, when a command is sent without a ping) held
// the command with no word: exec waited 45 s, then said the sandbox "was
// stopped or removed"; with --timeout 5s it took 10 s. Now the channel
// notices the agent stopped answering, finds the sandbox paused and
// unpauses it, as the plain path does, and the command runs once.
func TestChannelPausedUnderACommand(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes' pause freezes no process")
		}
		e.skipOnKube("a Pod cannot be paused")
		ctx := context.Background()
		sb, res := e.channelUp("paused-under")
		pause := func() { e.pause(t, res.ID) }
		pause() // the engine can pause here (rootless podman on cgroups v1 cannot)
		if err := e.rt.Unpause(ctx, res.ID); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.rt.Unpause(ctx, res.ID) }) // a paused container cannot be removed everywhere
		execCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		done := make(chan error, 1)
		var code int
		// Paused once the command says it runs, with seconds to spare: a
		// pause that lands after the command ended (on a loaded machine,
		// a fixed 300 ms then a 1 s command) has no command to unpause it.
		running := make(chan struct{})
		go func() {
			var err error
			code, err = sb.Exec(execCtx, sandbox.Command{Argv: []string{"sh", "-c", "echo in >&2; sleep 5; echo x >> /tmp/ran; wc -l < /tmp/ran"},
				Stdout: &out, Stderr: &signalWriter{once: running}})
			done <- err
		}()
		select {
		case <-running:
		case err := <-done:
			t.Fatalf("the command ended before it said it runs: %v", err)
		case <-time.After(90 * time.Second):
			t.Fatal("the command did not start within 90 s")
		}
		pause()
		start := time.Now()
		if err := <-done; err != nil || code != 0 || strings.TrimSpace(out.String()) != "1" {
			t.Fatalf("exec with the sandbox paused under it: %d %q %v, want 0 and one run", code, out.String(), err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the command waited %s on the paused sandbox", d)
		}
		cs, err := e.rt.Inspect(ctx, res.ID)
		if err != nil || len(cs) != 1 || cs[0].State != runtime.StateRunning {
			t.Fatalf("after the command: %+v %v, want the sandbox running", cs, err)
		}

		// Paused right after a command: the next one may be sent unpinged.
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		pause()
		out.Reset()
		code, err = sb.Exec(execCtx, sandbox.Command{Argv: []string{"sh", "-c", "echo y >> /tmp/ran; wc -l < /tmp/ran"}, Stdout: &out})
		if err != nil || code != 0 || strings.TrimSpace(out.String()) != "2" {
			t.Fatalf("exec right after a pause: %d %q %v, want 0 and one run", code, out.String(), err)
		}
	})
}

// A channel opened while its sandbox is stopped (stopped behind the
// program's back) is not marked unavailable: that is the sandbox's state,
// not the agent's fault. The plain path starts the sandbox and runs the
// command once, and the next command has the channel again.
func TestChannelAfterStopIsNotMarkedUnavailable(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("stop deletes the Pod")
		ctx := context.Background()
		sb := e.channelManager().Sandbox(e.key("stopped-open"), e.spec())
		t.Cleanup(func() { _ = sb.Close(ctx) })
		res, err := sb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rt.Stop(ctx, res.ID, 0); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "once"}, Stdout: &out}); err != nil || code != 0 || out.String() != "once\n" {
			t.Fatalf("exec on the stopped sandbox: %d %q %v", code, out.String(), err)
		}
		if got := sb.ChannelStatus(res.ID); strings.HasPrefix(got, "unavailable") {
			t.Fatalf("channel %q: a stopped sandbox was taken for one the agent cannot run in", got)
		}
		out.Reset()
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "again"}, Stdout: &out}); err != nil || code != 0 || out.String() != "again\n" {
			t.Fatalf("second exec: %d %q %v", code, out.String(), err)
		}
		if got := sb.ChannelStatus(res.ID); got != "up" {
			t.Fatalf("channel %q after the sandbox was started again, want up", got)
		}
	})
}
