package sandbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// Sessions: a session is a named, long-lived shell in the sandbox (bash
// when the image has it, else sh) that keeps its working directory,
// variables, functions and aliases from one script to the next. It
// belongs to the sandbox, not to a process: it outlives the hsbx process
// (and the channel) that made it, and ends when it is closed, when the
// sandbox stops, when a script ends its shell (exit, exec, set -e), or
// after its idle limit. A script's run after such an end says so
// (ScriptResult.Reset). Scripts on one session run one at a time, in the
// order they reach it; sessions run in parallel.

// Script is shell text to run in a session.
type Script struct {
	Text string
	// Stdin is the script's input; nil: it reads end of file at once (it
	// can never read what comes after it).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Timeout stops the script (as Ctrl-C would, then its processes are
	// killed) after this long; the session lives on. 0 = none.
	Timeout time.Duration
	// IdleLimit ends the session after this long without a script, when
	// this run makes it; 0 = an hour.
	IdleLimit time.Duration
	// User runs the session as this user of the sandbox (Command.User's
	// forms; hsbx's agent switches to it, so it must run as root). Each
	// user's sessions are their own: "default" of one user is not another's.
	User string
}

// ScriptResult is how a script ended and what became of its session.
type ScriptResult struct {
	Code int // the script's $?, or the shell's status when it ended it
	// ShellID names the shell the script ran in: another ID is another
	// shell, with none of the last one's state.
	ShellID string
	// New: this run started the session's shell.
	New bool
	// Reset says why the shell this host (its state directory) last ran
	// this session's scripts in is gone, whoever started the one this ran
	// in ("" when it is the same shell, or none ran here before, or this
	// host closed it).
	Reset string
	// Ended: the script ended its session's shell (why); the next run
	// starts a new one.
	Ended string
}

// SessionInfo describes a live session.
type SessionInfo = wire.SessionInfo

// ErrNoSession says there is no session of that name.
var ErrNoSession = errors.New("no such session")

// ErrBadSessionName says a session name is not 1 to 64 of [A-Za-z0-9._-]
// (not starting with '.').
var ErrBadSessionName = errors.New("bad session name: use 1 to 64 letters, digits, '.', '_' or '-', not starting with '.'")

// ValidSessionName says whether name can name a session.
func ValidSessionName(name string) bool { return wire.ValidSessionName(name) }

type sessionReq struct {
	name, text, op string
	idle           time.Duration
	note           *wire.SessionNote
}

// RunScript runs sc.Text in session name's shell, starting the shell
// when the session has none (and the sandbox when it is not up). The
// error is nil whenever the script ran to its end, whatever its status;
// an interrupted script (timeout, ctx) is an *InterruptedError, as for
// Exec.
func (s *Sandbox) RunScript(ctx context.Context, name string, sc Script) (ScriptResult, error) {
	if !ValidSessionName(name) {
		return ScriptResult{}, fmt.Errorf("%w (got %q)", ErrBadSessionName, name)
	}
	if strings.IndexByte(sc.Text, 0) >= 0 {
		return ScriptResult{}, errors.New("the script holds a NUL byte, which no shell can read")
	}
	r := &sessionReq{name: name, text: sc.Text, idle: sc.IdleLimit}
	code, err := s.Exec(ctx, Command{Stdin: sc.Stdin, Stdout: sc.Stdout, Stderr: sc.Stderr, Timeout: sc.Timeout, User: sc.User, session: r})
	res := ScriptResult{Code: code}
	if n := r.note; n != nil {
		res.ShellID, res.New, res.Reset, res.Ended = n.ID, n.New, n.Reset, n.Ended
		s.recordShell(shellKey(name, sc.User), &res)
	}
	return res, err
}

// SessionError is hsbx's own failure to run a session's script — the
// sandbox's session server or the shell could not start, or went away —
// never the script's status (ScriptResult.Code is then meaningless).
type SessionError struct {
	Session, Msg string
	// Exhausted: the sandbox ran out of processes, memory, descriptors
	// or disk (errors.Is ErrResourceExhausted).
	Exhausted bool
	// NoShell: the image has neither bash nor sh (errors.Is ErrNoShell).
	NoShell bool
	// Lost: the session was lost while the script ran (it may have run
	// part-way); otherwise it did not run.
	Lost bool
}

// ErrResourceExhausted says the sandbox ran out of processes, memory or
// disk for hsbx's own work (a session's shell, the agent's helpers).
var ErrResourceExhausted = errors.New("the sandbox is out of resources")

// ErrNoShell says a session was asked of an image without a shell.
var ErrNoShell = errors.New("the image has no shell")

func (e *SessionError) Error() string { return "session " + e.Session + ": " + e.Msg }

// Unwrap is ErrResourceExhausted or ErrNoShell when it is one of them.
func (e *SessionError) Unwrap() error {
	switch {
	case e.Exhausted:
		return ErrResourceExhausted
	case e.NoShell:
		return ErrNoShell
	}
	return nil
}

// Hint names the fix.
func (e *SessionError) Hint() string {
	switch {
	case e.Exhausted:
		return "each session is a shell in the sandbox: close those no longer needed (Session.Close), end what runs there, or raise pids_limit or memory"
	case e.NoShell:
		return "sessions need bash or sh in the image; Exec runs an argv without a shell"
	}
	return "run it again (a new session server starts); what failed is named above"
}

// recordShell keeps the id of the shell session name last ran in for
// this host (its state directory), and sets res.Reset when that shell is
// gone, however it went and whoever started the one after it: another
// host's close and run, or a restart of the sandbox (which took the
// sandbox's own record with it).
func (s *Sandbox) recordShell(name string, res *ScriptResult) {
	if s.ephemeral || res.ShellID == "" {
		return
	}
	path := keystate.SessionFile(s.engineDir(), name)
	prev, err := os.ReadFile(path)
	last := strings.TrimSpace(string(prev))
	if err == nil && last == res.ShellID {
		return
	}
	if err == nil && last != "" && res.Reset == "" {
		if res.New {
			res.Reset = "its shell is gone: another process closed it, or the sandbox was restarted or recreated since"
		} else {
			res.Reset = "the shell this host last used is gone: it was closed or ended, and another process started a new one"
		}
	}
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	_ = os.WriteFile(path, []byte(res.ShellID+"\n"), 0o600)
}

// forgetShell drops session name's record (it was closed).
// shellKey names session name of user in this host's state (a user's
// "default" is not another's).
func shellKey(name, user string) string {
	if user == "" {
		return name
	}
	return "u" + hex.EncodeToString([]byte(user)) + "-" + name
}

func (s *Sandbox) forgetShell(name string) {
	_ = os.Remove(keystate.SessionFile(s.engineDir(), name))
}

// closeSession ends user's session name's shell (and what it runs) and
// forgets it (Session.Close).
func (s *Sandbox) closeSession(ctx context.Context, name, user string) error {
	if !ValidSessionName(name) {
		return fmt.Errorf("%w (got %q)", ErrBadSessionName, name)
	}
	s.forgetShell(shellKey(name, user))
	var stderr strings.Builder
	r := &sessionReq{name: name, op: wire.SessionOpClose}
	code, err := s.sessionOp(ctx, r, user, nil, &stderr)
	switch {
	case err != nil:
		return err
	case code == 1:
		return fmt.Errorf("%w: %s", ErrNoSession, name)
	case code != 0:
		return fmt.Errorf("closing session %s: %s", name, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Sessions lists user's live sessions ("": the exec user's; see
// Script.User).
func (s *Sandbox) Sessions(ctx context.Context, user string) ([]SessionInfo, error) {
	var out, stderr strings.Builder
	code, err := s.sessionOp(ctx, &sessionReq{op: wire.SessionOpList}, user, &out, &stderr)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("listing sessions: %s", strings.TrimSpace(stderr.String()))
	}
	var infos []SessionInfo
	dec := json.NewDecoder(strings.NewReader(out.String()))
	for dec.More() {
		var in SessionInfo
		if err := dec.Decode(&in); err != nil {
			return nil, fmt.Errorf("listing sessions: the agent answered %q: %w", clip(out.String(), 200), err)
		}
		infos = append(infos, in)
	}
	return infos, nil
}

// sessionOp runs a session operation in a running sandbox (never starts
// one: a stopped sandbox has no sessions).
func (s *Sandbox) sessionOp(ctx context.Context, r *sessionReq, user string, stdout, stderr io.Writer) (int, error) {
	c, found, err := s.probe(ctx)
	if err != nil {
		return -1, err
	}
	if !found || c.State != runtime.StateRunning {
		if r.op == wire.SessionOpList {
			return 0, nil
		}
		return 1, nil
	}
	return s.Exec(ctx, Command{Stdout: stdout, Stderr: stderr, User: user, session: r})
}

// sessionOneShot runs a session request through a channel opened for it
// alone (no holder, or the channel turned off): one engine call more
// than through a channel that is up. retry: the sandbox was not running
// (ensure it and try once more).
func (s *Sandbox) sessionOneShot(ctx context.Context, target string, c Command, env map[string]string) (code int, err error, retry bool) {
	conn, err := channel.Open(ctx, s.agent(ctx, target, s.execUser()))
	if err != nil {
		if cur, ierr := s.inspectOwn(ctx, target); ierr == nil && (cur == nil || cur.State != runtime.StateRunning) {
			return -1, err, true
		}
		return -1, fmt.Errorf("sessions need hsbx's agent in the sandbox, and it could not start: %w", err), false
	}
	defer conn.Close()
	code, err = s.sendOnChannel(ctx, target, c, env, conn.Run, time.Now())
	if errors.Is(err, errNotReached) {
		// A channel opened for it that took nothing: the script did not run
		// (it read as a success with status 0 before).
		return -1, fmt.Errorf("%w: the session's script did not reach hsbx's agent through the channel opened for it: %v", runtime.ErrEngine, err), false
	}
	return code, err, false
}

// Session is a handle on one named session of a sandbox: what an agent
// framework keeps per conversation. Its methods are safe for concurrent
// use; scripts on one session run one at a time.
type Session struct {
	sb   *Sandbox
	name string
	user string
}

// Session returns the handle on user's session name (made on its first
// Run): its scripts run as that user of the sandbox ("": the exec user;
// see Script.User).
func (s *Sandbox) Session(name, user string) *Session {
	return &Session{sb: s, name: name, user: user}
}

// Name is the session's name.
func (ss *Session) Name() string { return ss.name }

// Run runs text in the session's shell (see RunScript); sc.Text is
// ignored.
func (ss *Session) Run(ctx context.Context, text string, sc Script) (ScriptResult, error) {
	sc.Text = text
	if sc.User == "" {
		sc.User = ss.user
	}
	return ss.sb.RunScript(ctx, ss.name, sc)
}

// Close ends the session's shell (and what it runs, however detached) and
// forgets it: the next script of that name starts afresh, with no reset
// to report. ErrNoSession when it had none.
func (ss *Session) Close(ctx context.Context) error {
	return ss.sb.closeSession(ctx, ss.name, ss.user)
}
