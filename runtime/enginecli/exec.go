package enginecli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/startfail"
	"github.com/hsbx/hsbx/runtime"
)

// exec: a command in a running container, the execs still live in it, and
// a user the engine refuses.

// Exec implements runtime.Runtime.
func (e *Engine) Exec(ctx context.Context, s runtime.ExecSpec) (int, error) {
	if len(s.Cmd) == 0 {
		return -1, errors.New("exec: no command given")
	}
	args := []string{"exec"}
	if s.Interactive {
		args = append(args, "-i")
	}
	if s.TTY {
		args = append(args, "-t")
	}
	if s.WorkDir != "" {
		args = append(args, "-w", s.WorkDir)
	}
	if s.User != "" {
		args = append(args, "-u", s.User)
	}
	pe, err := passEnv(s.Env)
	if err != nil {
		return -1, err
	}
	defer pe.done()
	args = append(args, pe.args...)
	args = append(args, s.ID)
	args = append(args, s.Cmd...)
	argv := append([]string{e.bin}, args...)
	var stderr *HoldWriter
	var holds []*startHold // stdout, stderr
	cmd := proc.Cmd{Argv: argv, Env: e.clientEnv(pe.client), Stdin: s.Stdin, Timeout: s.Timeout, Files: pe.files}
	// (Not on a terminal: the client needs its own stdout there, and the
	// runtime's line is one the user reads anyway.)
	if s.Stdout != nil && (s.TTY || s.StdoutDirect) {
		cmd.Stdout = s.Stdout
	} else if s.Stdout != nil {
		h := newStartHold(s.Stdout)
		h.user = s.User != ""
		holds = append(holds, h)
		cmd.Stdout = h
	}
	if s.Stderr != nil {
		stderr = NewHoldWriter(s.Stderr, func(line string) bool {
			return e.d.Classify(OpExec, e.d.ExecErrorCode(), line) != nil
		})
		cmd.Stderr = stderr
		if !s.TTY {
			h := newStartHold(stderr)
			h.user = s.User != ""
			holds = append(holds, h)
			cmd.Stderr = h
		}
	}
	res, err := e.runner.Run(ctx, cmd)
	// A command the runtime could not start: the agent's status and words.
	var failed *startfail.Failure
	var refusal *startHold
	for _, h := range holds {
		code := -1
		if err == nil {
			code = res.ExitCode
		}
		if f := h.finish(code); f != nil && failed == nil {
			failed = f
		}
		if h.refused != "" && refusal == nil {
			refusal = h
		}
	}
	if refusal != nil {
		// What reads like the engine refusing the user may be the
		// command's own words: the engine is asked (one more exec, of a
		// program no image has, as that user — it never starts).
		if e.refusesUser(ctx, s) {
			if stderr != nil {
				stderr.Finish(false)
			}
			return res.ExitCode, &runtime.EngineError{Kind: runtime.ErrNoSuchUser, Argv: argv, ExitCode: res.ExitCode, Stderr: refusal.refused}
		}
		_ = refusal.giveBack()
	}
	if failed != nil {
		if stderr != nil {
			stderr.Finish(false)
			_, _ = io.WriteString(s.Stderr, failed.Message()+"\n")
		}
		return failed.Code, nil
	}
	var kind error
	if err == nil && res.ExitCode != 0 {
		kind = e.d.Classify(OpExec, res.ExitCode, string(res.Stderr))
	}
	var held []byte
	if stderr != nil {
		held = stderr.Finish(kind != nil)
	}
	if err != nil {
		return -1, e.runError(argv, err)
	}
	if kind != nil {
		return res.ExitCode, &runtime.EngineError{Kind: kind, Argv: argv, ExitCode: res.ExitCode,
			Stderr: strings.TrimSpace(string(res.Stderr)), Held: held}
	}
	return res.ExitCode, nil
}

// LiveExecs implements runtime.Runtime. Where the engine keeps stale
// sessions, each is asked with `container cleanup --exec ID`: the engine
// refuses ("as it is running") for a running one and tidies a finished one.
// A remote podman cannot be asked that (remoteLiveExecs).
func (e *Engine) LiveExecs(ctx context.Context, c runtime.Container) ([]string, error) {
	if !e.d.StaleExecSessions() || len(c.ExecIDs) == 0 {
		return c.ExecIDs, nil
	}
	if e.Location().Remote {
		return e.remoteLiveExecs(ctx, c)
	}
	var live []string
	for _, id := range c.ExecIDs {
		res, err := e.call(ctx, OpCleanup, []string{"container", "cleanup", "--exec", id, c.ID}, e.timeout)
		switch {
		case err == nil:
			continue // not running: a stale session
		case res.ExitCode > 0 && strings.Contains(string(res.Stderr), "as it is running"):
			live = append(live, id)
		case res.ExitCode > 0 && strings.Contains(string(res.Stderr), "no such exec session"):
			continue // it ended and went since inspect listed it (measured on 4.3)
		default:
			return nil, fmt.Errorf("asking whether exec session %.12s runs: %w", id, err)
		}
	}
	return live, nil
}

// refusesUser asks the engine whether it refuses s.User in s.ID: an exec
// of a program no image has, which the engine refuses with NoUserLine's
// words before looking for it when there is no such user, and otherwise
// fails to start (an OCI runtime's "no such file").
func (e *Engine) refusesUser(ctx context.Context, s runtime.ExecSpec) bool {
	argv := []string{e.bin, "exec", "-u", s.User, s.ID, "/hsbx-no-such-program"}
	res, err := e.runner.Run(ctx, proc.Cmd{Argv: argv, Env: e.clientEnv(nil), Timeout: e.timeout})
	if err != nil || res.ExitCode == 0 {
		return false
	}
	return NoUserLine(FirstLine(string(res.Stdout))) || NoUserLine(FirstLine(string(res.Stderr)))
}

// NoUserLine says whether line is the engines' refusal of exec --user
// for a user or group the container's files do not list (docker 20.10:
// exit 126, "unable to find user X: no matching entries in passwd file";
// podman 4.3: exit 255, the same after "Error: ").
func NoUserLine(line string) bool {
	line = strings.TrimPrefix(strings.TrimSpace(line), "Error: ")
	for _, w := range []string{"user ", "group "} {
		if rest, ok := strings.CutPrefix(line, "unable to find "+w); ok {
			return strings.Contains(rest, ": no matching entries in ")
		}
	}
	return false
}

// remoteLiveExecs is LiveExecs on a remote podman, whose client has no
// `container cleanup` ("cannot use command ... with the remote podman
// client") and whose inspect lists an exec session for minutes after it
// ended (measured on 4.3 over ssh). `top` (one call) shows the processes
// that run: an exec's own process is a child of the runtime, outside the
// sandbox (parent 0 there), as only PID 1 is besides. So n such processes
// are n live sessions: the first n of the list stand for them (which ones
// cannot be told; the callers count them). With fewer listed than run, or
// no answer, every listed one counts as live.
func (e *Engine) remoteLiveExecs(ctx context.Context, c runtime.Container) ([]string, error) {
	if c.State != runtime.StateRunning {
		return nil, nil // nothing runs in it
	}
	res, err := e.call(ctx, OpTop, []string{"top", c.ID, "pid", "ppid"}, e.timeout)
	if err != nil {
		return nil, fmt.Errorf("asking which exec sessions run (top): %w", err)
	}
	n, err := ParseTopExecs(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("%w: %s top: %v", runtime.ErrBadOutput, e.d.Name(), err)
	}
	if n >= len(c.ExecIDs) {
		return c.ExecIDs, nil
	}
	return c.ExecIDs[:n], nil
}

// ParseTopExecs counts, in `top ID pid ppid`'s table (a header, then one
// "PID PPID" row a process), the processes whose parent is outside the
// sandbox (0) other than PID 1: those an exec started.
func ParseTopExecs(out []byte) (int, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "PID") {
		return 0, fmt.Errorf("no PID PPID header in %q", clip(out))
	}
	n := 0
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 2 {
			return 0, fmt.Errorf("a row of %d fields, want 2: %q", len(f), l)
		}
		pid, err1 := strconv.Atoi(f[0])
		ppid, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || pid < 1 || ppid < 0 {
			return 0, fmt.Errorf("not a PID and a PPID: %q", l)
		}
		if ppid == 0 && pid != 1 {
			n++
		}
	}
	return n, nil
}
