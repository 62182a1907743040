package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/sshshare"
)

// remoteBench measures the docker engine this machine reaches only over
// ssh (scripts/engines-remote.sh: HSBX_IT_DOCKER_SSH, HSBX_IT_SSH_PATH),
// against the raw client over the same ssh: every raw call opens an ssh
// connection, where hsbx's warm commands ride the exec channel's one
// stream and its engine calls share one connection (ssh_share; a row
// without it too). "" when that engine is not configured.
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
	// The same without ssh_share: each of hsbx's calls logs in anew, as
	// the raw client's one call does.
	alone := *e
	alone.env = append(slices.Clone(e.env), "HSBX_SSH_SHARE=0")
	r := coldUp(ctx, &alone)
	r.what = strings.Replace(r.what, "cold `up`", "cold `up` with ssh_share = 0 (an ssh connection per call)", 1)
	rows = append(rows, r)
	// A first contact: the shared connection closed before each up, so
	// hsbx logs in once, as the raw client does for its one call.
	first := *e
	first.beforeCold = func() { closeShared(ctx, e, host) }
	r = coldUp(ctx, &first)
	r.what = strings.Replace(r.what, "cold `up`", "cold `up` on first contact (the shared ssh connection closed before each)", 1)
	rows = append(rows, r)
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

// closeShared ends ssh_share's connection to host (ssh -O exit on its
// control socket), if one is open.
func closeShared(ctx context.Context, e *engine, host string) {
	u, err := url.Parse(host)
	if err != nil {
		fail("%s: %v", host, err)
	}
	state, _ := environ.Lookup(e.env, "XDG_STATE_HOME")
	argv := []string{"ssh", "-O", "exit", "-o", "ControlPath=" + filepath.Join(sshshare.ControlDir(filepath.Join(state, "hsbx")), "%C")}
	if p := u.Port(); p != "" {
		argv = append(argv, "-p", p)
	}
	if u.User != nil {
		argv = append(argv, "-l", u.User.Username())
	}
	argv = append(argv, u.Hostname())
	_ = run(ctx, os.Environ(), argv...) // exits 255 when none is open
	// The master may still answer for a moment after the request.
	check := slices.Clone(argv)
	check[2] = "check"
	for range 100 {
		if run(ctx, os.Environ(), check...).ExitCode != 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fail("the shared ssh connection did not close (%s)", proc.Quote(argv))
}
