package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
)

// A docker engine behind an ssh that never answers (a listener that
// accepts and says nothing, as a machine whose sshd hangs): the first
// engine call is bounded by engine_timeout, the command ends with
// engine_timeout's exit status and words, and no ssh it started is left
// running — with ssh_share's stand-in between docker and ssh, the way the
// hsbx command runs.
func TestHungRemoteEngine(t *testing.T) {
	bin := os.Getenv("HSBX_IT_DOCKER")
	if bin == "" {
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Fatal("HSBX_IT_DOCKER unset, but HSBX_REQUIRE_ENGINES=1")
		}
		t.Skip("the real docker client is not configured (HSBX_IT_DOCKER): run `make engines`")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // kept open, silent
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	state, err := os.MkdirTemp("", "hsbx-hung-") // short: the control socket's directory fits
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(state)
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "DOCKER_") && !strings.HasPrefix(k, "HSBX_") && !strings.HasPrefix(k, "XDG_") && k != "HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "DOCKER_HOST=ssh://nobody@127.0.0.1:"+port, "HSBX_RUNTIME="+bin, "HSBX_ENGINE_TIMEOUT=2s",
		"HOME="+state, "XDG_STATE_HOME="+state, "XDG_CACHE_HOME="+filepath.Join(state, "cache"), "XDG_CONFIG_HOME="+state,
		"TERMINAL_DOCKER_IMAGE=hsbx-busybox")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: []string{"--json", "up", "--task", "hung"}, Environ: env,
		Stdin: &bytes.Buffer{}, Stdout: &out, Stderr: &errb, SSHStandIn: self})
	var res struct {
		Error struct{ Kind, Message string } `json:"error"`
	}
	_ = json.Unmarshal(errb.Bytes(), &res) // --json: the error on stderr
	if code != 125 || res.Error.Kind != "engine_timeout" || !strings.Contains(res.Error.Message, "2s") {
		t.Fatalf("up against a silent ssh: exit %d, %s %s", code, out.String(), errb.String())
	}
	if _, err := os.Lstat(filepath.Join(state, "hsbx", "ssh", "bin", "ssh")); err != nil {
		t.Fatalf("the ssh stand-in was not in the way: %v", err)
	}
	// Nothing that dials the listener runs on: the engine call's process
	// group went with it (the ssh that would have been the shared
	// connection too).
	waitFor(t, func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("-p\x00"+port+"\x00")) || bytes.Contains(b, []byte(":"+port)) {
				return false
			}
		}
		return true
	})
}

// `hsbx doctor` on docker reached over ssh says where the engine is and
// that its calls share one connection (ssh_share), or that they do not.
func TestDoctorOverSSH(t *testing.T) {
	var tg enginetest.Target
	for _, s := range enginetest.SSHTargets(t) {
		if s.Dialect() == runtime.Docker {
			tg = s
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "XDG_STATE_HOME="+tg.StateDir,
		"XDG_CACHE_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	for _, c := range []struct{ set, want string }{
		{"", "one ssh connection for docker's calls, kept 2m0s"},
		{"HSBX_SSH_SHARE=0", "off: an ssh connection per call (ssh_share = 0)"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), Env{Args: []string{"--json", "doctor"}, Environ: append(append([]string{}, env...), c.set),
			Stdin: &bytes.Buffer{}, Stdout: &out, Stderr: &errb, SSHStandIn: self})
		var r struct {
			Location struct{ Remote bool } `json:"location"`
			SSHShare string                `json:"ssh_share"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); code != 0 || err != nil || !r.Location.Remote || !strings.HasPrefix(r.SSHShare, c.want) {
			t.Fatalf("doctor %s: exit %d %v: %s %s", c.set, code, err, out.String(), errb.String())
		}
	}
}

// Ctrl-C while `hsbx exec` runs a command on an engine reached over ssh:
// the command in the sandbox is killed and hsbx exits 130, as locally.
func TestExecInterruptedOverSSH(t *testing.T) {
	for _, tg := range cliTargetsWithSSH(t) {
		if !tg.Remote {
			continue // the local engines: TestSignalExitCodes and the sandbox package's
		}
		t.Run(tg.Name, func(t *testing.T) {
			task := fmt.Sprintf("intr-exec-%d", time.Now().UnixNano())
			env := append(append([]string{}, tg.environ...), "HSBX_TEST_MAIN=1") // the test binary acts as hsbx
			t.Cleanup(func() { runMain(t, env, "down", "--task", task, "--purge") })
			if code, _, errOut := runMain(t, env, "up", "--task", task); code != 0 {
				t.Fatalf("up: exit %d %s", code, errOut)
			}
			cmd := exec.Command(os.Args[0], "exec", "--task", task, "--", "sh", "-c", "echo started; exec sleep 300")
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if l, _ := bufio.NewReader(stdout).ReadString('\n'); l != "started\n" {
				_ = cmd.Process.Kill()
				t.Fatalf("the command said %q (%s)", l, stderr.String())
			}
			_ = cmd.Process.Signal(syscall.SIGINT)
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("hsbx exec after Ctrl-C: exit %d, want 130 (%s)", code, stderr.String())
			}
			waitFor(t, func() bool {
				_, out, _ := runMain(t, env, "exec", "--task", task, "--", "ps")
				return !strings.Contains(out, "sleep 300")
			})
		})
	}
}
