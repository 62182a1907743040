package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// Command is one command to run in a sandbox.
type Command struct {
	Argv []string
	// WorkDir is where the command runs: "" is the sandbox's working
	// directory (Spec.Cwd), and a relative one is taken from there.
	WorkDir string
	// Env: literal values; the names go on argv, the values through the
	// engine client's environment — a name the client reads itself
	// (DOCKER_HOST, PATH, LD_PRELOAD, ...) through the exec channel or an
	// env file, never the client's. HSBX_EXEC_ID is refused, and such a
	// name whose value an env file cannot hold where no channel carries it.
	Env map[string]string
	// Interactive keeps stdin open (-i); a non-nil Stdin implies it.
	Interactive bool
	TTY         bool
	Stdin       io.Reader
	// Stdout and Stderr receive the command's output. When a write fails
	// (a closed pipe), the command is stopped in the sandbox and Exec
	// returns an *InterruptedError whose Cause is a *WriterError.
	Stdout io.Writer
	Stderr io.Writer
	// Timeout kills the command (in the sandbox, not only the client)
	// after this long; 0 = none.
	Timeout time.Duration
	// User runs the command as this user of the sandbox: a name, a uid,
	// "name:group" or "uid:gid", looked up in the sandbox's /etc/passwd
	// and /etc/group as the engine's exec --user does ("" is the sandbox's
	// exec user). One the sandbox does not have is ErrNoSuchUser. Through
	// the exec channel hsbx's agent switches user (it must run as root);
	// on the plain path the engine does (kubectl cannot: there only the
	// channel runs a command as another user).
	User string

	session *sessionReq // RunScript's: a session's script, not Argv
	tap     *stdinTap   // Stdin, for one try after another (Exec)
	stats   *execStats  // what the record of what ran says of it (nil: none)
}

// ExecIDVar marks every process a command starts (the variable is
// inherited), so the whole tree can be found and killed in the sandbox.
// It is reserved: a Command.Env entry for it is refused.
const ExecIDVar = runtime.ExecMarker

// ErrCommandTimeout is returned (wrapped in *InterruptedError) when Command.Timeout fired.
var ErrCommandTimeout = errors.New("command timed out")

// WriterError says the command's output could not be delivered: the
// reader went away (a broken pipe) or the writer failed.
type WriterError struct {
	Stream string // "stdout" or "stderr"
	Err    error
}

func (e *WriterError) Error() string {
	return fmt.Sprintf("writing the command's %s failed: %v", e.Stream, e.Err)
}
func (e *WriterError) Unwrap() error { return e.Err }

// InterruptedError says the command was stopped before it finished, by
// its timeout, the caller's context (a signal) or a failed writer; its
// processes in the sandbox were killed (Killed) or could not be (KillErr).
type InterruptedError struct {
	Cause   error // ErrCommandTimeout, a *WriterError, or the context's cause
	Killed  int   // processes killed in the sandbox
	KillErr error
}

func (e *InterruptedError) Error() string {
	msg := fmt.Sprintf("command interrupted: %v; killed %d process(es) in the sandbox", e.Cause, e.Killed)
	if e.KillErr != nil {
		msg = fmt.Sprintf("command interrupted: %v; its processes in the sandbox could not be killed: %v", e.Cause, e.KillErr)
	}
	return msg
}

func (e *InterruptedError) Unwrap() error { return e.Cause }

// StoppedDuringExecError says the sandbox stopped after a command was
// sent to it, and the exec ended with what reads like the engine's "not
// running": the command may have run (and printed those words itself),
// so it was not run again. Its exit status (Code) and stderr were kept.
type StoppedDuringExecError struct {
	Name string
	At   time.Time // when the engine says the sandbox stopped
	Code int       // the exec's exit status
}

func (e *StoppedDuringExecError) Error() string {
	return fmt.Sprintf("sandbox %s stopped while the command was starting or running (at %s; the exec ended with status %d): it may have run, so it was not run again",
		e.Name, e.At.Format(time.RFC3339Nano), e.Code)
}

// Unwrap makes it runtime.ErrNotRunning.
func (e *StoppedDuringExecError) Unwrap() error { return runtime.ErrNotRunning }

// Exec runs c in the sandbox and returns the command's exit status.
//
// Warm, it is one engine call: the command is run in the container this
// host verified for the key, addressed by id (a name can be squatted, an
// id cannot). Otherwise the sandbox is ensured (and verified) first.
//
// A command runs at most once. When the exec fails with what reads like
// the engine saying the container is missing, stopped or paused, hsbx asks
// the engine (one inspect): if the sandbox is running after all, the words
// were the command's own, and its stderr and exit status are delivered
// unchanged; only if it really is not up, and stopped before the exec
// began (the engine's FinishedAt), is it ensured and the command run. A
// sandbox that stopped after the exec began may have run the command:
// that is a *StoppedDuringExecError, never a second run.
func (s *Sandbox) Exec(ctx context.Context, c Command) (int, error) {
	if s.m.c.NoRecord {
		return s.exec(ctx, c)
	}
	began := time.Now()
	c.stats = &execStats{in: -1, out: -1, err: -1}
	code, err := s.exec(ctx, c)
	s.recordExec(c, began, code, err)
	return code, err
}

func (s *Sandbox) exec(ctx context.Context, c Command) (int, error) {
	if err := s.key.Validate(); err != nil {
		return -1, err // before the warm path: its marker is under the key's hash
	}
	if err := s.checkPlace(); err != nil {
		return -1, err
	}
	if c.WorkDir != "" && !strings.HasPrefix(c.WorkDir, "/") {
		c.WorkDir = path.Join(s.workDir(), c.WorkDir) // as cp takes a relative path
	}
	env, steer, err := s.m.execEnv(c.Env)
	if err != nil {
		return -1, err
	}
	if err := validUser(c.User); err != nil {
		return -1, err
	}
	// A name the engine client reads itself (PATH, HOME, DOCKER_HOST, ...)
	// whose value an env file cannot hold (steer: see execEnv) goes only
	// where the channel (values in its frames, to the agent) or kubectl
	// (values on its stdin) carries it.
	if steer != "" && s.rt().Capabilities().ExecEnvInBand {
		steer = ""
	}
	// The route, chosen once: through hsbx's agent (the holder, or this
	// process's own channel) while it takes the command, else the engine's
	// exec. Only errNotReached — the command never got to the agent — lets
	// a command go the other way.
	viaAgent := s.usesChannel(c)
	if steer != "" && !viaAgent {
		return -1, s.steerError(steer, "the command cannot take it (a terminal, a per-process sandbox, or exec_channel = false)")
	}
	// Another user: the agent, not root in a sandbox run as the host's
	// user, could not become one; the engine's exec can, where it has
	// --user. Where it has none (kubectl), only the agent runs it.
	agentUser := c.User != "" && s.engineUserLacks() != "" && c.session == nil
	if c.User != "" && s.spec.RunAsHostUser && !agentUser && c.session == nil {
		viaAgent = false
	}
	if agentUser && !viaAgent {
		return -1, s.userError(c.User, "the command cannot take it (a terminal, a per-process sandbox, or exec_channel = false)")
	}
	if c.Stdin != nil && viaAgent {
		c.tap = newStdinTap(c.Stdin) // a try through the channel may take some
	}
	target := s.warmTarget()
	if target != "" && s.spec.Egress != nil && s.m.c.Holders.Dir == "" {
		s.keepRelay(ctx, target) // the Go package's relay, if this handle has none yet
	}
	if target == "" || !viaAgent || s.m.c.Holders.Dir == "" {
		beforeStart(ctx) // a holder's command is sent first (channel.Request.AfterSend)
	}
	var known *runtime.Container // inspected, this sandbox, not running
	lost := ""                   // the verified container the engine says is gone
	for attempt := 0; ; attempt++ {
		if target == "" {
			res, err := s.ensureFrom(ctx, known, false)
			if err != nil {
				return -1, err
			}
			target = res.ID
			if lost != "" && res.Action == Created {
				// A down (or another process) removed it: say so, never
				// silently run in a new, empty sandbox.
				s.m.c.Warn(fmt.Sprintf("sandbox %s (%.12s) was removed (by down or another process); the command runs in a new sandbox, %.12s",
					s.name, lost, res.ID))
			}
		}
		if viaAgent {
			if code, err := s.execChannel(ctx, target, c, env); !errors.Is(err, errNotReached) {
				return code, err
			}
			beforeStart(ctx) // the holder did not take it: what follows may start things
			if agentUser {
				if s.awaitHolder(ctx, target) {
					if code, err := s.execChannel(ctx, target, c, env); !errors.Is(err, errNotReached) {
						return code, err
					}
				}
				return -1, s.userError(c.User, "the channel is "+s.ChannelStatus(target))
			}
			if steer != "" {
				if s.awaitHolder(ctx, target) {
					if code, err := s.execChannel(ctx, target, c, env); !errors.Is(err, errNotReached) {
						return code, err
					}
				}
				return -1, s.steerError(steer, "the channel is "+s.ChannelStatus(target))
			}
		}
		if c.session != nil {
			// Only hsbx's agent runs a session: with no channel up, through
			// a channel of the script's own (and the CLI starts its holder
			// for the next one, as after a plain exec).
			code, err, retry := s.sessionOneShot(ctx, target, c, env)
			if !retry && viaAgent {
				s.afterPlainExec(target)
			}
			if !retry || attempt > 0 {
				return code, err
			}
			s.forget(target)
			known, target = nil, ""
			continue
		}
		began := time.Now()
		pc := c
		if c.tap != nil {
			pc.Stdin = c.tap.plain()
		}
		code, err := s.execOnce(ctx, target, pc, env)
		if err == nil && viaAgent {
			s.afterPlainExec(target)
		}
		if err == nil && code == 137 {
			s.sayIfGone(ctx, target)
		}
		if !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) && !errors.Is(err, runtime.ErrPaused) {
			return code, err
		}
		cur, cerr := s.inspectOwn(ctx, target)
		if cerr != nil {
			return code, fmt.Errorf("%w (and asking the engine whether sandbox %s is up failed: %v)", err, s.name, cerr)
		}
		if cur != nil && cur.State == runtime.StateRunning {
			// The engine's words came from the command: its stderr and
			// status are its own.
			var ee *runtime.EngineError
			if errors.As(err, &ee) && c.Stderr != nil && len(ee.Held) > 0 {
				_, _ = c.Stderr.Write(ee.Held)
			}
			return code, nil
		}
		if attempt > 0 {
			return code, err
		}
		if cur != nil && !cur.Finished.IsZero() && !cur.Finished.Before(began) {
			// It stopped after this exec began: the words may be the
			// command's, printed as its sandbox went down. It may have
			// run, so it is reported, never run again.
			var ee *runtime.EngineError
			if errors.As(err, &ee) && c.Stderr != nil && len(ee.Held) > 0 {
				_, _ = c.Stderr.Write(ee.Held)
			}
			return -1, &StoppedDuringExecError{Name: s.name, At: cur.Finished, Code: code}
		}
		s.m.log.Debug("sandbox not up; ensuring it", "id", target, "error", err)
		if cur == nil {
			s.forget(target) // gone: look for it afresh
			lost = target
		}
		known, target = cur, ""
	}
}

// sayIfGone explains a command killed by SIGKILL (137) when its sandbox
// was stopped or removed under it (a down, a stop): one inspect, only for
// such commands. The status stays the command's.
//
// The command's kill can reach hsbx a moment before the engine records
// the stop (the fake engine kills the processes, then writes the state:
// on a loaded machine the inspect came between): a sandbox still running
// is asked again, twice, 200 ms apart.
func (s *Sandbox) sayIfGone(ctx context.Context, target string) {
	for try := 0; try < 3; try++ {
		cur, err := s.inspectOwn(ctx, target)
		if err != nil {
			return
		}
		if cur == nil || cur.State != runtime.StateRunning {
			s.m.c.Warn(fmt.Sprintf("sandbox %s was stopped or removed while the command ran (by down, stop or another process): the command was killed", s.name))
			return
		}
		if try < 2 && sleepCtx(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
}

// warmTarget is the id of the container this host verified for the key
// ("" when none: Exec ensures first).
func (s *Sandbox) warmTarget() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" || s.ephemeral {
		return s.id
	}
	mk, ok := readMarker(s.engineDir())
	if !ok || !markedPosture(s.spec, mk.Network) || s.spec.OCIRuntime != "" && !sameRuntime(s.spec.OCIRuntime, mk.OCIRuntime) {
		return "" // never verified here, or not under the network posture or runtime asked for
	}
	if !s.warmDrift(mk) {
		return "" // made from other settings: Ensure applies on_drift
	}
	return mk.ID
}

// forget drops a verified id that the engine says is gone or down, here
// and in the host's marker, so Ensure looks for the sandbox afresh.
func (s *Sandbox) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id == id {
		s.id = ""
	}
	if mk, ok := readMarker(s.engineDir()); ok && mk.ID == id && !s.ephemeral {
		removeMarker(s.engineDir())
	}
}

// inspectOwn asks the engine for the container id: nil when it is gone or
// not this sandbox.
func (s *Sandbox) inspectOwn(ctx context.Context, id string) (*runtime.Container, error) {
	cs, err := s.rt().Inspect(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(cs) != 1 || !s.key.Owns(cs[0]) {
		return nil, nil
	}
	return &cs[0], nil
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// markInUse records a command starting in a persistent sandbox (the
// in-use lock, released by the returned func, and the last-use time) for
// the idle reaper; both exec paths take it.
func (s *Sandbox) markInUse() (release func()) {
	if s.ephemeral {
		return func() {}
	}
	release = keystate.Hold(s.stateDir(), s.key.Hash())
	if now := time.Now().UnixNano(); now-s.touched.Load() >= int64(touchEvery) {
		s.touched.Store(now)
		keystate.Touch(s.stateDir(), s.key.Hash())
	}
	return release
}

// touchEvery is how often one handle records a use: far finer than any
// idle window (minutes), and two system calls a command fewer.
const touchEvery = time.Second

// commandContext is a command's context on either exec path: cancel
// stops it with a cause (a failed writer), c.Timeout with
// ErrCommandTimeout; end releases both.
func commandContext(ctx context.Context, c Command) (context.Context, context.CancelCauseFunc, func()) {
	execCtx, cancel := context.WithCancelCause(ctx)
	if c.Timeout <= 0 {
		return execCtx, cancel, func() { cancel(nil) }
	}
	tctx, tcancel := context.WithTimeoutCause(execCtx, c.Timeout, ErrCommandTimeout)
	return tctx, cancel, func() { tcancel(); cancel(nil) }
}
