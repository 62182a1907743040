package main

// The exec channel's figures: warm exec through the holder and the plain
// path, each against the raw engine exec; the first exec of a fresh
// sandbox; the Go package's in-process channel; 300 MB of output; and the
// holder's and agent's memory over many commands.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/sandbox"
)

// plainEnv is e's environment with the exec channel turned off.
func (e *engine) plainEnv() []string {
	return append(append([]string{}, e.env...), "HSBX_EXEC_CHANNEL=false")
}

// channelUp waits (untimed) until task's sandbox says its channel is up.
func channelUp(ctx context.Context, e *engine, task string) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var ls []sandbox.Listing
		if err := json.Unmarshal(must(ctx, e.env, e.hsbx("ls", "--json")...).Stdout, &ls); err != nil {
			fail("ls --json: %v", err)
		}
		for _, l := range ls {
			if l.Task == task && l.Channel == "up" {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail("%s: the exec channel of task %q did not come up within 2 minutes (see the holder log next to its socket)", e.name, task)
}

// warmExecRows: a warm exec on the plain path and through the channel,
// each interleaved with the raw exec (raw), and the channel's against its
// floor: a static Go hello world (any Go CLI's start) plus the Go
// package's round trip for `true` (lib, measured in the same run).
func warmExecRows(ctx context.Context, e *engine, raw func() time.Duration, lib libraryTimes) []row {
	h, b := pair(ctx, e, *runs, func() time.Duration {
		return must(ctx, e.plainEnv(), e.hsbx("exec", "--task", "warm", "--", "true")...).Elapsed
	}, raw)
	plain := ratioRow("warm `exec -- true`, plain path (`exec_channel = false`) vs `"+e.rawExec+"`", h, b, 1.05, "")
	must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...)
	channelUp(ctx, e, "warm")
	warm := func() time.Duration {
		return must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...).Elapsed
	}
	h, b = pair(ctx, e, *runs, warm, raw)
	e.channelExec = h
	vsRaw := ratioRow("warm `exec -- true` through the exec channel vs `"+e.rawExec+"`", h, b, 0.10, "")
	h, b, l := floorRounds(ctx, e, warm)
	vsFloor := ratioRow(fmt.Sprintf("warm `exec -- true` through the exec channel vs its floor: a static Go hello world (%s) + the Go package's round trip for `true` in the same rounds (%s; back to back, as in the Go package's row: %s)", ms(b), ms(l), ms(lib.exec)),
		h, b+l, 1.5, "")
	return []row{plain, vsRaw, vsFloor}
}

// floorRounds times the warm CLI exec, a static Go hello world and the
// Go package's Exec of `true` in the same sandbox, one of each per round,
// and returns their medians. The Go package's round trip is timed in
// these rounds, not back to back: a CLI command always finds the
// engine's exec stream idle (a process start has passed since the last
// one), and waking its processes (the engine client, the daemon, the
// shim, the agent) costs what a tight loop never pays.
func floorRounds(ctx context.Context, e *engine, warm func() time.Duration) (cli, hello, lib time.Duration) {
	hw := helloWorld()
	sb := libraryClient(ctx, e).Sandbox("warm")
	libTrue := func() time.Duration {
		start := time.Now()
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			fail("%s: library exec true: exit %d: %v", e.name, code, err)
		}
		return time.Since(start)
	}
	libTrue() // opens its channel
	var cs, hs, ls []time.Duration
	for i := 0; i < 3*(*runs); i++ {
		cs = append(cs, warm())
		hs = append(hs, must(ctx, e.env, hw).Elapsed)
		ls = append(ls, libTrue())
	}
	_ = sb.Close(ctx)
	return median(cs), median(hs), median(ls)
}

// helloWorld builds (once) a static Go hello world as hsbx is built: the
// start-up every Go command pays, the floor of a CLI call.
func helloWorld() string {
	if helloBin != "" {
		return helloBin
	}
	dir, err := os.MkdirTemp("", "hsbx-bench-hello-")
	if err != nil {
		fail("%v", err)
	}
	for name, text := range map[string]string{
		"go.mod":  "module hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			fail("%v", err)
		}
	}
	helloBin = filepath.Join(dir, "hello")
	must(context.Background(), append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local"),
		"go", "build", "-C", dir, "-trimpath", "-ldflags", "-s -w", "-o", helloBin, ".")
	return helloBin
}

var helloBin string

// firstExec compares the first exec of a fresh sandbox with the channel on
// (a plain exec, then the holder started for the next call) and off. Each
// sandbox is made before and removed after, untimed; the next measurement
// waits for the holder, so its start-up does not land in a baseline.
func firstExec(ctx context.Context, e *engine) row {
	i := 0
	h, b := pair(ctx, e, *cold,
		func() time.Duration {
			i++
			return firstOf(ctx, e, fmt.Sprintf("first-on%d", i))
		},
		func() time.Duration {
			task := fmt.Sprintf("first-off%d", i)
			must(ctx, e.env, e.hsbx("up", "--task", task)...)
			d := must(ctx, e.plainEnv(), e.hsbx("exec", "--task", task, "--", "true")...).Elapsed
			must(ctx, e.env, e.hsbx("down", "--task", task)...)
			return d
		})
	e.firstExec = h
	return ratioRow("first `exec -- true` of a fresh sandbox (starts the holder) vs the same with the channel off", h, b, 1.05, "")
}

// firstOf is the first exec of task's fresh sandbox, channel on (made
// before, its holder awaited and the sandbox removed after, untimed).
func firstOf(ctx context.Context, e *engine, task string) time.Duration {
	must(ctx, e.env, e.hsbx("up", "--task", task)...)
	d := must(ctx, e.env, e.hsbx("exec", "--task", task, "--", "true")...).Elapsed
	channelUp(ctx, e, task)
	must(ctx, e.env, e.hsbx("down", "--task", task)...)
	return d
}

// afterRestart: the sandbox is restarted behind hsbx's back (its agent
// and the holder's stream die with it); the first CLI command then, and
// the first Go package command on a handle that had its channel open,
// each against the first command of a fresh sandbox (CLI) or a fresh
// handle (Go package). Restarts are untimed. The "no slower" targets
// allow 5%, the noise of medians of this many runs.
func afterRestart(ctx context.Context, e *engine) []row {
	id := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "restart")...).Stdout))
	must(ctx, e.env, e.hsbx("exec", "--task", "restart", "--", "true")...)
	channelUp(ctx, e, "restart")
	i := 0
	h, b := pair(ctx, e, *cold,
		func() time.Duration {
			must(ctx, os.Environ(), e.bin, "restart", "-t", "0", id)
			d := must(ctx, e.env, e.hsbx("exec", "--task", "restart", "--", "true")...).Elapsed
			channelUp(ctx, e, "restart")
			return d
		},
		func() time.Duration {
			i++
			return firstOf(ctx, e, fmt.Sprintf("fresh%d", i))
		})
	cli := ratioRow("first `exec -- true` after `"+e.name+" restart` of the sandbox (behind hsbx's back) vs the first of a fresh sandbox", h, b, 1.05, "")

	c := libraryClient(ctx, e)
	sb := c.Sandbox("restart")
	exec := func(sb *sandbox.Sandbox) time.Duration {
		start := time.Now()
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			fail("%s: library exec: exit %d: %v", e.name, code, err)
		}
		return time.Since(start)
	}
	exec(sb)
	h, b = pair(ctx, e, *cold,
		func() time.Duration {
			must(ctx, os.Environ(), e.bin, "restart", "-t", "0", id)
			return exec(sb)
		},
		func() time.Duration {
			fresh := c.Sandbox("restart")
			d := exec(fresh)
			_ = fresh.Close(ctx)
			return d
		})
	_ = sb.Close(ctx)
	must(ctx, e.env, e.hsbx("down", "--task", "restart")...)
	return []row{cli, ratioRow("Go package: first `Exec` of `true` after `"+e.name+" restart` of the sandbox vs the first `Exec` of a fresh handle (opens its channel)", h, b, 1.05, "")}
}

// libraryClient opens the Go package as a program embedding it would,
// in the bench's environment for e (its defaults: the channel on).
func libraryClient(ctx context.Context, e *engine, extra ...string) *hsbx.Client {
	c, err := hsbx.Open(ctx, hsbx.Options{Environ: append(append([]string{}, e.env...), extra...), NoAutoSweep: true})
	if err != nil {
		fail("%s: hsbx.Open: %v", e.name, err)
	}
	return c
}

// libraryExec is the Go package's channel: Exec of `true` on a warm
// Sandbox, against one round trip of `/bin/true` in a long-lived
// `exec -i ... sh` loop in the same sandbox (the fastest a program can
// run commands through the raw CLI), and against the package's plain
// path (exec_channel = false).
func libraryExec(ctx context.Context, e *engine, shArgv func(id string) []string) (row, libraryTimes) {
	ch := libraryClient(ctx, e).Sandbox("library")
	plain := libraryClient(ctx, e, "HSBX_EXEC_CHANNEL=false").Sandbox("library")
	run := func(sb *sandbox.Sandbox, want int, argv ...string) time.Duration {
		start := time.Now()
		code, err := sb.Exec(ctx, sandbox.Command{Argv: argv})
		if err != nil || code != want {
			fail("%s: library exec %q: exit %d: %v", e.name, argv, code, err)
		}
		return time.Since(start)
	}
	// /bin/true, as the loop runs it: the same program, no PATH search.
	exec := func(sb *sandbox.Sandbox) time.Duration { return run(sb, 0, "/bin/true") }
	res, err := ch.Ensure(ctx)
	if err != nil {
		fail("%s: library sandbox: %v", e.name, err)
	}
	exec(ch) // opens the channel
	if st := ch.ChannelStatus(res.ID); st != "up" {
		fail("%s: the Go package's channel is %q after a command, not up", e.name, st)
	}
	loop := newShLoop(ctx, shArgv(res.ID))
	var chs, missing, loops []time.Duration
	for i := 0; i < 20*(*runs); i++ {
		chs = append(chs, exec(ch))
		loops = append(loops, loop.roundTrip("/bin/true"))
		// Not found: the agent answers without starting a process.
		missing = append(missing, run(ch, 127, "hsbx-bench-no-such-command"))
	}
	var pls []time.Duration
	for i := 0; i < *runs; i++ {
		pls = append(pls, exec(plain))
	}
	// The sandbox's own cost of starting a process: the loop's /bin/true
	// against its builtin `:`.
	var colons []time.Duration
	for i := 0; i < 20*(*runs); i++ {
		colons = append(colons, loop.roundTrip(":"))
	}
	loop.close()
	_ = ch.Close(ctx)
	_, _ = ch.Down(ctx)
	h, b := median(chs), median(loops)
	lt := libraryTimes{exec: h, roundTrip: median(missing), spawn: max(b-median(colons), 0), plain: median(pls)}
	return ratioRow(fmt.Sprintf("Go package `Sandbox.Exec` of `/bin/true` through its channel (median of %d; its plain path: %s) vs one round trip of `/bin/true` in a long-lived `exec -i ... sh` loop in the same sandbox", len(chs), ms(lt.plain)),
		h, b, 1.0, ""), lt
}

// libraryTimes split the Go package's channel exec: the protocol round
// trip alone (a command that is not found starts no process) and what
// starting a process costs in that sandbox anyway.
type libraryTimes struct{ exec, roundTrip, spawn, plain time.Duration }

// shLoop is a long-lived `exec -i ... sh` fed one command line at a time;
// each line echoes a newline when it is done.
type shLoop struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan struct{}
}

func newShLoop(ctx context.Context, argv []string) *shLoop {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	l := &shLoop{in: inW, out: bufio.NewReader(outR), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		res, err := runner.Run(ctx, proc.Cmd{Argv: argv, Env: os.Environ(), Stdin: inR, Stdout: outW, Timeout: 30 * time.Minute})
		outW.CloseWithError(fmt.Errorf("%s ended: exit %d: %v: %s", proc.Quote(argv), res.ExitCode, err, res.Stderr))
	}()
	l.roundTrip(":") // started
	return l
}

func (l *shLoop) roundTrip(line string) time.Duration {
	start := time.Now()
	if _, err := io.WriteString(l.in, line+"; echo\n"); err != nil {
		fail("sh loop: %v", err)
	}
	if _, err := l.out.ReadString('\n'); err != nil {
		fail("sh loop: %v", err)
	}
	return time.Since(start)
}

func (l *shLoop) close() {
	l.in.Close()
	<-l.done
}

// channelGaps says where a warm exec through the channel spends its time.
func channelGaps(e *engine, start, viaHolder time.Duration, lib libraryTimes) string {
	rest := e.channelExec - start - viaHolder
	return fmt.Sprintf("Where a warm `exec` through the channel spends its %s (medians, %s): starting hsbx and parsing its command line (`hsbx version`) %s; "+
		"the command's round trip through the holder's socket (connect, hello, start, exit; measured from this harness) %s, "+
		"of which the agent's own round trip is %s (the Go package's in-process channel running `true`). "+
		"That splits into the protocol round trip — frame to the agent, through the engine's exec stream, and the exit frame back — of %s "+
		"(a command that is not found: no process is started) and starting the process: a long-lived shell in the same sandbox pays %s more for `/bin/true` than for its builtin `:`. "+
		"The rest, %s, is hsbx reading its configuration, cached engine facts and the sandbox's state file.\n\n",
		ms(e.channelExec), e.name, ms(start), ms(viaHolder), ms(lib.exec), ms(lib.roundTrip), ms(lib.spawn), ms(rest))
}

// recordCost is what the record of what ran adds to a warm exec: the Go
// package's Exec of `true` through its channel (the smallest denominator
// hsbx has) with the record and without (Config.NoRecord), alternated.
func recordCost(ctx context.Context, e *engine) row {
	open := func(noRecord bool) *sandbox.Sandbox {
		c, err := hsbx.Open(ctx, hsbx.Options{Environ: e.env, NoAutoSweep: true,
			NoRecord: noRecord})
		if err != nil {
			fail("%s: hsbx.Open: %v", e.name, err)
		}
		return c.Sandbox("warm")
	}
	with, without := open(false), open(true)
	defer with.Close(ctx)
	defer without.Close(ctx)
	exec := func(sb *sandbox.Sandbox) func() time.Duration {
		return func() time.Duration {
			start := time.Now()
			if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || code != 0 {
				fail("%s: library exec true: exit %d: %v", e.name, code, err)
			}
			return time.Since(start)
		}
	}
	exec(with)()
	exec(without)()
	// Many short pairs, the order alternated: a tenth of a millisecond is
	// what one measures here, and which goes first matters at that scale.
	var hs, bs []time.Duration
	for i := 0; i < 30*(*runs); i++ {
		if i%2 == 0 {
			hs, bs = append(hs, exec(with)()), append(bs, exec(without)())
		} else {
			bs, hs = append(bs, exec(without)()), append(hs, exec(with)())
		}
	}
	h, b := median(hs), median(bs)
	return ratioRow(fmt.Sprintf("warm Go-package `Exec` of `true` through the channel with the record of what ran vs without (`NoRecord`; %s vs %s)", ms(h), ms(b)),
		h, b, 1.02, "")
}

// gvisorRows measure a sandbox under gVisor (oci_runtime, the runtime
// scripts/engines.sh registers: HSBX_IT_GVISOR_DOCKER, _PODMAN): a warm
// exec through the exec channel against the raw exec into the same
// gVisor sandbox, and a cold `up` against a raw `run` of the same
// arguments. None when the engine has no gVisor here.
func gvisorRows(ctx context.Context, e *engine) []row {
	name := os.Getenv("HSBX_IT_GVISOR_" + strings.ToUpper(e.name))
	if name == "" {
		return nil
	}
	g := *e
	g.env = append(append([]string{}, e.env...), "HSBX_OCI_RUNTIME="+name)
	id := strings.TrimSpace(string(must(ctx, g.env, g.hsbx("up", "--task", "gvwarm")...).Stdout))
	must(ctx, g.env, g.hsbx("exec", "--task", "gvwarm", "--", "true")...)
	channelUp(ctx, &g, "gvwarm")
	h, b := pair(ctx, &g, *runs,
		func() time.Duration {
			return must(ctx, g.env, g.hsbx("exec", "--task", "gvwarm", "--", "true")...).Elapsed
		},
		func() time.Duration { return must(ctx, os.Environ(), e.bin, "exec", id, "true").Elapsed })
	warm := ratioRow("gVisor: warm `exec -- true` through the exec channel vs `"+e.name+" exec ID true`, both into the same gVisor sandbox", h, b, 0.10, "")
	cold := coldUp(ctx, &g)
	cold.what = "gVisor: " + cold.what + " (`--runtime " + name + "` in both)"
	must(ctx, g.env, g.hsbx("down", "--task", "gvwarm")...)
	return []row{warm, cold}
}
