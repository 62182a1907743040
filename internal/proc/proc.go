// Package proc is hsbx's one choke point for running processes. Every engine
// call goes through Runner.Run: an argv slice (never a shell string), a
// timeout, a WaitDelay so a hung child cannot block forever, and a bounded
// tail of stderr kept for error messages. No other package imports os/exec.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// StderrTail is how many bytes of a command's stderr are kept for errors.
const StderrTail = 16 << 10

// ErrProcessTimeout is returned (wrapped in *TimeoutError) when a command outlives
// its Cmd.Timeout and is killed.
var ErrProcessTimeout = errors.New("timed out")

// Cmd describes one process to run.
type Cmd struct {
	// Argv is the program and its arguments. Argv[0] is a path or a name
	// looked up on PATH.
	Argv []string
	// Env is the complete environment of the child. Nil means an empty
	// environment, so callers always pass what they mean (usually os.Environ
	// captured once in main plus additions).
	Env []string
	// Stdin is connected to the child's standard input when not nil.
	Stdin io.Reader
	// Stdout receives the child's standard output; when nil it is captured
	// into Result.Stdout.
	Stdout io.Writer
	// Stderr receives the child's standard error; when nil it is captured.
	// Either way the last StderrTail bytes end up in Result.Stderr.
	Stderr io.Writer
	// Timeout bounds the whole run; zero means only ctx bounds it.
	Timeout time.Duration
	// Graceful, when set, lets a child that is cancelled or times out
	// finish what it is doing: it gets SIGTERM (as a Ctrl-C would give it)
	// and this long before SIGKILL. For calls that must not be cut between
	// their steps: podman run killed after its runtime started the
	// container leaves the container's process running with the record at
	// "created", and removing that record leaks the process (measured on
	// 4.3); given SIGTERM it finishes the run. Zero: SIGKILL at once.
	Graceful time.Duration
	// Files are open files the child gets as fd 3, 4, ... (what it reads
	// at /dev/fd/3): data for it that is never on disk or in argv.
	Files []*os.File
}

// Result is what a finished process left behind.
type Result struct {
	Stdout   []byte
	Stderr   []byte // the last StderrTail bytes
	ExitCode int    // the process's exit status; 128+N when killed by signal N
	Elapsed  time.Duration
	MaxRSSKB int64 // the child's peak resident set size (Linux: KiB), 0 if unknown
}

// TimeoutError says a command was killed because it outlived its timeout.
type TimeoutError struct {
	Argv    []string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: no answer after %s, killed", Quote(e.Argv), e.Timeout)
}

// Unwrap lets errors.Is(err, ErrProcessTimeout) and errors.Is(err, context.DeadlineExceeded) hold.
func (e *TimeoutError) Unwrap() []error { return []error{ErrProcessTimeout, context.DeadlineExceeded} }

// StartError says a command could not be started at all (binary missing,
// not executable).
type StartError struct {
	Argv []string
	Err  error
}

func (e *StartError) Error() string { return fmt.Sprintf("cannot run %s: %v", e.Argv[0], e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// Runner runs commands. The zero value is usable; Log, when set, receives one
// debug record per command with its argv, exit code and duration, which
// makes the number of engine calls visible with --log-level debug.
type Runner struct {
	Log *slog.Logger
	// WaitDelay bounds how long Run waits for the child's output pipes after
	// it is killed (a grandchild may hold them open). Default 2s.
	WaitDelay time.Duration
}

// Run starts c.Argv, waits for it and reports how it ended. A non-zero exit
// status is not an error: it is in Result.ExitCode for the caller to
// classify. Errors are for commands that could not start (*StartError), that
// were killed on timeout (*TimeoutError) or whose ctx was cancelled (the
// ctx's error, wrapped).
func (r *Runner) Run(ctx context.Context, c Cmd) (Result, error) {
	if len(c.Argv) == 0 {
		return Result{}, errors.New("proc: empty argv")
	}
	runCtx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(runCtx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = c.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdin = c.Stdin
	cmd.ExtraFiles = c.Files
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = r.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	if c.Graceful > 0 {
		cmd.Cancel = func() error { return terminate(cmd.Process) }
		cmd.WaitDelay = c.Graceful
	}
	var stdout bytes.Buffer
	tail := &TailBuffer{Max: StderrTail}
	if c.Stdout != nil {
		cmd.Stdout = c.Stdout
	} else {
		cmd.Stdout = &stdout
	}
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(c.Stderr, tail)
	} else {
		cmd.Stderr = tail
	}

	start := time.Now()
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: tail.Bytes(), Elapsed: time.Since(start)}
	res.ExitCode = exitCode(cmd.ProcessState)
	res.MaxRSSKB = maxRSSKB(cmd.ProcessState)
	r.log(ctx, c.Argv, res, err)

	switch {
	case err == nil:
		return res, nil
	case cmd.ProcessState == nil: // never started
		if ctx.Err() != nil {
			return res, fmt.Errorf("%s: %w", Quote(c.Argv), ctx.Err())
		}
		return res, &StartError{Argv: c.Argv, Err: err}
	case ctx.Err() != nil: // the caller gave up (signal, its own deadline)
		return res, fmt.Errorf("%s: %w", Quote(c.Argv), ctx.Err())
	case runCtx.Err() != nil: // our timeout fired
		return res, &TimeoutError{Argv: c.Argv, Timeout: c.Timeout}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return res, nil // exited on its own with a status: data, not an error
	}
	// Output copying failed or WaitDelay expired after a normal exit.
	return res, fmt.Errorf("%s: %w", Quote(c.Argv), err)
}

// LookPath finds a program on the process's PATH (or checks a path).
func LookPath(name string) (string, error) { return exec.LookPath(name) }

// LookPathIn finds a program on the given PATH value (a name with a slash
// is checked as it is): the PATH of the environment a caller was handed,
// not the process's.
func LookPathIn(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func (r *Runner) log(ctx context.Context, argv []string, res Result, err error) {
	if r.Log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("argv", Quote(argv)),
		slog.Int("exit", res.ExitCode),
		slog.Duration("elapsed", res.Elapsed),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	r.Log.LogAttrs(ctx, slog.LevelDebug, "engine call", attrs...)
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Quote renders argv for humans and logs: words with spaces or quotes are
// quoted. It is never used to build a command line.
func Quote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`|&;<>(){}*?!") {
			fmt.Fprintf(&b, "%q", a)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// TailBuffer keeps the last Max bytes written to it (a writer that never
// fails and never grows past Max).
type TailBuffer struct {
	buf []byte
	Max int
}

// Write implements io.Writer.
func (t *TailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.Max {
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes is what is kept.
func (t *TailBuffer) Bytes() []byte { return t.buf }

// ErrNotFound is the error a StartError wraps when the program does not exist.
var ErrNotFound = exec.ErrNotFound

// StartDetached starts argv fully detached and does not wait for it: a
// session of its own, stdin/stdout/stderr on the null device, no other
// descriptor inherited, no parent-death signal — so a CI job or a `$(...)`
// capture never waits on it. It is reaped in the background while this
// process lives.
func StartDetached(argv, env []string) (pid int, err error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Args[0] = filepath.Base(argv[0])
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.SysProcAttr = detachedAttr()
	// Descriptors this process inherited without close-on-exec (a shell's
	// capture pipe, a CI runner's) must not reach a process that lives on.
	closeInheritedOnExec()
	if err := cmd.Start(); err != nil {
		return 0, &StartError{Argv: argv, Err: err}
	}
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}
