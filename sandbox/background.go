package sandbox

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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// Background processes: a command started with Start runs under a
// supervisor of hsbx's agent in the sandbox, so it outlives the process
// that started it, the holder, and a newer hsbx; its output is kept in
// the sandbox (BackgroundOutputMax, the oldest dropped first and said
// so), and its end is recorded there. A Process is a handle by id: any
// process on any host can make one (Sandbox.Process) and read, wait on or
// signal it. Processes belong to the sandbox user that started them
// (Command.User): another user's are not listed and not found.

// BackgroundOutputMax is how much of a background process's output is
// kept (its last bytes).
const BackgroundOutputMax = 4 << 20

// ErrNoProcess is a background process id the sandbox does not have (for
// that user).
var ErrNoProcess = errors.New("no such background process")

// Process is a background process of a sandbox.
type Process struct {
	sb   *Sandbox
	ID   string
	User string // the sandbox user it runs as ("" the exec user)
}

// ProcessInfo is what the sandbox says of a background process.
type ProcessInfo struct {
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

// agentProc is the agent's JSON for a process (agent.BgState).
type agentProc struct {
	ID       string   `json:"id"`
	Argv     []string `json:"argv"`
	Dir      string   `json:"dir"`
	PID      int      `json:"pid"`
	Started  int64    `json:"started_ms"`
	Running  bool     `json:"running"`
	Lost     bool     `json:"lost"`
	ExitCode *int     `json:"exit_code"`
	Signal   int      `json:"signal"`
	Ended    int64    `json:"ended_ms"`
	Output   int64    `json:"output_bytes"`
	Dropped  int64    `json:"dropped_bytes"`
}

func (a agentProc) info() ProcessInfo {
	in := ProcessInfo{ID: a.ID, Argv: a.Argv, Dir: a.Dir, PID: a.PID, Started: time.UnixMilli(a.Started), Running: a.Running,
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
func (s *Sandbox) Start(ctx context.Context, c Command) (*Process, error) {
	if len(c.Argv) == 0 {
		return nil, &SpecError{Setting: "argv", Msg: "no command given"}
	}
	if c.Stdin != nil || c.Stdout != nil || c.Stderr != nil || c.TTY || c.Interactive {
		return nil, &SpecError{Setting: "argv", Msg: "a background process has no input and keeps its output in the sandbox (Process.Output)"}
	}
	env, steer, err := s.m.execEnv(c.Env)
	if err != nil {
		return nil, err
	}
	if err := validUser(c.User); err != nil {
		return nil, err
	}
	if c.WorkDir != "" && !strings.HasPrefix(c.WorkDir, "/") {
		c.WorkDir = path.Join(s.workDir(), c.WorkDir)
	}
	if c.WorkDir == "" {
		c.WorkDir = s.workDir()
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	var out, errb bytes.Buffer
	args := append([]string{"bg-start", id, strconv.Itoa(BackgroundOutputMax)}, c.Argv...)
	code, msg, err := s.bgRun(ctx, "start", id, c.Argv, agentReq{args: args, user: c.User, stdout: &out, env: env, dir: c.WorkDir, steer: steer}, &errb)
	var notStarted struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}
	switch {
	case err != nil:
		return nil, err
	case code == wire.ExitNotStarted && json.Unmarshal(out.Bytes(), &notStarted) == nil && (notStarted.Code == 127 || notStarted.Code == 126):
		return nil, &ExitError{Code: notStarted.Code, Stderr: []byte(notStarted.Error + "\n")}
	case code != 0:
		return nil, fmt.Errorf("starting %q in the background in sandbox %s: hsbx's agent failed (exit %d): %s", c.Argv[0], s.name, code, msg)
	}
	var started struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(out.Bytes(), &started) != nil || started.ID != id {
		return nil, fmt.Errorf("%w: starting %q in the background: the agent said %q", runtime.ErrBadOutput, c.Argv[0], strings.TrimSpace(out.String()))
	}
	return &Process{sb: s, ID: id, User: c.User}, nil
}

// Process is the handle of background process id, started as user ("" the
// exec user); nothing is asked of the sandbox until it is used.
func (s *Sandbox) Process(id, user string) *Process { return &Process{sb: s, ID: id, User: user} }

// Processes lists the background processes user started (oldest first).
func (s *Sandbox) Processes(ctx context.Context, user string) ([]ProcessInfo, error) {
	var out, errb bytes.Buffer
	code, msg, err := s.bgRun(ctx, "list", "", nil, agentReq{args: []string{"bg-list"}, user: user, stdout: &out}, &errb)
	if err == nil && code != 0 {
		err = fmt.Errorf("listing background processes in sandbox %s: hsbx's agent failed (exit %d): %s", s.name, code, msg)
	}
	if err != nil {
		return nil, err
	}
	var list []ProcessInfo
	err = readLines(&out, func(line []byte) error {
		var a agentProc
		if err := json.Unmarshal(line, &a); err != nil {
			return fmt.Errorf("%w: the agent's list of background processes: %v", runtime.ErrBadOutput, err)
		}
		list = append(list, a.info())
		return nil
	})
	return list, err
}

// Info is what the sandbox says of the process now.
func (p *Process) Info(ctx context.Context) (ProcessInfo, error) { return p.state(ctx, "bg-info") }

// Wait waits until the process has ended (or ctx ends) and says how.
func (p *Process) Wait(ctx context.Context) (ProcessInfo, error) { return p.state(ctx, "bg-wait") }

func (p *Process) state(ctx context.Context, mode string) (ProcessInfo, error) {
	var out, errb bytes.Buffer
	if err := p.run(ctx, strings.TrimPrefix(mode, "bg-"), agentReq{args: []string{mode, p.ID}, stdout: &out}, &errb); err != nil {
		return ProcessInfo{}, err
	}
	var a agentProc
	if err := json.Unmarshal(out.Bytes(), &a); err != nil {
		return ProcessInfo{}, fmt.Errorf("%w: the agent's word on background process %s: %v", runtime.ErrBadOutput, p.ID, err)
	}
	return a.info(), nil
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
	follow := "0"
	if o.Follow {
		follow = "1"
	}
	errb := &bytes.Buffer{}
	err := p.run(ctx, "output", agentReq{args: []string{"bg-output", p.ID, strconv.FormatInt(o.From, 10), follow}, stdout: w}, errb)
	if o.Dropped != nil {
		for l := range strings.Lines(errb.String()) {
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
	var out, errb bytes.Buffer
	if err := p.run(ctx, "kill", agentReq{args: []string{"bg-kill", p.ID, strconv.Itoa(int(sig))}, stdout: &out}, &errb); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return 0, fmt.Errorf("%w: the agent's kill printed %q", runtime.ErrBadOutput, strings.TrimSpace(out.String()))
	}
	return n, nil
}

// run runs one of the process's modes: ErrNoProcess for an id the
// sandbox does not have.
func (p *Process) run(ctx context.Context, op string, q agentReq, errb *bytes.Buffer) error {
	q.user = p.User
	code, msg, err := p.sb.bgRun(ctx, op, p.ID, nil, q, errb)
	switch {
	case err != nil:
		return err
	case code == wire.ExitFileNotFound:
		return fmt.Errorf("%w: %s in sandbox %s (for user %q)", ErrNoProcess, p.ID, p.sb.name, p.User)
	case code != 0:
		return fmt.Errorf("background process %s in sandbox %s: hsbx's agent failed (exit %d): %s", p.ID, p.sb.name, code, msg)
	}
	return nil
}

// bgRun runs a bg- mode of the agent and records it.
func (s *Sandbox) bgRun(ctx context.Context, op, id string, argv []string, q agentReq, errb *bytes.Buffer) (int, string, error) {
	if err := s.key.Validate(); err != nil {
		return -1, "", err
	}
	if err := validUser(q.user); err != nil {
		return -1, "", err
	}
	began := time.Now()
	st := &execStats{in: -1, out: -1, err: -1}
	code, tail, err := s.agentRun(ctx, q, st)
	msg := strings.TrimSpace(string(tail.Bytes()))
	errb.WriteString(msg)
	msg = strings.TrimPrefix(msg, "hsbx agent: ")
	if !s.m.c.NoRecord && op != "list" && op != "info" {
		r := s.newRecord(began, code, err)
		r.Kind, r.Argv, r.Path, r.User = "background "+op, argv, id, q.user
		r.Via, r.BytesIn, r.BytesOut, r.BytesErr = st.via, st.in, st.out, st.err
		s.appendRecord(r)
	}
	if err != nil {
		return code, msg, fmt.Errorf("background process %s in sandbox %s: %w", id, s.name, err)
	}
	return code, msg, nil
}
