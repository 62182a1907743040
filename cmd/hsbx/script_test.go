package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hsbx/hsbx/internal/enginetest"
)

func TestMain(m *testing.M) {
	enginetest.MainWith(m, map[string]func(){"hsbx": func() { os.Exit(run()) }}, nil)
}

// TestScripts runs testdata/script/*.txtar against the fake engines. PATH
// holds only the test bin dir (hsbx, docker, podman) and the known install
// paths are emptied, so no real engine is ever reached.
func TestScripts(t *testing.T) {
	agentBin := enginetest.AgentBinary(t)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("..", "..", "testdata", "script"),
		RequireUniqueNames:  true,
		RequireExplicitExec: false,
		Setup: func(env *testscript.Env) error {
			bindir, _, _ := strings.Cut(env.Getenv("PATH"), string(os.PathListSeparator))
			env.Setenv("PATH", bindir)
			if zsh, err := exec.LookPath("zsh"); err == nil { // [zsh] scripts
				env.Setenv("ZSH", zsh)
			}
			if py := python3(); py != "" { // [python3] scripts
				env.Setenv("PYTHON3", py)
			}
			env.Setenv("FAKEBIN", bindir)
			env.Setenv("HSBX_KNOWN_PATHS", "")
			env.Setenv("HOME", filepath.Join(env.WorkDir, "home"))
			env.Setenv("XDG_CACHE_HOME", filepath.Join(env.WorkDir, "home", ".cache"))
			env.Setenv("FAKEENGINE_DIR", filepath.Join(env.WorkDir, ".fakeengine"))
			// The fakes' state and faults reach exec channel holders too.
			env.Setenv("HSBX_HOLDER_ENV", "WORK,FAKEENGINE_*")
			// The exec channel is off unless a script turns it on (its
			// holder's engine calls would be counted by the others); its
			// sockets need a short directory.
			env.Setenv("HSBX_EXEC_CHANNEL", "false")
			env.Setenv("HSBX_EXEC_CHANNEL_AGENT", agentBin)
			// The fakes run the agent on this host: a copy through it
			// would be made here.
			env.Setenv("HSBX_COPY_CHANNEL_MAX", "0")
			rt, err := os.MkdirTemp("", "hsbx-rt")
			if err != nil {
				return err
			}
			env.Defer(func() { os.RemoveAll(rt) })
			env.Setenv("XDG_RUNTIME_DIR", rt)
			return os.MkdirAll(filepath.Join(env.WorkDir, "home"), 0o755)
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "python3":
				if python3() == "" && os.Getenv("HSBX_REQUIRE_ENGINES") != "" {
					return false, errors.New("python3 is required here (HSBX_REQUIRE_ENGINES): install Debian's python3")
				}
				return python3() != "", nil
			case "root": // the agent makes copies only as root (copy_channel_max)
				return os.Geteuid() == 0, nil
			case "oldhsbx":
				return oldHsbx.cond()
			case "precopyagent":
				return preCopyAgent.cond()
			case "cgo":
				return haveCgoHsbx()
			case "zsh": // CI installs it (scripts/engines.sh): required there
				_, err := exec.LookPath("zsh")
				if err != nil && os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
					return false, fmt.Errorf("zsh is not installed: %w", err)
				}
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"engine-calls":  engineCalls,
			"reset-calls":   resetCalls,
			"linkbin":       linkBin,
			"exits":         exits,
			"stdout-uniq":   stdoutUniq,
			"await":         await,
			"runproc":       runproc,
			"client-gone":   clientGone,
			"execs-done":    execsDone,
			"channel-up":    channelUp,
			"kill-holder":   killHolder,
			"rm-sockets":    rmSockets,
			"old-hsbx":      oldHsbx.cmd,
			"precopy-agent": preCopyAgent.cmd,
			"cgo-hsbx":      cgoHsbxCmd,
			"doc-block":     docBlock,
			"env-file":      envFile,
			"listen":        listen,
		},
	})
}

// engine-calls N [REGEXP]: the fake engines' argv log has exactly N lines
// (matching REGEXP). With !, anything but N.
func engineCalls(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: engine-calls N [REGEXP]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("engine-calls: %v", err)
	}
	re := regexp.MustCompile(".")
	if len(args) == 2 {
		re = regexp.MustCompile(args[1])
	}
	var lines []string
	if f, err := os.Open(filepath.Join(ts.Getenv("FAKEENGINE_DIR"), "argv.log")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if re.MatchString(sc.Text()) {
				lines = append(lines, sc.Text())
			}
		}
		f.Close()
	}
	if (len(lines) == want) == neg {
		ts.Fatalf("engine calls matching %q: %d, want %s%d:\n%s", re, len(lines), map[bool]string{true: "not ", false: ""}[neg], want, strings.Join(lines, "\n"))
	}
}

// exits N CMD [ARG...]: run CMD and require exit status N exactly (the
// builtin `exec` only tells zero from non-zero). Its stdout and stderr are
// then checked by `stdout` and `stderr` as usual.
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N CMD [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %v", err)
	}
	runErr := ts.Exec(args[1], args[2:]...)
	got := 0
	if runErr != nil {
		var ee interface{ ExitCode() int }
		if !errors.As(runErr, &ee) {
			ts.Fatalf("exits: %s did not run: %v", args[1], runErr)
		}
		got = ee.ExitCode()
	}
	// Custom commands' output is what the next stdout/stderr check sees.
	fmt.Fprint(ts.Stdout(), ts.ReadFile("stdout"))
	fmt.Fprint(ts.Stderr(), ts.ReadFile("stderr"))
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// stdout-uniq N: the last command's stdout has exactly N distinct
// non-empty lines (N concurrent `hsbx up` all printed one id).
func stdoutUniq(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: stdout-uniq N")
	}
	want, _ := strconv.Atoi(args[0])
	seen := map[string]bool{}
	for _, l := range strings.Split(ts.ReadFile("stdout"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			seen[l] = true
		}
	}
	if (len(seen) == want) == neg {
		ts.Fatalf("stdout has %d distinct lines, want %d: %v", len(seen), want, seen)
	}
}

// await FILE REGEXP: wait (up to 30s) until FILE matches REGEXP — for a
// background command to reach a known point before the script goes on.
func await(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: await FILE REGEXP")
	}
	re := regexp.MustCompile(args[1])
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(ts.MkAbs(args[0])); err == nil && re.Match(b) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("%s never matched %q", args[0], re)
}

// reset-calls: empty the argv log.
func resetCalls(ts *testscript.TestScript, neg bool, args []string) {
	os.Remove(filepath.Join(ts.Getenv("FAKEENGINE_DIR"), "argv.log"))
}

// linkbin DIR NAME...: make DIR hold links to the named fakes (a PATH entry
// with only some engines, or an install location).
func linkBin(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: linkbin DIR NAME...")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	for _, name := range args[1:] {
		target := filepath.Join(ts.Getenv("FAKEBIN"), name)
		if _, err := os.Stat(target); err != nil {
			ts.Fatalf("linkbin: no fake %s: %v", name, err)
		}
		ts.Check(os.Symlink(target, filepath.Join(dir, name)))
	}
	fmt.Fprintf(ts.Stdout(), "linked %s into %s\n", strings.Join(args[1:], " "), dir)
}

// runproc [-await FILE=REGEXP] [-signal SIG] [-head N] WANT CMD [ARG...]:
// run CMD as a child process of its own (for what testscript's exec cannot
// do) and require exit status WANT. -signal sends TERM, QUIT, HUP, INT or
// KILL once -await's file matches; -head makes CMD's stdout a pipe that is
// closed after N lines, as `CMD | head -N` does. CMD's output is then
// checked by stdout and stderr as usual.
func runproc(ts *testscript.TestScript, neg bool, args []string) {
	var awaitArg, sigName string
	head := -1
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args) > 1 {
		switch args[0] {
		case "-await":
			awaitArg = args[1]
		case "-signal":
			sigName = args[1]
		case "-head":
			head, _ = strconv.Atoi(args[1])
		default:
			ts.Fatalf("runproc: unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if neg || len(args) < 2 {
		ts.Fatalf("usage: runproc [-await FILE=REGEXP] [-signal SIG] [-head N] WANT CMD [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	path, err := exec.LookPath(filepath.Join(ts.Getenv("FAKEBIN"), args[1]))
	ts.Check(err)
	cmd := exec.Command(path, args[2:]...)
	cmd.Dir = ts.MkAbs(".")
	for _, k := range []string{"PATH", "HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "FAKEENGINE_DIR", "HSBX_KNOWN_PATHS", "WORK", "FAKEBIN", "TMPDIR"} {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, strings.Fields(ts.Getenv("RUNPROC_ENV"))...)
	var stdout, stderr strings.Builder
	cmd.Stderr = &stderr
	var pipe io.ReadCloser
	if head >= 0 {
		pipe, err = cmd.StdoutPipe()
		ts.Check(err)
	} else {
		cmd.Stdout = &stdout
	}
	ts.Check(cmd.Start())
	if head >= 0 {
		r := bufio.NewReader(pipe)
		for i := 0; i < head; i++ {
			line, err := r.ReadString('\n')
			stdout.WriteString(line)
			if err != nil {
				break
			}
		}
		pipe.Close() // the reader goes away
	}
	if sigName != "" {
		if awaitArg != "" {
			file, re, _ := strings.Cut(awaitArg, "=")
			await(ts, false, []string{file, re})
		}
		sig := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "QUIT": syscall.SIGQUIT, "HUP": syscall.SIGHUP,
			"INT": syscall.SIGINT, "KILL": syscall.SIGKILL}[sigName]
		if sig == 0 {
			ts.Fatalf("runproc: unknown signal %s", sigName)
		}
		ts.Check(cmd.Process.Signal(sig))
	}
	err = cmd.Wait()
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("runproc: %v", err)
		}
		got = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			got = 128 + int(ws.Signal())
		}
	}
	fmt.Fprint(ts.Stdout(), stdout.String())
	fmt.Fprint(ts.Stderr(), stderr.String())
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// env-file VAR FILE: set VAR to FILE's content, without surrounding space
// (an id a command printed, for a later command's arguments).
func envFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: env-file VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}

// doc-block DOC MARKER FILE: write the fenced code block that follows the
// line "<!-- MARKER -->" in DOC (a path from the repository's root, such as
// README.md or docs/json.md) to FILE, so that an example in the docs is
// tested as it stands.
func docBlock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: doc-block DOC MARKER FILE")
	}
	doc, marker := args[0], args[1]
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(doc)))
	ts.Check(err)
	_, after, ok := strings.Cut(string(b), "<!-- "+marker+" -->\n")
	if !ok {
		ts.Fatalf("%s has no <!-- %s --> marker", doc, marker)
	}
	fence, rest, _ := strings.Cut(after, "\n")
	if !strings.HasPrefix(fence, "```") {
		ts.Fatalf("%s: no code block after <!-- %s -->", doc, marker)
	}
	code, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		ts.Fatalf("%s: the code block after <!-- %s --> does not end", doc, marker)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), []byte(code+"\n"), 0o644))
}

// listen ADDR: a TCP listener on ADDR for the rest of the script, which
// accepts every connection and closes it (a server something can reach).
func listen(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: listen ADDR")
	}
	ln, err := net.Listen("tcp", args[0])
	ts.Check(err)
	ts.Defer(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}
