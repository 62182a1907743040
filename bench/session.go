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
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

// sessionRows measures sessions on e's warm sandbox; rawExec is the raw
// engine's exec of a command in it (argv to which `sh -c 'cd /tmp'` is
// added), rawName how the table names it.
func sessionRows(ctx context.Context, e *engine, rawExec []string, rawName string) []row {
	// The Go package: a warm session, builtin after builtin.
	sb := libraryClient(ctx, e).Sandbox("warm")
	ss := sb.Session("bench-lib")
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
