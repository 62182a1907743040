// Package background runs commands in the background of a sandbox: a
// command started with Start runs under a
// supervisor of hsbx's agent in the sandbox, so it outlives the process
// that started it, the holder, and a newer hsbx; its output is kept in
// the sandbox (OutputMax, the oldest dropped first and said
// so), and its end is recorded there. A Process is a handle by id: any
// process on any host can make one (Processes.Get) and read, wait on or
// signal it. Processes belong to the sandbox user that started them
// (Command.User): another user's are not listed and not found.
//
//	p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"make", "test"}})
package background

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// OutputMax is how much of a background process's output is
// kept (its last bytes).
const OutputMax = 4 << 20

// ErrNoProcess is a background process id the sandbox does not have (for
// that user).
var ErrNoProcess = errors.New("no such background process")

// Processes are a sandbox's background processes.
type Processes struct{ d sandbox.Door }

// Of is sb's background processes.
func Of(sb *sandbox.Sandbox) Processes { return Processes{sb.Door()} }

// Process is a background process of a sandbox.
type Process struct {
	d    sandbox.Door
	ID   string
	User string // the sandbox user it runs as ("" the exec user)
}

// Info is what the sandbox says of a background process.
type Info struct {
	ID      string    `json:"id"`
	Argv    []string  `json:"argv"`
	Dir     string    `json:"dir,omitempty"`
	PID     int       `json:"pid,omitempty"` // in the sandbox
	Started time.Time `json:"started"`
	Running bool      `json:"running"`
	// Lost: neither running nor ended by its supervisor's word (the
	// sandbox was restarted, or the supervisor killed): how it ended is
	// not known.
	Lost     bool      `json:"lost,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"` // 128+N when signal N killed it
	Signal   int       `json:"signal,omitempty"`
	Ended    time.Time `json:"ended,omitzero"`
	// OutputBytes it wrote in all; DroppedBytes of them no longer kept.
	OutputBytes  int64 `json:"output_bytes"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

// processInfo is what the agent says of a process, for a Go caller.
func info(a agentapi.Process) Info {
	in := Info{ID: a.ID, Argv: a.Argv, Dir: a.Dir, PID: a.PID, Started: time.UnixMilli(a.Started), Running: a.Running,
		Lost: a.Lost, ExitCode: a.ExitCode, Signal: a.Signal, OutputBytes: a.Output, DroppedBytes: a.Dropped}
	if a.Ended > 0 {
		in.Ended = time.UnixMilli(a.Ended)
	}
	return in
}

// Start starts c in the background and returns its handle once it runs
// (c.Argv, Env, WorkDir and User count; it has no input, and its output
// is kept in the sandbox: Process.Output). A command that cannot start
// is an error with the shell's status (*ExitError, 127 or 126).
func (ps Processes) Start(ctx context.Context, c sandbox.Command) (*Process, error) {
	if len(c.Argv) == 0 {
		return nil, &sandbox.SpecError{Setting: "argv", Msg: "no command given"}
	}
	if c.Stdin != nil || c.Stdout != nil || c.Stderr != nil || c.TTY || c.Interactive {
		return nil, &sandbox.SpecError{Setting: "argv", Msg: "a background process has no input and keeps its output in the sandbox (Process.Output)"}
	}
	env, steer, err := ps.d.ExecEnv(c.Env)
	if err != nil {
		return nil, err
	}
	if err := ps.d.Check(c.User); err != nil {
		return nil, err
	}
	if c.WorkDir != "" && !strings.HasPrefix(c.WorkDir, "/") {
		c.WorkDir = path.Join(ps.d.WorkDir(), c.WorkDir)
	}
	if c.WorkDir == "" {
		c.WorkDir = ps.d.WorkDir()
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	var out bytes.Buffer
	args := agentapi.BgStart{ID: id, Bound: OutputMax, Command: c.Argv}.Args()
	code, msg, err := run(ctx, ps.d, "start", id, c.Argv, sandbox.AgentRun{Args: args, User: c.User, Stdout: &out, Env: env, Dir: c.WorkDir, Steer: steer})
	var notStarted agentapi.NotStarted
	switch {
	case err != nil:
		return nil, err
	case code == agentapi.ExitNotStarted && json.Unmarshal(out.Bytes(), &notStarted) == nil && (notStarted.Code == 127 || notStarted.Code == 126):
		return nil, &sandbox.ExitError{Code: notStarted.Code, Stderr: []byte(notStarted.Error + "\n")}
	case code != 0:
		return nil, fmt.Errorf("starting %q in the background in sandbox %s: hsbx's agent failed (exit %d): %s", c.Argv[0], ps.d.Name(), code, strings.TrimPrefix(msg, "hsbx agent: "))
	}
	var started agentapi.Started
	if json.Unmarshal(out.Bytes(), &started) != nil || started.ID != id {
		return nil, fmt.Errorf("%w: starting %q in the background: the agent said %q", runtime.ErrBadOutput, c.Argv[0], strings.TrimSpace(out.String()))
	}
	return &Process{d: ps.d, ID: id, User: c.User}, nil
}

// Get is the handle of background process id, started as user ("" the
// exec user); nothing is asked of the sandbox until it is used.
func (ps Processes) Get(id, user string) *Process { return &Process{d: ps.d, ID: id, User: user} }

// List lists the background processes user started (oldest first).
func (ps Processes) List(ctx context.Context, user string) ([]Info, error) {
	if err := ps.d.Check(user); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	code, msg, err := run(ctx, ps.d, "list", "", nil, sandbox.AgentRun{Args: agentapi.BgList{}.Args(), User: user, Stdout: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("listing background processes in sandbox %s: hsbx's agent failed (exit %d): %s", ps.d.Name(), code, strings.TrimPrefix(msg, "hsbx agent: "))
	}
	if err != nil {
		return nil, err
	}
	var list []Info
	err = agentapi.EachLine(&out, func(line []byte) error {
		var a agentapi.Process
		if err := agentapi.ReadJSON(line, &a); err != nil {
			return fmt.Errorf("%w: the agent's list of background processes: %v", runtime.ErrBadOutput, err)
		}
		list = append(list, info(a))
		return nil
	})
	return list, err
}

// Info is what the sandbox says of the process now.
func (p *Process) Info(ctx context.Context) (Info, error) {
	return p.state(ctx, "info", agentapi.BgInfo{ID: p.ID})
}

// Wait waits until the process has ended (or ctx ends) and says how.
func (p *Process) Wait(ctx context.Context) (Info, error) {
	return p.state(ctx, "wait", agentapi.BgWait{ID: p.ID})
}

func (p *Process) state(ctx context.Context, op string, call agentapi.Call) (Info, error) {
	var out bytes.Buffer
	if _, err := p.run(ctx, op, sandbox.AgentRun{Args: call.Args(), Stdout: &out}); err != nil {
		return Info{}, err
	}
	var a agentapi.Process
	if err := agentapi.ReadJSON(out.Bytes(), &a); err != nil {
		return Info{}, fmt.Errorf("%w: the agent's word on background process %s: %v", runtime.ErrBadOutput, p.ID, err)
	}
	return info(a), nil
}

// OutputOptions say what of a background process's output to read.
type OutputOptions struct {
	// From is the offset in all it wrote to start at (ProcessInfo's
	// OutputBytes, to read only what comes next).
	From int64
	// Follow goes on until the process has ended and all it wrote is read
	// (or ctx ends).
	Follow bool
	// Dropped, when set, is told when output from From on is no longer
	// kept (one line, hsbx's words); nil: not said.
	Dropped io.Writer
}

// Output writes the process's output (stdout and stderr, interleaved as
// written) to w.
func (p *Process) Output(ctx context.Context, w io.Writer, o OutputOptions) error {
	msg, err := p.run(ctx, "output", sandbox.AgentRun{Args: agentapi.BgOutput{ID: p.ID, From: o.From, Follow: o.Follow}.Args(), Stdout: w})
	if o.Dropped != nil {
		for l := range strings.Lines(msg) {
			if strings.HasPrefix(l, "hsbx: ") && strings.Contains(l, "were dropped") {
				_, _ = io.WriteString(o.Dropped, l)
			}
		}
	}
	if err != nil && o.Follow && ctx.Err() != nil {
		return nil // ended by the caller, as asked
	}
	return err
}

// Signal sends sig to the process's group and to every process that
// carries its marker; it returns how many it reached (0: it has ended).
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) (int, error) {
	var out bytes.Buffer
	if _, err := p.run(ctx, "kill", sandbox.AgentRun{Args: agentapi.BgKill{ID: p.ID, Signal: int(sig)}.Args(), Stdout: &out}); err != nil {
		return 0, err
	}
	n, err := agentapi.ReadKilled(out.Bytes())
	if err != nil {
		return 0, fmt.Errorf("%w: background process %s: %v", runtime.ErrBadOutput, p.ID, err)
	}
	return n, nil
}

// run runs one of the process's modes, as its user: ErrNoProcess for an
// id the sandbox does not have. msg is the agent's stderr.
func (p *Process) run(ctx context.Context, op string, r sandbox.AgentRun) (msg string, err error) {
	if err := p.d.Check(p.User); err != nil {
		return "", err
	}
	r.User = p.User
	code, msg, err := run(ctx, p.d, op, p.ID, nil, r)
	switch {
	case err != nil:
		return msg, err
	case code == agentapi.ExitFileNotFound:
		return msg, fmt.Errorf("%w: %s in sandbox %s (for user %q)", ErrNoProcess, p.ID, p.d.Name(), p.User)
	case code != 0:
		return msg, fmt.Errorf("background process %s in sandbox %s: hsbx's agent failed (exit %d): %s", p.ID, p.d.Name(), code, strings.TrimPrefix(msg, "hsbx agent: "))
	}
	return msg, nil
}

// run runs a background mode of the agent and records it (not a list or
// an info: they change nothing). msg is the agent's stderr.
func run(ctx context.Context, d sandbox.Door, op, id string, argv []string, r sandbox.AgentRun) (int, string, error) {
	began := time.Now()
	res, err := d.Run(ctx, r)
	msg := strings.TrimSpace(string(res.Stderr))
	if op != "list" && op != "info" {
		d.Record(sandbox.Ran{Kind: "background " + op, Path: id, Argv: argv, User: r.User, Began: began, Res: res, Err: err})
	}
	if err != nil {
		return res.Code, msg, fmt.Errorf("background process %s in sandbox %s: %w", id, d.Name(), err)
	}
	return res.Code, msg, nil
}
