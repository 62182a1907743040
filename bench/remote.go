package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
)

// remoteBench measures the docker engine this machine reaches only over
// ssh (scripts/engines-remote.sh: HSBX_IT_DOCKER_SSH, HSBX_IT_SSH_PATH),
// against the raw client over the same ssh: every raw call opens an ssh
// connection, where hsbx's warm commands ride the exec channel's one
// stream. "" when that engine is not configured.
func remoteBench(ctx context.Context, image string) string {
	host, path, bin := os.Getenv("HSBX_IT_DOCKER_SSH"), os.Getenv("HSBX_IT_SSH_PATH"), os.Getenv("HSBX_IT_DOCKER")
	if host == "" || path == "" || bin == "" || image == "" {
		return ""
	}
	// The baselines run with the process's environment: from here on it
	// is the remote engine's.
	os.Setenv("DOCKER_HOST", host)
	os.Unsetenv("DOCKER_CONTEXT")
	os.Setenv("PATH", path+string(os.PathListSeparator)+os.Getenv("PATH"))
	e := setup(ctx, "docker-ssh", bin, image)
	var b strings.Builder
	fmt.Fprintf(&b, "## docker %s over ssh (`DOCKER_HOST=%s`: a dockerd in a mount namespace of its own, scripts/engines-remote.sh)\n\n", e.version, host)
	id := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "warm")...).Stdout))
	e.rawExec = "docker exec ID true"
	must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...)
	channelUp(ctx, e, "warm")
	n := min(*runs, 7) // a raw exec is an ssh connection or two: about 1.5 s here
	h, base := pair(ctx, e, n,
		func() time.Duration {
			return must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...).Elapsed
		},
		func() time.Duration { return must(ctx, os.Environ(), bin, "exec", id, "true").Elapsed })
	rows := []row{ratioRow("warm `exec -- true` through the exec channel vs `docker exec ID true` over the same ssh", h, base, 0.10, "")}
	rows = append(rows, coldUp(ctx, e))
	rows = append(rows, remoteTransfers(ctx, e, id, n)...)
	writeRows(&b, rows)
	cleanup(ctx, e)
	// The volumes the sandboxes kept (storage = auto: volume here).
	if vs := strings.Fields(string(must(ctx, os.Environ(), bin, "volume", "ls", "-q", "--filter", "label=hermes-profile="+e.profile).Stdout)); len(vs) > 0 {
		must(ctx, os.Environ(), append([]string{bin, "volume", "rm"}, vs...)...)
	}
	return b.String()
}

// remoteTransfers: a 10 MB file into the warm sandbox by `hsbx file
// write` and by `hsbx cp`, each against `docker cp` over ssh.
func remoteTransfers(ctx context.Context, e *engine, id string, n int) []row {
	dir, err := os.MkdirTemp("", "hsbx-bench-remote-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	size := sized(10 << 20)
	src := filepath.Join(dir, "ten.bin")
	if err := os.WriteFile(src, bytes.Repeat([]byte("0123456789abcdef"), size/16), 0o644); err != nil {
		fail("%v", err)
	}
	raw := func() time.Duration {
		return must(ctx, os.Environ(), e.bin, "cp", src, id+":/workspace/raw.bin").Elapsed
	}
	mb := fmt.Sprintf("%d MB", size>>20)
	var rows []row
	h, b := pair(ctx, e, n, func() time.Duration {
		return must(ctx, e.env, e.hsbx("cp", "--task", "warm", src, ":/workspace/cp.bin")...).Elapsed
	}, raw)
	rows = append(rows, ratioRow("`hsbx cp` of a "+mb+" file into the warm sandbox vs `docker cp` over the same ssh", h, b, 1.00, ""))
	h, b = pair(ctx, e, n, func() time.Duration {
		f, err := os.Open(src)
		if err != nil {
			fail("%v", err)
		}
		defer f.Close()
		argv := e.hsbx("file", "write", "--task", "warm", "/workspace/file.bin")
		res, err := runner.Run(ctx, proc.Cmd{Argv: argv, Env: e.env, Stdin: f, Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			fail("%s: exit %d: %v %s", proc.Quote(argv), res.ExitCode, err, res.Stderr)
		}
		return res.Elapsed
	}, raw)
	rows = append(rows, ratioRow("`hsbx file write` of a "+mb+" file vs `docker cp` over the same ssh", h, b, 1.00, ""))
	return rows
}
