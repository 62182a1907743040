package main

// The exec channel's figures: warm exec through the holder and the plain
// path, each against the raw engine exec; the first exec of a fresh
// sandbox; the Go package's in-process channel; 300 MB of output; and the
// holder's and agent's memory over many commands.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/wire"
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
// each interleaved with the raw `<engine> exec ID true`.
func warmExecRows(ctx context.Context, e *engine, id string) []row {
	raw := func() time.Duration { return must(ctx, os.Environ(), e.bin, "exec", id, "true").Elapsed }
	h, b := pair(ctx, e, *runs, func() time.Duration {
		return must(ctx, e.plainEnv(), e.hsbx("exec", "--task", "warm", "--", "true")...).Elapsed
	}, raw)
	plain := ratioRow("warm `exec -- true`, plain path (`exec_channel = false`) vs `"+e.name+" exec ID true`", h, b, 1.05, "")
	must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...)
	channelUp(ctx, e, "warm")
	h, b = pair(ctx, e, *runs, func() time.Duration {
		return must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...).Elapsed
	}, raw)
	e.channelExec = h
	return []row{plain, ratioRow("warm `exec -- true` through the exec channel vs `"+e.name+" exec ID true`", h, b, 0.15, "")}
}

// firstExec compares the first exec of a fresh sandbox with the channel on
// (a plain exec, then the holder started for the next call) and off. Each
// sandbox is made before and removed after, untimed; the next measurement
// waits for the holder, so its start-up does not land in a baseline.
func firstExec(ctx context.Context, e *engine) row {
	i := 0
	h, b := pair(ctx, e, *cold,
		func() time.Duration {
			i++
			task := fmt.Sprintf("first-on%d", i)
			must(ctx, e.env, e.hsbx("up", "--task", task)...)
			d := must(ctx, e.env, e.hsbx("exec", "--task", task, "--", "true")...).Elapsed
			channelUp(ctx, e, task)
			must(ctx, e.env, e.hsbx("down", "--task", task)...)
			return d
		},
		func() time.Duration {
			task := fmt.Sprintf("first-off%d", i)
			must(ctx, e.env, e.hsbx("up", "--task", task)...)
			d := must(ctx, e.plainEnv(), e.hsbx("exec", "--task", task, "--", "true")...).Elapsed
			must(ctx, e.env, e.hsbx("down", "--task", task)...)
			return d
		})
	return ratioRow("first `exec -- true` of a fresh sandbox (starts the holder) vs the same with the channel off", h, b, 1.05, "")
}

// libraryExec is the Go package's in-process channel: Exec of `true` on a
// warm Sandbox, against the same Sandbox's plain path.
func libraryExec(ctx context.Context, e *engine) (row, libraryTimes) {
	dir, _ := os.MkdirTemp("", "hsbx-bench-lib-")
	defer os.RemoveAll(dir)
	spec := sandbox.DefaultSpec()
	spec.Image = e.image
	key := sandbox.Key{Profile: e.profile, Task: "library"}
	open := func(agent string) *sandbox.Sandbox {
		return sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: dir, Environ: os.Environ(), Channel: true, Agent: agent}).Sandbox(key, spec)
	}
	ch, plain := open(*hsbxBin), open("")
	run := func(sb *sandbox.Sandbox, want int, argv ...string) time.Duration {
		start := time.Now()
		code, err := sb.Exec(ctx, sandbox.Command{Argv: argv})
		if err != nil || code != want {
			fail("%s: library exec %q: exit %d: %v", e.name, argv, code, err)
		}
		return time.Since(start)
	}
	exec := func(sb *sandbox.Sandbox) time.Duration { return run(sb, 0, "true") }
	res, err := ch.Ensure(ctx)
	if err != nil {
		fail("%s: library sandbox: %v", e.name, err)
	}
	exec(ch) // opens the channel
	var chs, missing []time.Duration
	for i := 0; i < 20*(*runs); i++ {
		chs = append(chs, exec(ch))
		// Not found: the agent answers without starting a process.
		missing = append(missing, run(ch, 127, "hsbx-bench-no-such-command"))
	}
	var pls []time.Duration
	for i := 0; i < *runs; i++ {
		pls = append(pls, exec(plain))
	}
	// The sandbox's own cost of starting a process: a shell loop of 200
	// /bin/true against the same loop without it, in one exec each.
	loop := func(body string) time.Duration {
		script := "i=0; while [ $i -lt 200 ]; do " + body + "i=$((i+1)); done"
		return must(ctx, os.Environ(), e.bin, "exec", res.ID, "sh", "-c", script).Elapsed
	}
	spawn := (loop("/bin/true; ") - loop("")) / 200
	_ = ch.Close(ctx)
	_, _ = ch.Down(ctx)
	h, b := median(chs), median(pls)
	v := "met"
	if h > 2*time.Millisecond {
		v = "**missed**"
	}
	return row{fmt.Sprintf("Go package `Sandbox.Exec` of `true` through its channel (median of %d) vs its plain path", len(chs)),
		ms(h), ms(b), fmt.Sprintf("%.3f", float64(h)/float64(b)), "≤ 2 ms", v}, libraryTimes{exec: h, roundTrip: median(missing), spawn: spawn}
}

// libraryTimes split the Go package's channel exec: the protocol round
// trip alone (a command that is not found starts no process) and what
// starting a process costs in that sandbox anyway.
type libraryTimes struct{ exec, roundTrip, spawn time.Duration }

// bigOutput moves 300 MB of stdout through the channel and through the
// raw exec, both to a discarding reader.
func bigOutput(ctx context.Context, e *engine, id string) row {
	const size = 300_000_000
	argv := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	timed := func(env []string, argv []string) time.Duration {
		res, err := runner.Run(ctx, proc.Cmd{Argv: argv, Env: env, Stdout: io.Discard, Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			fail("%s: %v (exit %d): %s", proc.Quote(argv), err, res.ExitCode, res.Stderr)
		}
		return res.Elapsed
	}
	n := max(*runs/5, 2)
	h, b := pair(ctx, e, n,
		func() time.Duration {
			return timed(e.env, e.hsbx(append([]string{"exec", "--task", "warm", "--"}, argv...)...))
		},
		func() time.Duration { return timed(os.Environ(), append([]string{e.bin, "exec", id}, argv...)) })
	mbs := func(d time.Duration) float64 { return size / 1e6 / d.Seconds() }
	return ratioRow(fmt.Sprintf("300 MB of stdout through the channel vs the raw exec (median of %d; %.0f vs %.0f MB/s)", n, mbs(h), mbs(b)),
		h, b, 1.0, "")
}

// holderOf finds the holder serving container id: its pid and socket
// (from its spec, HSBX_HOLD in its environment; its argv carries none).
func holderOf(id string) (int, string) {
	for _, pid := range pids() {
		if !slices.Contains(cmdline(pid), "hold") {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(env), "\x00") {
			var spec struct{ Dir, Name, ID string }
			if v, ok := strings.CutPrefix(kv, "HSBX_HOLD="); ok && json.Unmarshal([]byte(v), &spec) == nil && spec.ID == id {
				return pid, filepath.Join(spec.Dir, spec.Name)
			}
		}
	}
	fail("no holder runs for %s", id)
	return 0, ""
}

// agentOf finds the agent process in container id (seen from the host).
func agentOf(id string) int {
	for _, pid := range pids() {
		args := cmdline(pid)
		if len(args) != 2 || !strings.HasPrefix(filepath.Base(args[0]), ".hsbx-agent-") || args[1] != "agent" {
			continue
		}
		if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); bytes.Contains(cg, []byte(id)) {
			return pid
		}
	}
	fail("no agent runs in %s", id)
	return 0
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// rssKB is a process's resident set (VmRSS) in KiB.
func rssKB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// channelMemory runs *memCommands commands through warm's holder (as the
// CLI does: one connection each) and samples the holder's and the agent's
// resident memory along the way. It also times that socket round trip,
// the share of a CLI exec that is not hsbx starting up.
func channelMemory(ctx context.Context, e *engine, id string) (string, time.Duration) {
	hpid, sock := holderOf(id)
	apid := agentOf(id)
	var rtts []time.Duration
	one := func() {
		start := time.Now()
		res, err := channel.RunVia(ctx, sock, channel.Request{Start: wire.Start{Argv: []string{"true"}}})
		if err != nil || res.Code != 0 {
			fail("%s: command through the holder: exit %d: %v", e.name, res.Code, err)
		}
		rtts = append(rtts, time.Since(start))
	}
	type sample struct{ n, holder, agent int }
	var samples []sample
	marks := map[int]bool{100: true, *memCommands / 10: true, *memCommands / 2: true, *memCommands: true}
	for i := 1; i <= *memCommands; i++ {
		one()
		if marks[i] {
			samples = append(samples, sample{i, rssKB(hpid), rssKB(apid)})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Memory of the exec channel over %d commands (`true`, one holder connection each, as the CLI makes them): resident set in MiB (`VmRSS`; the holder's engine client not counted). Targets: holder ≤ 20 MiB, agent ≤ 10 MiB, steady.\n\n", *memCommands)
	b.WriteString("| after | holder | agent |\n|---|---|---|\n")
	maxH, maxA := 0, 0
	for _, s := range samples {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f |\n", s.n, float64(s.holder)/1024, float64(s.agent)/1024)
		maxH, maxA = max(maxH, s.holder), max(maxA, s.agent)
	}
	verdict := func(kb, limitMiB int) string {
		if kb <= limitMiB<<10 {
			return "met"
		}
		return "**missed**"
	}
	fmt.Fprintf(&b, "\nHolder ≤ 20 MiB: %s; agent ≤ 10 MiB: %s.\n\n", verdict(maxH, 20), verdict(maxA, 10))
	return b.String(), median(rtts)
}

// channelGaps says where a warm exec through the channel spends its time.
func channelGaps(e *engine, start, viaHolder time.Duration, lib libraryTimes) string {
	rest := e.channelExec - start - viaHolder
	return fmt.Sprintf("Where a warm `exec` through the channel spends its %s (medians, %s): starting hsbx and parsing its command line (`hsbx version`) %s; "+
		"the command's round trip through the holder's socket (connect, hello, start, exit; measured from this harness) %s, "+
		"of which the agent's own round trip is %s (the Go package's in-process channel running `true`). "+
		"That splits into the protocol round trip — frame to the agent, through the engine's exec stream, and the exit frame back — of %s "+
		"(a command that is not found: no process is started) and starting the process: a shell loop in the same sandbox pays %s per `/bin/true` on its own. "+
		"The rest, %s, is hsbx reading its configuration, cached engine facts and the sandbox's state file.\n\n",
		ms(e.channelExec), e.name, ms(start), ms(viaHolder), ms(lib.exec), ms(lib.roundTrip), ms(lib.spawn), ms(rest))
}
