package sandbox

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/iocount"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// How a run of hsbx's agent binary reaches the sandbox: the route under
// Door.Run, for the agent-backed features (door.go).

// trimAgent is the agent's words without its prefix.
func trimAgent(b []byte) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "hsbx agent: "))
}

// filePath is p as the sandbox's absolute path.
func (s *Sandbox) filePath(p string) string {
	p = s.sandboxPath(p)
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/" // "//"
		}
	}
	return p
}

// agentReq is a run of hsbx's agent: its mode's arguments, the user it
// runs as, its streams, and (for a process it starts) the environment
// values and working directory.
type agentReq struct {
	args   []string
	user   string
	stdin  io.Reader
	stdout io.Writer
	env    map[string]string
	dir    string
	steer  string    // a name in env the engine client reads: only the channel carries it
	stderr io.Writer // also given the mode's stderr, when set
}

// agentRun runs hsbx's agent with args in the sandbox's running container,
// through the exec channel when it takes the command, else as one plain
// exec of the agent (the CLI then starts its holder for the next one). A
// sandbox that is not up is ensured first; a container the engine says
// went or stopped under the plain exec is ensured once more.
func (s *Sandbox) agentRun(ctx context.Context, q agentReq, st *execStats) (int, *proc.TailBuffer, error) {
	c, errb := agentCommand(q.args, q.stdin, q.stdout)
	c.User, c.stats, c.WorkDir = q.user, st, q.dir
	var stderr io.Writer = errb
	if q.stderr != nil {
		stderr = io.MultiWriter(errb, q.stderr)
		c.Stderr = stderr
	}
	env := q.env
	if env == nil {
		env = map[string]string{}
	}
	user := q.user
	agentUser := user != "" && s.engineUserLacks() != ""
	viaAgent := s.usesChannel(c) && (user == "" || !s.spec.RunAsHostUser || agentUser)
	target := s.warmTarget()
	for attempt := 0; ; attempt++ {
		if target == "" {
			res, err := s.Ensure(ctx)
			if err != nil {
				return -1, errb, err
			}
			target = res.ID
		}
		if viaAgent {
			code, err := s.execChannel(ctx, target, c, env)
			if !errors.Is(err, errNotReached) {
				return code, errb, err
			}
		}
		if agentUser {
			// Only the agent holds the process to the user: the holder
			// this CLI starts, waited for, then asked once more.
			if viaAgent && s.awaitHolder(ctx, target) {
				if code, err := s.execChannel(ctx, target, c, env); !errors.Is(err, errNotReached) {
					return code, errb, err
				}
			}
			return -1, errb, s.userError(user, "the channel is "+s.ChannelStatus(target))
		}
		if q.steer != "" && !s.rt().Capabilities().ExecEnvInBand {
			return -1, errb, s.steerError(q.steer, "the channel is "+s.ChannelStatus(target))
		}
		a := s.agent(ctx, target, s.execUser())
		if user != "" {
			a.User = user
		}
		in := q.stdin
		if c.tap != nil {
			in = c.tap.plain()
		}
		release := s.markInUse()
		out, inCount := &iocount.Writer{W: io.Discard}, &iocount.Reader{}
		if q.stdout != nil {
			out.W = q.stdout
		}
		if in != nil {
			inCount.R = in
			in = inCount
		}
		code, err := channel.RunAgent(ctx, a, channel.AgentExec{Args: q.args, Stdin: in, Stdout: out, Stderr: stderr, Env: q.env, WorkDir: q.dir})
		release()
		st.via, st.in, st.out, st.err = "engine", inCount.N, out.N, int64(len(errb.Bytes()))
		if err == nil && viaAgent {
			s.afterPlainExec(target)
		}
		if attempt == 0 && (errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotRunning)) && q.stdin == nil {
			if cur, ierr := s.inspectOwn(ctx, target); ierr == nil && (cur == nil || cur.State != runtime.StateRunning) {
				s.forget(target)
				target = ""
				continue
			}
		}
		return code, errb, err
	}
}
