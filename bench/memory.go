package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/wire"
)

// What a channel's processes hold: the holder's and the agent's resident
// memory, found by their command lines.

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
		// `AGENT agent`, or a first start's `AGENT.new-X install-as NAME agent`.
		if len(args) < 2 || !strings.HasPrefix(filepath.Base(args[0]), ".hsbx-agent-") || args[len(args)-1] != "agent" {
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
