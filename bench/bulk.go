package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
)

// Bulk rows: a large output and input through the channel against the
// engine's exec, and small copies.

// bigArgv writes bigSize() bytes of zeros to stdout.
func bigArgv() []string { return []string{"head", "-c", strconv.Itoa(bigSize()), "/dev/zero"} }

// bigSize is how much bigOutput moves: 300 MB (a fiftieth under -small).
func bigSize() int { return sized(300_000_000) }

// bigOutput moves bigSize() of stdout through the CLI's channel and through
// the raw exec (raw), both to a discarding reader.
func bigOutput(ctx context.Context, e *engine, raw []string) row {
	timed := func(env []string, argv []string) time.Duration {
		return streamed(ctx, proc.Cmd{Argv: argv, Env: env, Stdout: io.Discard})
	}
	n := max(*runs/3, 3)
	h, b := pair(ctx, e, n,
		func() time.Duration {
			return timed(e.env, e.hsbx(append([]string{"exec", "--task", "warm", "--"}, bigArgv()...)...))
		},
		func() time.Duration { return timed(os.Environ(), raw) })
	mbs := func(d time.Duration) float64 { return float64(bigSize()) / 1e6 / d.Seconds() }
	return ratioRow(fmt.Sprintf("%s of stdout through the CLI's channel vs the raw exec (median of %d; %.0f vs %.0f MB/s; time, so ≤ 1.00 is ≥ 1.0× the throughput)", mb(bigSize()), n, mbs(h), mbs(b)),
		h, b, 1.0, "")
}

// streamed runs c (a big stream in or out, never kept) to success and
// returns how long it took.
func streamed(ctx context.Context, c proc.Cmd) time.Duration {
	c.Timeout = 5 * time.Minute
	res, err := runner.Run(ctx, c)
	if err != nil || res.ExitCode != 0 {
		fail("%s: %v (exit %d): %s", proc.Quote(c.Argv), err, res.ExitCode, res.Stderr)
	}
	return res.Elapsed
}

// inputSize is how much bigInput sends: 50 MB (a fiftieth under -small).
func inputSize() int { return sized(50_000_000) }

// inputArgv reads its stdin to the end.
var inputArgv = []string{"sh", "-c", "cat > /dev/null"}

// bigInput moves inputSize() of stdin through the CLI's channel (`exec -i`)
// and through the raw exec (raw, which must take -i), both from a file.
func bigInput(ctx context.Context, e *engine, raw []string) row {
	f, err := os.CreateTemp("", "hsbx-bench-input-*")
	if err != nil {
		fail("input file: %v", err)
	}
	defer os.Remove(f.Name())
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>11) // not all zeros: nothing on the way gets it for free
	}
	for n := 0; n < inputSize(); n += len(chunk) {
		if _, err := f.Write(chunk[:min(len(chunk), inputSize()-n)]); err != nil {
			fail("input file: %v", err)
		}
	}
	f.Close()
	timed := func(env []string, argv []string) time.Duration {
		in, err := os.Open(f.Name())
		if err != nil {
			fail("input file: %v", err)
		}
		defer in.Close()
		return streamed(ctx, proc.Cmd{Argv: argv, Env: env, Stdin: in})
	}
	n := max(*runs/2, 3)
	h, b := pair(ctx, e, n,
		func() time.Duration {
			return timed(e.env, e.hsbx(append([]string{"exec", "-i", "--task", "warm", "--"}, inputArgv...)...))
		},
		func() time.Duration { return timed(os.Environ(), raw) })
	mbs := func(d time.Duration) float64 { return float64(inputSize()) / 1e6 / d.Seconds() }
	return ratioRow(fmt.Sprintf("%s of stdin through the CLI's channel (`exec -i`) vs the raw exec -i (median of %d; %.0f vs %.0f MB/s; time, so ≤ 1.00 is ≥ 1.0× the throughput)", mb(inputSize()), n, mbs(h), mbs(b)),
		h, b, 1.0, "")
}

// smallCopies times `hsbx cp` of a 1 KB file into the warm sandbox and
// back out (through the agent: copy_channel_max) against the engine's
// own copy of the same file; rawCp makes the baseline's argv from its
// source and destination (":PATH" names the sandbox side).
func smallCopies(ctx context.Context, e *engine, rawName string, rawCp func(src, dst string) []string) []row {
	dir, err := os.MkdirTemp("", "hsbx-bench-cp-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	src, back := filepath.Join(dir, "small.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(src, bytes.Repeat([]byte("0123456789abcdef"), 64), 0o644); err != nil {
		fail("%v", err)
	}
	const inside = ":/workspace/hsbx-bench-small.bin"
	var rows []row
	for _, dir := range []struct{ what, src, dst string }{{"into", src, inside}, {"out of", inside, back}} {
		h, b := pair(ctx, e, *runs,
			func() time.Duration {
				return must(ctx, e.env, e.hsbx("cp", "--task", "warm", dir.src, dir.dst)...).Elapsed
			},
			func() time.Duration { return must(ctx, os.Environ(), rawCp(dir.src, dir.dst)...).Elapsed })
		rows = append(rows, ratioRow(fmt.Sprintf("`hsbx cp` of a 1 KB file %s the warm sandbox (through the agent: no engine call) vs `%s`", dir.what, rawName), h, b, 0.25, ""))
	}
	// The file commands: the same 1 KB, written from stdin and read to
	// stdout, against the engine's copy in and out.
	data, _ := os.ReadFile(src)
	for _, op := range []struct{ what, src, dst string }{{"write", src, inside}, {"read", inside, back}} {
		h, b := pair(ctx, e, *runs,
			func() time.Duration {
				argv := e.hsbx("file", op.what, "--task", "warm", inside[1:])
				c := proc.Cmd{Argv: argv, Env: e.env, Timeout: 5 * time.Minute}
				if op.what == "write" {
					c.Stdin = bytes.NewReader(data)
				}
				res, err := runner.Run(ctx, c)
				if err != nil || res.ExitCode != 0 {
					fail("%s: exit %d: %v %s", proc.Quote(argv), res.ExitCode, err, res.Stderr)
				}
				return res.Elapsed
			},
			func() time.Duration { return must(ctx, os.Environ(), rawCp(op.src, op.dst)...).Elapsed })
		rows = append(rows, ratioRow(fmt.Sprintf("`hsbx file %s` of a 1 KB file (through the agent) vs `%s`", op.what, rawName), h, b, 0.25, ""))
	}
	return rows
}
