package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// snapshotRows measure snapshots through the CLI, on a sandbox with 100 MB
// (random) in its /workspace: a snapshot against the engine's commit of
// the same container (which saves none of the mounted paths); a fork
// against a cold `up` of the same image plus `hsbx cp` of the same 100 MB
// in; ten forks at once (`fork --count 10`) against ten one after
// another; and a rollback against `up --recreate` (a replacement that
// restores nothing). Each fork and sandbox is taken down after, untimed.
func snapshotRows(ctx context.Context, e *engine) []row {
	const task = "snap-src"
	id := string(must(ctx, e.env, e.hsbx("up", "--task", task)...).Stdout)
	id = id[:len(id)-1]
	size := sized(100 << 20)
	must(ctx, e.env, e.hsbx("exec", "--task", task, "--", "sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > /workspace/data", size))...)
	dir, err := os.MkdirTemp("", "hsbx-bench-snap-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	f, err := os.Create(data)
	if err == nil {
		_, err = io.CopyN(f, rand.Reader, int64(size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fail("%v", err)
	}
	down := func(task string) { must(ctx, e.env, e.hsbx("down", "--purge", "--task", task)...) }
	rm := func(names ...string) { must(ctx, e.env, e.hsbx(append([]string{"snapshot", "rm"}, names...)...)...) }
	n := 3
	i := 0
	snap, commit := pair(ctx, e, n,
		func() time.Duration {
			i++
			d := must(ctx, e.env, e.hsbx("snapshot", "save", "--task", task, fmt.Sprintf("s%d", i))...).Elapsed
			rm(fmt.Sprintf("s%d", i))
			return d
		},
		func() time.Duration {
			ref := fmt.Sprintf("hsbx-bench-commit:%d", i)
			d := must(ctx, os.Environ(), e.bin, "commit", id, ref).Elapsed
			must(ctx, os.Environ(), e.bin, "image", "rm", ref)
			return d
		})
	rows := []row{{"snapshot of a sandbox with " + mb(size) + " in /workspace vs `" + e.name + " commit` of it (which saves no mount)",
		ms(snap), ms(commit), fmt.Sprintf("%.2f", float64(snap)/float64(commit)), "—", "untargeted: the copy of the mounts is the difference"}}

	must(ctx, e.env, e.hsbx("snapshot", "save", "--task", task, "base")...)
	fork, coldCopy := pair(ctx, e, n,
		func() time.Duration {
			i++
			t := fmt.Sprintf("fork%d", i)
			d := must(ctx, e.env, e.hsbx("snapshot", "fork", "--to", t, "base")...).Elapsed
			down(t)
			return d
		},
		func() time.Duration {
			t := fmt.Sprintf("coldcp%d", i)
			d := must(ctx, e.env, e.hsbx("up", "--task", t)...).Elapsed
			d += must(ctx, e.env, e.hsbx("cp", "--task", t, data, ":/workspace/data")...).Elapsed
			down(t)
			return d
		})
	rows = append(rows, ratioRow("a fork of that snapshot vs a cold `up` + `hsbx cp` of the same "+mb(size)+" in", fork, coldCopy, 1.0, ""))

	nf, np := 10, 2 // forks at once, and pairs of runs
	if *small {
		nf, np = 3, 1
	}
	par, seq := pair(ctx, e, np,
		func() time.Duration {
			i++
			prefix := fmt.Sprintf("par%d", i)
			d := must(ctx, e.env, e.hsbx("snapshot", "fork", "--count", strconv.Itoa(nf), "--prefix", prefix, "base")...).Elapsed
			for k := 1; k <= nf; k++ {
				down(fmt.Sprintf("%s-%d", prefix, k))
			}
			return d
		},
		func() time.Duration {
			var d time.Duration
			for k := 1; k <= nf; k++ {
				t := fmt.Sprintf("seq%d-%d", i, k)
				d += must(ctx, e.env, e.hsbx("snapshot", "fork", "--to", t, "base")...).Elapsed
			}
			for k := 1; k <= nf; k++ {
				down(fmt.Sprintf("seq%d-%d", i, k))
			}
			return d
		})
	rows = append(rows, ratioRow(fmt.Sprintf("%d forks at once (`fork --count %d`) vs %d one after another", nf, nf, nf), par, seq, 0.75, ""))

	back, recreate := pair(ctx, e, n,
		func() time.Duration {
			return must(ctx, e.env, e.hsbx("snapshot", "rollback", "--task", task, "base")...).Elapsed
		},
		func() time.Duration { return must(ctx, e.env, e.hsbx("up", "--recreate", "--task", task)...).Elapsed })
	rows = append(rows, row{"rollback of that sandbox (" + mb(size) + " restored) vs `up --recreate` (nothing restored)",
		ms(back), ms(recreate), fmt.Sprintf("%.2f", float64(back)/float64(recreate)), "—", "untargeted: the restore is the difference"})
	down(task)
	rm("base")
	return rows
}
