package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Reaping and concurrency rows: orphans made and swept at scale, and many
// processes at once.

// makeOrphans starts n labelled containers that exit at once, 4 at a time.
func makeOrphans(ctx context.Context, e *engine, n int, tag string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			must(ctx, os.Environ(), e.bin, "run", "-d", "--network", "none", "--label", "hermes-agent=1",
				"--label", "hermes-profile="+e.profile, "--label", "hermes-task-id="+tag, e.image, "true")
		}()
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond) // older than the 1s max age used below
}

// seedsReap is the Hermes backend's algorithm: one ps, then an inspect and
// an rm per container. It returns the number of engine calls.
func seedsReap(ctx context.Context, e *engine, maxAge time.Duration) (int, int) {
	calls, removed := 1, 0
	res := must(ctx, os.Environ(), e.bin, "ps", "-a", "--filter", "label=hermes-agent=1", "--filter", "status=exited",
		"--filter", "label=hermes-profile="+e.profile, "--format", "{{.ID}}")
	for _, id := range strings.Fields(string(res.Stdout)) {
		calls++
		r := run(ctx, os.Environ(), e.bin, "inspect", "--format", "{{.State.FinishedAt}}", id)
		t, err := runtime.ParseTime(string(r.Stdout))
		if r.ExitCode != 0 || err != nil || t.IsZero() || time.Since(t) < maxAge {
			continue
		}
		calls++
		if run(ctx, os.Environ(), e.bin, "rm", "-f", id).ExitCode == 0 {
			removed++
		}
	}
	return calls, removed
}

func reapAtScale(ctx context.Context, e *engine) string {
	var b strings.Builder
	b.WriteString("Reaper at scale: N exited orphans, swept by `hsbx reap --max-age 1s` and by the Hermes backend's algorithm (one `ps`, then `inspect` and `rm -f` per container) against the same engine; one run each.\n\n")
	b.WriteString("| N | hsbx calls | hsbx time | baseline calls | baseline time | speed-up | target (N = 50) |\n|---|---|---|---|---|---|---|\n")
	for _, ns := range strings.Split(*scale, ",") {
		var n int
		if _, err := fmt.Sscan(ns, &n); err != nil || n < 1 {
			fail("-scale %q: want positive counts like 10,50,200", *scale)
		}
		makeOrphans(ctx, e, n, "hsbx")
		var debugLog bytes.Buffer // the whole log: one rm line with 200 ids outgrows proc's stderr tail
		res, err := runner.Run(ctx, proc.Cmd{Argv: e.hsbx("--log-level", "debug", "reap", "--max-age", "1s"), Env: e.env, Stderr: &debugLog, Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			fail("hsbx reap: %v (exit %d): %s", err, res.ExitCode, debugLog.String())
		}
		hcalls := strings.Count(debugLog.String(), `msg="engine call"`)
		if !strings.Contains(string(res.Stdout), fmt.Sprintf("reaped %d ", n)) {
			fail("hsbx reap did not remove %d: %s", n, res.Stdout)
		}
		makeOrphans(ctx, e, n, "seeds")
		start := time.Now()
		bcalls, removed := seedsReap(ctx, e, time.Second)
		bt := time.Since(start)
		if removed != n {
			fail("baseline removed %d of %d", removed, n)
		}
		speed := float64(bt) / float64(res.Elapsed)
		target := ""
		if n == 50 {
			target = "≥ 5× — met"
			if speed < 5 {
				target = "≥ 5× — **missed**"
			}
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %d | %s | %.1f× | %s |\n", n, hcalls, ms(res.Elapsed), bcalls, ms(bt), speed, target)
	}
	b.WriteString("\n")
	return b.String()
}

func concurrency(ctx context.Context, e *engine) string {
	const n = 16     // simultaneous `up`s
	const execs = 64 // simultaneous commands
	var b strings.Builder
	lat := make([]time.Duration, n)
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := must(ctx, e.env, e.hsbx("up", "--task", "conc")...)
			lat[i], outs[i] = r.Elapsed, strings.TrimSpace(string(r.Stdout))
		}()
	}
	wg.Wait()
	must(ctx, e.env, e.hsbx("exec", "--task", "conc", "--", "true")...)
	channelUp(ctx, e, "conc")
	ids := map[string]bool{}
	for _, o := range outs {
		ids[o] = true
	}
	cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: sandbox.Key{Profile: e.profile, Task: "conc"}.Filters()})
	slices.Sort(lat)
	fmt.Fprintf(&b, "Concurrency: %d simultaneous `hsbx up` for one new key: %d container(s), %d distinct id(s) reported; latency p50 %s, p100 %s.\n\n",
		n, len(cs), len(ids), ms(lat[n/2]), ms(lat[n-1]))
	id := outs[0]
	wall := func(argv func() []string, env []string) (time.Duration, int) {
		start := time.Now()
		failed := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < execs; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if run(ctx, env, argv()...).ExitCode != 0 {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return time.Since(start), failed
	}
	hw, hf := wall(func() []string { return e.hsbx("exec", "--task", "conc", "--", "true") }, e.env)
	rw, rf := wall(func() []string { return []string{e.bin, "exec", id, "true"} }, os.Environ())
	speed := float64(rw) / float64(hw)
	verdict := "met"
	if speed < 10 || hf > 0 {
		verdict = "**missed**"
	}
	fmt.Fprintf(&b, "%d simultaneous `exec -- true` on one sandbox, through the exec channel: hsbx %s (%.1f/s, %d failed), raw `%s exec` %s (%.1f/s, %d failed); hsbx's throughput %.1f× the raw CLI's (target ≥ 10×: %s).\n\n",
		execs, ms(hw), float64(execs)/hw.Seconds(), hf, e.name, ms(rw), float64(execs)/rw.Seconds(), rf, speed, verdict)
	return b.String()
}
