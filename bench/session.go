package main

// Sessions' figures: a builtin (`cd /tmp`) in a warm session through the
// Go package against the 1 ms aim, and through the CLI (`hsbx run`)
// against the CLI's own start-up plus 1 ms and against the raw engine
// exec of the same text.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

// sessionRows measures sessions on e's warm sandbox; rawExec is the raw
// engine's exec of a command in it (argv to which `sh -c 'cd /tmp'` is
// added), rawName how the table names it.
func sessionRows(ctx context.Context, e *engine, rawExec []string, rawName string) []row {
	// The Go package: a warm session, builtin after builtin.
	sb := libraryClient(ctx, e).Sandbox("warm")
	ss := sb.Session("bench-lib", "")
	script := sandbox.Script{Stdout: io.Discard, Stderr: io.Discard}
	runLib := func() time.Duration {
		start := time.Now()
		res, err := ss.Run(ctx, "cd /tmp", script)
		if err != nil || res.Code != 0 {
			fail("%s: session run: exit %d: %v", e.name, res.Code, err)
		}
		return time.Since(start)
	}
	runLib() // starts the shell (and opens the channel)
	var libs []time.Duration
	for i := 0; i < 20*(*runs); i++ {
		libs = append(libs, runLib())
	}
	_ = ss.Close(ctx)
	_ = sb.Close(ctx)
	aim := time.Millisecond
	lib := ratioRow(fmt.Sprintf("Go package `Session.Run` of a builtin (`cd /tmp`) in a warm session (median of %d) vs the aim of 1 ms", len(libs)),
		median(libs), aim, 1.0, "")

	// The CLI: `hsbx run` against its start-up (`hsbx version`) + 1 ms,
	// and against the raw engine exec of the same text.
	must(ctx, e.env, e.hsbx("run", "--task", "warm", "--session", "bench-cli", "--", "true")...)
	channelUp(ctx, e, "warm")
	cli := func() time.Duration {
		return must(ctx, e.env, e.hsbx("run", "--task", "warm", "--session", "bench-cli", "--", "cd /tmp")...).Elapsed
	}
	h, b := pair(ctx, e, *runs, cli, func() time.Duration { return must(ctx, e.env, *hsbxBin, "version").Elapsed })
	vsStart := ratioRow(fmt.Sprintf("warm `run -- 'cd /tmp'` in a session vs the CLI's start-up (`hsbx version`, %s) + 1 ms", ms(b)), h, b+aim, 1.0, "")
	h, b = pair(ctx, e, *runs, cli, func() time.Duration {
		return must(ctx, os.Environ(), append(append([]string{}, rawExec...), "sh", "-c", "cd /tmp")...).Elapsed
	})
	vsRaw := ratioRow("warm `run -- 'cd /tmp'` in a session vs `"+rawName+" sh -c 'cd /tmp'` (no state kept)", h, b, 0.10, "")
	must(ctx, e.env, e.hsbx("session", "close", "--task", "warm", "bench-cli")...)
	return []row{lib, vsStart, vsRaw}
}

// sessionScale opens 200 sessions, one after another, in a sandbox of its
// own through the Go package and reports, at 1, 50 and 200 open, what
// opening the last took (the median of the last five) and what the
// sandbox holds per session (tasks, which pids_limit counts, and its
// cgroup's memory); then it closes them all and says what is left.
func sessionScale(ctx context.Context, e *engine) string {
	sb := libraryClient(ctx, e).Sandbox("scale")
	defer func() { _, _ = sb.Down(ctx); _ = sb.Close(ctx) }()
	count := func() (tasks int, mem int64) {
		var out strings.Builder
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c",
			`n=0; for p in /proc/[0-9]*/task/*; do n=$((n+1)); done; ` +
				`m=$(cat /sys/fs/cgroup/memory.current 2>/dev/null || cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null || echo 0); echo $((n-1)) $m`}, Stdout: &out})
		if _, serr := fmt.Sscan(out.String(), &tasks, &mem); err != nil || code != 0 || serr != nil {
			fail("%s: counting the sandbox's tasks: exit %d %v %q", e.name, code, err, out.String())
		}
		return tasks, mem
	}
	t0, m0 := count()
	var b strings.Builder
	b.WriteString("Sessions at scale (Go package, one sandbox, `echo ok` opening each; default limits): opening one more when N are open (median of the last five), and what the sandbox holds per open session.\n\n")
	b.WriteString("| sessions open | opening one | tasks per session | memory per session |\n|---|---|---|---|\n")
	var opens []time.Duration
	n := 200
	if *small {
		n = 20
	}
	for i := 1; i <= n; i++ {
		start := time.Now()
		res, err := sb.RunScript(ctx, fmt.Sprintf("s%d", i), sandbox.Script{Text: "echo ok", Stdout: io.Discard})
		if err != nil || res.Code != 0 || !res.New {
			fail("%s: opening session %d: %+v %v", e.name, i, res, err)
		}
		opens = append(opens, time.Since(start))
		if i == 1 || i == min(50, n/2) || i == n {
			t, m := count()
			last := opens[max(0, len(opens)-5):]
			fmt.Fprintf(&b, "| %d | %s | %.2f | %d KiB |\n", i, ms(median(last)), float64(t-t0)/float64(i), (m-m0)/int64(i)/1024)
		}
	}
	for i := 1; i <= n; i++ {
		if err := sb.Session(fmt.Sprintf("s%d", i), "").Close(ctx); err != nil {
			fail("%s: closing session %d: %v", e.name, i, err)
		}
	}
	time.Sleep(3 * time.Second) // the session server leaves 2 s after its last session
	t1, _ := count()
	fmt.Fprintf(&b, "\nTasks in the sandbox before the sessions: %d; after closing all %d: %d (the agent's runtime keeps the few threads it grew).\n\n", t0, n, t1)
	return b.String()
}
