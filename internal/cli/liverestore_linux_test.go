package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/enginetest"
)

// liveRestoreDockerd starts a dockerd of the test's own with
// --live-restore (a daemon restart keeps its containers running) and
// returns its DOCKER_HOST and a func that restarts it. The image is
// copied over from the shared engine.
func liveRestoreDockerd(t *testing.T, client, image string) (host string, restart func()) {
	t.Helper()
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		msg := "dockerd not on PATH: run `make engines` (scripts/engines.sh)"
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Fatalf("%s, but HSBX_REQUIRE_ENGINES=1", msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp("/tmp", "hsbx-lr-") // short: containerd's socket paths live under it
	if err != nil {
		t.Fatal(err)
	}
	host = "unix://" + filepath.Join(dir, "docker.sock")
	var cmd *exec.Cmd
	start := func() {
		t.Helper()
		cmd = exec.Command(dockerd, "--host", host, "--data-root", filepath.Join(dir, "data"),
			"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "dockerd.pid"),
			"--iptables=false", "--bridge=none", "--live-restore")
		logf, err := os.OpenFile(filepath.Join(dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			c := exec.Command(client, "version")
			c.Env = append(os.Environ(), "DOCKER_HOST="+host)
			if c.Run() == nil {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
				t.Fatalf("the live-restore dockerd did not come up:\n%s", b)
			}
		}
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	start()
	t.Cleanup(func() {
		c := exec.Command(client, "ps", "-aq", "--filter", "label=hsbx.profile")
		c.Env = append(os.Environ(), "DOCKER_HOST="+host)
		if ids, err := c.Output(); err == nil && len(bytes.TrimSpace(ids)) > 0 {
			rm := exec.Command(client, append([]string{"rm", "-f"}, strings.Fields(string(ids))...)...)
			rm.Env = c.Env
			_ = rm.Run()
		}
		stop()
		// Containers the restart kept have shims and mounts under dir.
		_ = exec.Command("umount", "-R", filepath.Join(dir, "data")).Run()
		_ = exec.Command("umount", "-R", filepath.Join(dir, "exec")).Run()
		_ = os.RemoveAll(dir)
	})
	save := exec.Command(client, "save", image)
	load := exec.Command(client, "load")
	load.Env = append(os.Environ(), "DOCKER_HOST="+host)
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v\n%s", err, out)
	}
	if err := save.Wait(); err != nil {
		t.Fatalf("docker save %s: %v", image, err)
	}
	return host, func() { stop(); start() }
}

// The review's finding with docker's --live-restore: a daemon restart
// under a command ran through the channel gave 125 while the command ran
// on, and left the old agent running with nobody on its other end. Now
// the command is stopped and the status says so; the agent, hearing
// nothing from hsbx, ends; the next command gets a new channel.
func TestChannelSurvivesDaemonRestartWithLiveRestore(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("starts a dockerd of its own: needs root")
	}
	var docker *struct {
		enginetest.Target
		environ []string
	}
	for _, tg := range cliTargets(t) {
		if tg.Name == "docker" {
			docker = &tg
		}
	}
	if docker == nil {
		t.Skip("real docker not configured (live-restore is a dockerd feature; podman has no daemon to restart)")
	}
	host, restart := liveRestoreDockerd(t, docker.Bin, docker.Image)
	run := t.TempDir()
	if err := os.Chmod(run, 0o700); err != nil {
		t.Fatal(err)
	}
	var environ []string
	for _, kv := range docker.environ {
		if !strings.HasPrefix(kv, "DOCKER_HOST=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			environ = append(environ, kv)
		}
	}
	// The holder is this test binary (TestMain), the agent a real hsbx.
	environ = append(environ, "DOCKER_HOST="+host, "XDG_RUNTIME_DIR="+run, "HSBX_EXEC_CHANNEL=true",
		"HSBX_EXEC_CHANNEL_AGENT="+enginetest.AgentBinary(t), "HSBX_TEST_HOLDER=1", "HSBX_HOLDER_ENV=HSBX_TEST_HOLDER")
	dockerc := func(args ...string) string {
		c := exec.Command(docker.Bin, args...)
		c.Env = append(os.Environ(), "DOCKER_HOST="+host)
		out, _ := c.CombinedOutput()
		return string(out)
	}
	const task = "liverestore"
	t.Cleanup(func() { runMain(t, environ, "down", "--task", task) })
	channelUp := func() {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if code, _, msg := runMain(t, environ, "exec", "--task", task, "--", "true"); code != 0 {
				t.Fatalf("exec true: %d %s", code, msg)
			}
			if _, out, _ := runMain(t, environ, "ls", "--json"); strings.Contains(out, `"channel":"up"`) {
				return
			}
			if time.Now().After(deadline) {
				_, out, _ := runMain(t, environ, "ls", "--json")
				logs, _ := filepath.Glob(filepath.Join(run, "hsbx", "*.log"))
				var b []byte
				for _, l := range logs {
					x, _ := os.ReadFile(l)
					b = append(b, x...)
				}
				t.Fatalf("the channel did not come up: %s\nholder logs: %s", out, b)
			}
		}
	}
	channelUp()
	_, ls, _ := runMain(t, environ, "ls", "--json")
	var id string
	if i := strings.Index(ls, `"id":"`); i >= 0 {
		id = ls[i+6 : i+6+64]
	}
	// agents lists the pids (in the sandbox) of the processes running
	// hsbx's agent: the old one is followed by pid, since the CLI may
	// start a new holder (and so a new agent) before the old one ends.
	agents := func() []string {
		var pids []string
		for _, line := range strings.Split(dockerc("exec", id, "ps", "-o", "pid,args"), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.Contains(line, "/.hsbx-agent-") && !strings.Contains(line, "kill-marked") {
				pids = append(pids, f[0])
			}
		}
		return pids
	}
	before := agents()
	if len(before) != 1 {
		t.Fatalf("%d agents before the restart, want 1", len(before))
	}
	alive := func(pid string) bool {
		for _, p := range agents() {
			if p == pid {
				return true
			}
		}
		return false
	}

	type result struct {
		code     int
		out, msg string
	}
	got := make(chan result, 1)
	go func() {
		code, out, msg := runMain(t, environ, "exec", "--task", task, "--", "sh", "-c",
			"echo started; while :; do echo tick; sleep 0.2; done")
		got <- result{code, out, msg}
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(dockerc("exec", id, "ps"), "while"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
	}
	restart()
	var r result
	select {
	case r = <-got:
	case <-time.After(2 * time.Minute):
		t.Fatal("exec did not return after the daemon restarted")
	}
	t.Logf("exec across the restart: exit %d: %s", r.code, r.msg)
	if !strings.Contains(dockerc("inspect", "--format", "{{.State.Running}}", id), "true") {
		t.Fatal("the sandbox did not survive the restart: is live-restore on?")
	}
	if r.code != ExitEngine || !strings.Contains(r.msg, "still runs (did the engine restart?)") ||
		!strings.Contains(r.msg, "hsbx stopped the command") || strings.Contains(r.msg, "(0 processes killed)") {
		t.Fatalf("exec across a daemon restart: exit %d, stderr %q; want %d saying the command was stopped", r.code, r.msg, ExitEngine)
	}
	if ps := dockerc("exec", id, "ps"); strings.Contains(ps, "while") {
		t.Fatalf("the command runs on after hsbx said it stopped it:\n%s", ps)
	}
	// The old agent hears nothing from hsbx and ends within its bound.
	for deadline := time.Now().Add(3 * channel.AgentDeadAfter); alive(before[0]); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the old agent (pid %s in the sandbox) outlived its hsbx by 3x its bound:\n%s\n%s",
				before[0], dockerc("exec", id, "ps", "-o", "pid,ppid,stat,args"), hostProcDiag(dockerc("top", id, "-eo", "pid,args")))
		}
	}
	// A new channel serves the next command.
	channelUp()
	if code, out, msg := runMain(t, environ, "exec", "--task", task, "--", "echo", "after"); code != 0 || out != "after\n" {
		t.Fatalf("exec after the restart: %d %q %s", code, out, msg)
	}
	if n := len(agents()); n != 1 {
		t.Fatalf("%d agents after recovery, want 1:\n%s", n, dockerc("exec", id, "ps"))
	}
}

// hostProcDiag reads, from the host (the agent is not dumpable, so the
// sandbox cannot), where each agent process in `docker top` output waits.
func hostProcDiag(top string) string {
	var b strings.Builder
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.Contains(line, "hsbx-agent") {
			continue
		}
		fmt.Fprintf(&b, "== host pid %s: %s\n", f[0], line)
		st, _ := os.ReadFile("/proc/" + f[0] + "/status")
		b.Write(st)
		tasks, _ := filepath.Glob("/proc/" + f[0] + "/task/*")
		for _, task := range tasks {
			w, _ := os.ReadFile(task + "/wchan")
			stack, _ := os.ReadFile(task + "/stack")
			fmt.Fprintf(&b, "-- %s wchan=%s\n%s", task, w, stack)
		}
		fds, _ := filepath.Glob("/proc/" + f[0] + "/fd/*")
		for _, fd := range fds {
			l, _ := os.Readlink(fd)
			fmt.Fprintf(&b, "fd %s -> %s\n", filepath.Base(fd), l)
		}
	}
	return b.String()
}
