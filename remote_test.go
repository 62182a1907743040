package hsbx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/sshshare"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// An engine on another machine (docker and podman reached only over ssh,
// each in a mount namespace where no path of this machine exists): a host
// path setting is
// refused before any engine call; with storage = auto the sandbox keeps
// /workspace and /root in the engine's volumes; exec through the channel,
// a session, copies both ways, the files API, a background process and a
// port forward to it, a snapshot and its fork,
// down and up again, the reaper and down --purge all work as on a local
// engine. One sandbox for the lot: each engine call costs an ssh
// connection.
func TestRemoteEngineOverSSH(t *testing.T) {
	for _, tg := range enginetest.SSHTargets(t) {
		t.Run(tg.Name, func(t *testing.T) { remoteEngine(t, tg) })
	}
}

func remoteEngine(t *testing.T, tg enginetest.Target) {
	ctx := context.Background()
	dir := t.TempDir()
	task := fmt.Sprintf("remote-%d", os.Getpid())
	// HOME stays the target's: podman's ssh client reads its known_hosts.
	env := append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "XDG_STATE_HOME="+tg.StateDir,
		"XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir, "TERMINAL_DOCKER_IMAGE="+tg.Image, "TERMINAL_DOCKER_NETWORK=false",
		"HSBX_PROFILE=hsbx-remote", "TERMINAL_DOCKER_ORPHAN_REAPER=false")
	// The test binary stands in for ssh (enginetest.Main): docker's calls
	// share one connection, as the hsbx command's do.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	open := func(extra ...string) *hsbx.Client {
		t.Helper()
		c, err := hsbx.Open(ctx, hsbx.Options{Environ: append(append([]string{}, env...), extra...), NoAutoSweep: true, Cwd: dir, SSHStandIn: self})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Refused before any engine call: a path of this machine.
	bads := []struct{ env, setting string }{
		{"TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE=true", "mount_cwd_to_workspace"},
		{`TERMINAL_DOCKER_VOLUMES=["` + dir + `:/data"]`, "volumes"},
		{"HSBX_STORAGE=bind", "storage"},
	}
	if tg.Dialect() == runtime.Podman {
		// Its remote client has no --runtime; docker's does (the egress
		// and secrets tests run gVisor on docker over ssh).
		bads = append(bads, struct{ env, setting string }{"HSBX_OCI_RUNTIME=/usr/bin/runsc", "oci_runtime"})
	}
	for _, bad := range bads {
		_, err := open(bad.env).Sandbox(task).Ensure(ctx)
		var se *sandbox.SpecError
		if !errors.As(err, &se) || se.Setting != bad.setting || !strings.Contains(se.Msg, "remote: ssh://hsbxremote@127.0.0.1:") {
			t.Fatalf("%s on a remote engine: %v, want a refusal of %s naming the engine", bad.env, err, bad.setting)
		}
	}

	c := open()
	sb := c.Sandbox(task)
	fork := c.Sandbox(task + "-fork")
	t.Cleanup(func() {
		for _, s := range []*sandbox.Sandbox{fork, sb} {
			_, _ = s.Down(context.Background())
			_, _ = s.Storage().Purge(context.Background())
			_ = s.Close(context.Background())
		}
		_ = c.Manager().RemoveSnapshot(context.Background(), sb.Key().Scope(), task)
	})
	res, err := sb.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Dialect() == runtime.Docker {
		// The connection docker's calls share is up, its socket in the
		// state dir (podman's client speaks ssh itself: none).
		ctl := sshshare.ControlDir(filepath.Join(tg.StateDir, "hsbx"))
		cmd := exec.Command("ssh", "-O", "check", "-o", "ControlPath="+ctl+"/%C", "-p", "22222", "hsbxremote@127.0.0.1")
		cmd.Env = tg.Env
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Master running") {
			t.Fatalf("ssh -O check of the shared connection in %s: %v %s", ctl, err, out)
		}
	}
	mounts := engineOut(t, tg.Bin, tg.Env, "inspect", "--format", "{{range .Mounts}}{{.Type}}:{{.Destination}} {{end}}", res.ID)
	if strings.Contains(mounts, "bind:") || !strings.Contains(mounts, "volume:/workspace") || !strings.Contains(mounts, "volume:/root") {
		t.Fatalf("mounts of a sandbox on a remote engine: %q, want its volumes and no bind mount", mounts)
	}

	// Commands through the exec channel (its stream over ssh), twice.
	for i := range 2 {
		if out, err := sb.Output(ctx, "sh", "-c", "echo kept >/workspace/f; cat /workspace/f"); err != nil || string(out) != "kept\n" {
			t.Fatalf("exec %d: %q %v", i, out, err)
		}
	}
	if st := sb.ChannelStatus(res.ID); st != "up" {
		t.Errorf("exec channel over ssh: %s", st)
	}
	// A session keeps its shell's state.
	ss := sb.Session("s", "")
	var sout bytes.Buffer
	if _, err := ss.Run(ctx, "cd /tmp; X=1", sandbox.Script{}); err != nil {
		t.Fatal(err)
	}
	if r, err := ss.Run(ctx, "echo $PWD $X", sandbox.Script{Stdout: &sout}); err != nil || r.Code != 0 || sout.String() != "/tmp 1\n" {
		t.Fatalf("session: %q %+v %v", sout.String(), r, err)
	}
	// Copies both ways, and the files API.
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.Copies().In(ctx, in, "/workspace/in.txt"); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back.txt")
	if err := sb.Copies().Out(ctx, "/workspace/in.txt", back); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "from the host\n" {
		t.Fatalf("copied out: %q %v", b, err)
	}
	if err := files.Of(sb).Write(ctx, "/workspace/api.txt", strings.NewReader("api\n"), files.Options{}); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := files.Of(sb).Read(ctx, "/workspace/in.txt", &got, files.Options{}); err != nil || got.String() != "from the host\n" {
		t.Fatalf("files read: %q %v", got.String(), err)
	}

	// A port forward: the host port is on this machine, the server in the
	// sandbox on the engine's (a background process of hsbx's agent).
	if _, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/workspace"}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- forward.Run(fctx, sb, ln, forward.Options{Port: 8080}) }()
	var body []byte
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/in.txt")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET through the forward: %v (%q)", err, body)
		}
	}
	stop()
	if err := <-done; err != nil || string(body) != "from the host\n" {
		t.Fatalf("forward: %q, ended with %v", body, err)
	}

	// A snapshot, and a fork of it with volumes of its own.
	if _, err := sb.Snapshots().Take(ctx, task); err != nil {
		t.Fatal(err)
	}
	if _, err := fork.Snapshots().Fork(ctx, task); err != nil {
		t.Fatal(err)
	}
	if out, err := fork.Output(ctx, "cat", "/workspace/f", "/workspace/api.txt"); err != nil || string(out) != "kept\napi\n" {
		t.Fatalf("the fork reads %q %v", out, err)
	}
	if _, err := fork.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fork.Storage().Purge(ctx); err != nil {
		t.Fatal(err)
	}

	// The reaper judges by the engine's labels: a running sandbox stays.
	rep, err := c.Reap(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Removed {
		if r.ID == res.ID {
			t.Fatalf("the reaper removed a running sandbox on the remote engine: %+v", rep)
		}
	}

	// Down keeps /workspace in its volume; the next sandbox reads it;
	// purge removes the volumes.
	if _, err := sb.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := sb.Output(ctx, "cat", "/workspace/f"); err != nil || string(out) != "kept\n" {
		t.Fatalf("after down and up: %q %v", out, err)
	}
	if _, err := sb.Down(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := sb.Storage().Purge(ctx)
	if err != nil || len(p.Volumes) != 2 {
		t.Fatalf("purge: %+v %v", p, err)
	}
	if left := engineOut(t, tg.Bin, tg.Env, "volume", "ls", "-q", "--filter", "label=hsbx.key="+sb.Key().Hash()); strings.TrimSpace(left) != "" {
		t.Fatalf("volumes left: %q", left)
	}
}
