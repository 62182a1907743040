package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// The exec channel: with Config.Channel set, a command in a warm sandbox
// goes to hsbx's agent over one open `exec -i` stream instead of costing
// an engine call. In-process (the Go package) the Sandbox holds the
// channel until Close; with holders (the CLI) a detached holder
// process holds it behind a unix socket for many hsbx processes (the
// hsbx command's own wiring, Config.Holders). Either
// way a command runs at most once: it falls back to the plain exec path
// only when it provably never reached the agent.

// channelState is a Sandbox's in-process channel.
type channelState struct {
	mu          sync.Mutex
	conn        *channel.Conn
	id          string    // the container the conn reaches
	opened      time.Time // when conn's agent started (this host's clock)
	unavailable string    // why the agent cannot run in container unavailID (no retry there)
	unavailID   string
	holderTried atomic.Bool
	// relay is the channel an allow-listed sandbox's egress relay runs on
	// when this handle holds it (the Go package, a per-process sandbox).
	relay       *channel.Conn
	relayID     string
	relayFailed string // the container whose relay could not start (not tried again)
}

// usesChannel says whether c may go through the channel: a TTY needs the
// engine's own terminal handling, and a per-process sandbox is not worth
// a holder.
func (s *Sandbox) usesChannel(c Command) bool {
	if !s.m.c.Channel || c.TTY {
		return false
	}
	if s.m.c.Holders.Dir != "" && s.ephemeral {
		return false
	}
	return true
}

func (s *Sandbox) execUser() string {
	if s.spec.RunAsHostUser {
		return fmt.Sprintf("%d:%d", s.m.c.UID, s.m.c.GID)
	}
	return ""
}

// holderSocket is the socket of the holder for container id (the CLI's
// stop and down end it there).
func (m *Manager) holderSocket(id, user string) string {
	if m.c.Holders.Dir == "" {
		return ""
	}
	parts := []string{m.c.Runtime.Binary(), id, user}
	for _, k := range endpointVars {
		v, _ := environ.Lookup(m.c.Environ, k)
		parts = append(parts, k+"="+v)
	}
	return channel.SocketPath(m.c.Holders.Dir, parts...)
}

// endpointVars choose which engine a client reaches: a holder serves one.
var endpointVars = []string{"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF"}

// errNotReached: the command never reached hsbx's agent (no channel here,
// or one that took nothing), so it did not run: take the plain path. It is
// the only outcome of the channel that lets a command go another way; every
// other error is the command's end.
var errNotReached = errors.New("the command did not reach hsbx's agent")

// execChannel runs c through the channel to container target;
// errNotReached when it was not sent (run it the plain way).
//
// In-process, a command whose agent was gone before it was sent (the
// sandbox restarted behind the program's back, and the channel had not
// noticed yet) goes once more through a channel opened anew: it never
// ran, and the plain path would cost an engine call now and leave the
// channel down until the next command. A holder (the CLI) that served a
// gone agent has ended; the CLI takes the plain path and starts another.
// c's stdin goes to each try from its first byte (stdinTap).
func (s *Sandbox) execChannel(ctx context.Context, target string, c Command, env map[string]string) (int, error) {
	if c.Stdin != nil && c.tap == nil {
		c.tap = newStdinTap(c.Stdin)
	}
	for try := 0; ; try++ {
		run, opened, ok := s.channelRunner(ctx, target)
		if !ok {
			return 0, errNotReached
		}
		code, err := s.sendOnChannel(ctx, target, c, env, run, opened)
		switch {
		case !errors.Is(err, errNotReached):
			return code, err
		case errors.Is(err, errAgentGoneBefore) && try == 0 && s.m.c.Holders.Dir == "":
			continue
		}
		return 0, errNotReached
	}
}

// sendOnChannel runs c through run, an open way to the agent;
// errNotReached (wrapping why) when the command never got there.
func (s *Sandbox) sendOnChannel(ctx context.Context, target string, c Command, env map[string]string, run runFunc, opened time.Time) (int, error) {
	defer s.markInUse()()
	token := execToken()
	keys := slices.Sorted(maps.Keys(env))
	st := wire.Start{Argv: c.Argv, Dir: c.WorkDir, Marker: ExecIDVar + "=" + token, User: c.User}
	if r := c.session; r != nil {
		st.Argv, st.Session, st.Script, st.Op, st.SessionIdleMS = nil, r.name, r.text, r.op, r.idle.Milliseconds()
	}
	for _, k := range keys {
		st.Env = append(st.Env, k+"="+env[k])
	}
	execCtx, cancel, end := commandContext(ctx, c)
	defer end()
	var alive atomic.Bool
	req := channel.Request{Start: st,
		Stdout:    watch(c.Stdout, "stdout", false, &alive, cancel),
		Stderr:    watch(c.Stderr, "stderr", false, &alive, cancel),
		AfterSend: beforeStartOf(ctx)}
	if c.tap != nil {
		req.Stdin = c.tap.next()
	} else if c.Stdin != nil {
		req.Stdin = c.Stdin
	}
	// The caller's own files (the CLI's stdout and stderr): a holder
	// writes to them itself.
	req.StdoutFile, _ = c.Stdout.(*os.File)
	req.StderrFile, _ = c.Stderr.(*os.File)
	began := time.Now()
	res, err := run(execCtx, req)
	if c.session != nil {
		c.session.note = res.Session
	}
	if st := c.stats; st != nil && !errors.Is(err, channel.ErrNotDelivered) {
		st.via, st.in, st.out, st.err = "channel", res.StdinBytes, res.StdoutBytes, res.StderrBytes
	}
	var be *channel.BrokenError
	switch {
	case errors.Is(err, channel.ErrNotDelivered):
		s.m.log.Debug("exec channel not available; plain exec", "id", target, "error", err)
		s.dropChannel(target)
		if err := inputLost(c); err != nil {
			return -1, err
		}
		return 0, errNotReached
	case errors.As(err, &be):
		s.dropChannel(target)
		if opened.IsZero() {
			opened = be.AgentSince // the CLI's holder says when its agent answered
		}
		berr := s.channelBroke(ctx, target, token, be, opened, began)
		if errors.Is(berr, errAgentGoneBefore) {
			s.m.log.Debug("exec channel: its agent was gone before the command was sent; sent again", "id", target, "error", berr)
			if err := inputLost(c); err != nil {
				return -1, err
			}
			return 0, fmt.Errorf("%w: %w", errNotReached, berr)
		}
		return -1, berr
	case err != nil:
		return -1, err
	case res.WriteErr != nil:
		return -1, &InterruptedError{Cause: &WriterError{Stream: res.WriteErr.Stream, Err: res.WriteErr}, Killed: res.Killed}
	case res.Interrupted:
		return -1, &InterruptedError{Cause: context.Cause(execCtx), Killed: res.Killed}
	case res.Failure.Msg != "":
		return res.Code, agentFailure(c, res)
	}
	return res.Code, nil
}

// agentFailure is the error of a command the agent's machinery failed
// (channel.Failure): not the command's status, which there is none of.
func agentFailure(c Command, res channel.Result) error {
	f := res.Failure
	if f.NoUser {
		return fmt.Errorf("%w: %s", ErrNoSuchUser, f.Msg)
	}
	if c.session != nil {
		return &SessionError{Session: c.session.name, Msg: f.Msg, Exhausted: f.Exhausted, NoShell: f.NoShell,
			Lost: res.Session != nil && res.Session.Ended != ""}
	}
	if f.Exhausted {
		return fmt.Errorf("%w: %s", ErrResourceExhausted, f.Msg)
	}
	return fmt.Errorf("%w: hsbx's agent could not run the command: %s", runtime.ErrEngine, f.Msg)
}

// channelBroke says what became of a command whose channel broke under
// it, after asking the engine: the sandbox stopped or went (down, stop,
// another process), or it runs on without the agent's stream (the engine
// restarted under it, as docker's live-restore allows, or the engine
// client carrying the stream was killed). Then the command may still run
// with nobody to read it: hsbx kills it by its marker. An engine that
// does not answer cannot be asked; the agent stops the command itself
// once it has heard nothing from hsbx for channel.AgentDeadAfter.
//
// One case is known not to have run: the in-process channel's agent
// (opened at opened) belonged to an earlier run of the sandbox, which had
// been restarted before the command was sent (the engine's StartedAt lies
// between the two). A dead agent runs nothing, so the command takes the
// plain path once (errAgentGoneBefore), as a first command would — the
// rule and the clocks are the ones a stopped sandbox's FinishedAt is
// judged by (Exec).
func (s *Sandbox) channelBroke(ctx context.Context, target, token string, be *channel.BrokenError, opened, began time.Time) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.rt().CallTimeout()+time.Second)
	defer cancel()
	// A restarting engine (what broke the stream) answers again within
	// seconds: wait for it, within one engine call's time.
	var cur *runtime.Container
	var ierr error
	for until := time.Now().Add(s.rt().CallTimeout()); ; {
		cur, ierr = s.inspectOwn(ctx, target)
		if !errors.Is(ierr, runtime.ErrUnreachable) || time.Now().After(until) || sleepCtx(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	switch {
	case ierr != nil:
		return fmt.Errorf("%w: the exec channel broke mid-command (%v) and the engine does not answer (%v); the agent stops the command in %s within %s",
			runtime.ErrEngine, be.Err, ierr, s.name, channel.AgentDeadAfter)
	case cur != nil && cur.State == runtime.StatePaused:
		return fmt.Errorf("%w: sandbox %s is paused and the channel broke mid-command (%v); it was not run again, and may run once the sandbox is unpaused",
			runtime.ErrEngine, s.name, be.Err)
	case cur == nil || cur.State != runtime.StateRunning:
		return fmt.Errorf("%w: sandbox %s was stopped or removed while the command ran (down, stop, another process); it may have run part-way: %v",
			runtime.ErrEngine, s.name, be)
	}
	if !opened.IsZero() && cur.Started.After(opened) && cur.Started.Before(began) {
		return fmt.Errorf("%w: sandbox %s was restarted at %s, after its channel opened and before the command was sent",
			errAgentGoneBefore, s.name, cur.Started.Format(time.RFC3339Nano))
	}
	n, kerr := s.killMarked(ctx, target, token)
	if kerr != nil {
		return fmt.Errorf("%w: the channel broke mid-command (%v); sandbox %s still runs (did the engine restart?) and stopping the command failed (%v): its agent stops it within %s",
			runtime.ErrEngine, be.Err, s.name, kerr, channel.AgentDeadAfter)
	}
	return fmt.Errorf("%w: the channel broke mid-command (%v); sandbox %s still runs (did the engine restart?): hsbx stopped the command (%d processes killed), not run again",
		runtime.ErrEngine, be.Err, s.name, n)
}

type runFunc func(context.Context, channel.Request) (channel.Result, error)

// inputLost is the error for a command that never ran but cannot be sent
// again: the try took more of its input than hsbx keeps (stdinTap).
func inputLost(c Command) error {
	if c.tap == nil || !c.tap.lost() {
		return nil
	}
	return fmt.Errorf("%w: the exec channel failed before the command started, having taken more input than hsbx keeps to resend (%d bytes); the command was not run",
		runtime.ErrEngine, tapKeep)
}

// errAgentGoneBefore: the command went to an agent that was gone before
// it was sent (see channelBroke); it never ran.
var errAgentGoneBefore = errors.New("the exec channel's agent was gone before the command was sent")

// channelRunner returns how to reach the agent for target: the holder's
// socket (CLI) or the Sandbox's own Conn, opened on first use (opened:
// when its agent answered, for the Conn; zero for a holder, whose
// BrokenError carries it).
func (s *Sandbox) channelRunner(ctx context.Context, target string) (run runFunc, opened time.Time, ok bool) {
	if s.m.c.Holders.Dir != "" {
		sock := s.m.holderSocket(target, s.execUser())
		return func(ctx context.Context, r channel.Request) (channel.Result, error) {
			return channel.RunVia(ctx, sock, r)
		}, time.Time{}, true
	}
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.unavailable != "" && cs.unavailID == target {
		return nil, time.Time{}, false
	}
	if cs.conn != nil && cs.id == target && cs.conn.Err() == nil {
		return cs.conn.Run, cs.opened, true
	}
	if cs.conn != nil {
		_ = cs.conn.Close()
		cs.conn = nil
	}
	conn, err := channel.Open(ctx, s.agent(ctx, target, s.execUser()))
	if err != nil {
		var ue *channel.UnavailableError
		if errors.As(err, &ue) {
			cs.unavailable, cs.unavailID = ue.Reason, target
		}
		s.m.log.Debug("exec channel not opened; plain exec", "id", target, "error", err)
		return nil, time.Time{}, false
	}
	// Taken once the agent answered: a restart after this moment ended it.
	opened = time.Now()
	cs.conn, cs.id, cs.opened = conn, target, opened
	return conn.Run, opened, true
}

// awaitHolder starts the CLI's holder for target now, not after a plain
// exec, and waits (within a few engine calls' time) until it serves: for
// a command only the channel can run. The Go package's own channel has
// been tried already. It reports whether a holder serves.
func (s *Sandbox) awaitHolder(ctx context.Context, target string) bool {
	if !s.m.c.Holders.Starts() {
		return false
	}
	sock := s.m.holderSocket(target, s.execUser())
	if _, marked := channel.UnavailableReason(sock); marked {
		return false
	}
	s.ch.holderTried.Store(true)
	s.m.c.Holders.Start(sock, s.holderSpec(target, s.relays()))
	deadline := time.Now().Add(min(4*s.rt().CallTimeout(), time.Minute))
	for time.Now().Before(deadline) {
		if channel.Alive(sock, time.Second) {
			return true
		}
		if _, marked := channel.UnavailableReason(sock); marked || sleepCtx(ctx, 50*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// dropChannel forgets a broken in-process channel (the next exec opens
// a new one).
func (s *Sandbox) dropChannel(target string) {
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.conn != nil && cs.id == target {
		_ = cs.conn.Close()
		cs.conn = nil
	}
}

// afterPlainExec starts a holder for the next hsbx process (CLI), once
// per handle, when the plain path ran a command in a verified sandbox.
func (s *Sandbox) afterPlainExec(target string) {
	if !s.m.c.Holders.Starts() || s.ephemeral || s.ch.holderTried.Swap(true) {
		return
	}
	s.m.c.Holders.Start(s.m.holderSocket(target, s.execUser()), s.holderSpec(target, s.relays()))
}

// closeChannel ends the in-process channel (the agent kills what it runs).
func (s *Sandbox) closeChannel() {
	cs := &s.ch
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.conn != nil {
		_ = cs.conn.Close()
		cs.conn = nil
	}
}

// ChannelStatus says whether commands to container id can skip the
// engine call: "up" (a holder, or this handle's channel, is open), "down"
// (none yet; the next exec starts one), "off", or "unavailable: <why>".
func (s *Sandbox) ChannelStatus(id string) string {
	if s.m.c.Channel && s.m.c.Holders.Dir == "" {
		s.ch.mu.Lock()
		defer s.ch.mu.Unlock()
		switch {
		case s.ch.unavailable != "" && s.ch.unavailID == id:
			return "unavailable: " + s.ch.unavailable
		case s.ch.conn != nil && s.ch.id == id && s.ch.conn.Err() == nil:
			return "up"
		}
		return "down"
	}
	return s.m.holderStatus(id, s.execUser())
}

// holderStatus is ChannelStatus for the holders of container id.
func (m *Manager) holderStatus(id string, users ...string) string {
	if !m.c.Channel {
		return "off"
	}
	if m.c.Holders.Dir == "" {
		return "down"
	}
	status := "down"
	for _, u := range users {
		sock := m.holderSocket(id, u)
		if channel.Alive(sock, time.Second) {
			return "up"
		}
		if why, ok := channel.UnavailableReason(sock); ok {
			status = "unavailable: " + why
		}
	}
	return status
}

// endChannel ends the channel to container id before stop or down: the
// holder (or this handle's own channel) would end with the container
// anyway, but not before the engine had to kill the agent. With wait, it
// returns once the holder's agent exec is over (this handle's own channel
// always waits): a replacement asks the engine next whether any command
// still runs.
func (s *Sandbox) endChannel(ctx context.Context, id string, wait bool) {
	if !s.m.c.Channel {
		return
	}
	if s.m.c.Holders.Dir != "" {
		if wait {
			channel.ShutdownWait(ctx, s.m.holderSocket(id, s.execUser()))
		} else {
			channel.Shutdown(ctx, s.m.holderSocket(id, s.execUser()))
		}
		return
	}
	s.dropChannel(id)
}
