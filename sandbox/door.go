package sandbox

import (
	"context"
	"io"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// The door between a sandbox and the features that run through hsbx's
// agent in it: its files (package sandbox/files), background processes
// (sandbox/background) and port forwards (sandbox/forward). Each takes a
// *Sandbox and uses only this: runs of the agent as a user, the record of
// what ran, where a path is, and whether the sandbox still runs. The
// agent's modes are internal/agentapi's, which only hsbx's own packages
// spell: a program uses the features, never the door.

// Door is a sandbox as the agent-backed features see it.
type Door struct{ s *Sandbox }

// Door is the sandbox's door for the agent-backed features.
func (s *Sandbox) Door() Door { return Door{s} }

// AgentRun is one run of hsbx's agent binary in the sandbox.
type AgentRun struct {
	Args   []string // the mode and its arguments (an agentapi.Call's Args)
	User   string   // the sandbox user it runs as ("": the exec user)
	Stdin  io.Reader
	Stdout io.Writer
	// Stderr, when set, is also given the agent's stderr as it comes.
	Stderr io.Writer
	// Env and Dir: for a mode that starts a process, its environment
	// values and working directory.
	Env map[string]string
	Dir string
	// Steer is a name in Env that the engine client reads: only the
	// channel carries it (Door.ExecEnv says which).
	Steer string
}

// AgentResult is how a run of the agent ended.
type AgentResult struct {
	Code   int
	Stderr []byte // its last 4 KiB
	// Via is the way it went ("channel", "engine"), In, Out and Err the
	// bytes each way (-1: not seen by hsbx), for the record.
	Via          string
	In, Out, Err int64
}

// Message is the agent's words on stderr, without its prefix.
func (r AgentResult) Message() string { return trimAgent(r.Stderr) }

// Check checks the sandbox's key and a sandbox user's form (Command.User's)
// before an operation runs anything.
func (d Door) Check(user string) error {
	if err := d.s.key.Validate(); err != nil {
		return err
	}
	if err := d.s.checkPlace(); err != nil {
		return err
	}
	return validUser(user)
}

// Run runs the agent in the sandbox's running container (brought up first
// when it is not, as Exec does), through the exec channel when it takes
// the run, else as one plain exec of the agent.
func (d Door) Run(ctx context.Context, r AgentRun) (AgentResult, error) {
	s := d.s
	st := &execStats{in: -1, out: -1, err: -1}
	code, errb, err := s.agentRun(ctx, agentReq{args: r.Args, user: r.User, stdin: r.Stdin, stdout: r.Stdout,
		stderr: r.Stderr, env: r.Env, dir: r.Dir, steer: r.Steer}, st)
	return AgentResult{Code: code, Stderr: errb.Bytes(), Via: st.via, In: st.in, Out: st.out, Err: st.err}, err
}

// Ran is one entry of the record of what ran, for a feature's operation.
type Ran struct {
	Kind  string   // "file read", "background start", "forward", ...
	Path  string   // what it was on: a path, a process's id, an address
	Argv  []string // a command it started
	User  string
	Began time.Time
	Res   AgentResult
	Err   error
}

// Record appends r to the record of what ran (unless Config.NoRecord).
func (d Door) Record(r Ran) {
	s := d.s
	if s.m.c.NoRecord {
		return
	}
	e := s.newRecord(r.Began, r.Res.Code, r.Err)
	e.Kind, e.Path, e.Argv, e.User = r.Kind, r.Path, r.Argv, r.User
	e.Via, e.BytesIn, e.BytesOut, e.BytesErr = r.Res.Via, r.Res.In, r.Res.Out, r.Res.Err
	s.appendRecord(e)
}

// Path is p as the sandbox's absolute path (a relative one from its
// working directory), without a trailing slash.
func (d Door) Path(p string) string { return d.s.filePath(p) }

// WorkDir is the sandbox's working directory (the cwd setting).
func (d Door) WorkDir() string { return d.s.workDir() }

// Name is the sandbox's container name.
func (d Door) Name() string { return d.s.name }

// MaxBytes is the bound of a file read or write when the caller gives
// none (Config.CopyMaxBytes; 0: none).
func (d Door) MaxBytes() int64 { return d.s.m.c.CopyMaxBytes }

// ExecEnv checks a process's environment values against the policy Exec
// applies: the values to pass, and a name the engine client would read
// (only the channel carries it).
func (d Door) ExecEnv(env map[string]string) (map[string]string, string, error) {
	return d.s.m.execEnv(env)
}

// Ensure brings the sandbox up, as Exec does.
func (d Door) Ensure(ctx context.Context) (Result, error) { return d.s.Ensure(ctx) }

// Running says whether container id (the sandbox's, from Ensure) still
// runs, asking the engine; an error is the engine's.
func (d Door) Running(ctx context.Context, id string) (bool, error) {
	cur, err := d.s.inspectOwn(ctx, id)
	if err != nil {
		return false, err
	}
	return cur != nil && cur.State == runtime.StateRunning, nil
}
