package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
)

// The machine interface: with --json, `exec` and `run` print one Result
// object on stdout, every message on stderr is one JSON object per line
// (warnings, notices, hsbx's log) and an error is an ErrorReport there.
// docs/json.md documents these shapes; they
// only grow (new fields), never change meaning.

// DefaultMaxOutput is how much of each stream a --json result keeps.
const DefaultMaxOutput = 1 << 20

// Result is what `exec --json` and `run --json` print.
type Result struct {
	ExitCode int `json:"exit_code"` // also hsbx's own exit status
	// Stdout and Stderr hold the first max-output bytes of each stream,
	// as UTF-8 text when they are valid UTF-8, else in base64 (the
	// *_encoding field says which); *_bytes counts the whole stream.
	Stdout          string  `json:"stdout"`
	StdoutEncoding  string  `json:"stdout_encoding"`
	StdoutBytes     int64   `json:"stdout_bytes"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	Stderr          string  `json:"stderr"`
	StderrEncoding  string  `json:"stderr_encoding"`
	StderrBytes     int64   `json:"stderr_bytes"`
	StderrTruncated bool    `json:"stderr_truncated"`
	DurationMS      float64 `json:"duration_ms"`
	// TimedOut: --timeout fired (exit_code 124). Interrupted says what
	// else stopped the command (a signal to hsbx, its output's reader
	// going away); Killed counts the processes killed in the sandbox then.
	TimedOut    bool   `json:"timed_out"`
	Interrupted string `json:"interrupted,omitempty"`
	Killed      int    `json:"killed"`
	// Session is run's session; absent for exec.
	Session *SessionResult `json:"session,omitempty"`
}

// SessionResult is what became of run's session.
type SessionResult struct {
	Name    string `json:"name"`
	ShellID string `json:"shell_id"`
	New     bool   `json:"new"`   // this run started the session's shell
	Reset   string `json:"reset"` // why an earlier shell of it is gone ("" = none was)
	Ended   string `json:"ended"` // why this run ended the shell ("" = it lives on)
	Fresh   bool   `json:"fresh"` // a throwaway shell (persistent_shell false), closed after the run
}

// ErrorReport is what an error looks like on stderr under --json.
type ErrorReport struct {
	Error struct {
		Kind     string `json:"kind"` // see errorKind: a stable word
		Message  string `json:"message"`
		Hint     string `json:"hint,omitempty"`
		ExitCode int    `json:"exit_code"`
	} `json:"error"`
}

// capture keeps the first limit bytes written and counts them all.
type capture struct {
	limit int
	buf   []byte
	n     int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if room := c.limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// text is the kept bytes as a JSON string and its encoding. A cut that
// split a UTF-8 sequence at the limit does not make the rest base64.
func (c *capture) text() (string, string) {
	b := c.buf
	if c.n > int64(len(b)) {
		// Only a sequence the limit cut in two is dropped: a lead byte
		// with fewer continuation bytes than it needs, at the very end.
		// Other bytes that are not UTF-8 make the kept bytes base64.
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if x := b[len(b)-i]; x < 0x80 || x >= 0xC0 {
				if x >= 0xC0 && !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	if utf8.Valid(b) {
		return string(b), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(c.buf), "base64"
}

// jsonRun collects one exec or run's output for its Result.
type jsonRun struct {
	out, err capture
	start    time.Time
}

func newJSONRun(limit int) *jsonRun {
	return &jsonRun{out: capture{limit: limit}, err: capture{limit: limit}, start: time.Now()}
}

// result fills in the streams and the duration.
func (j *jsonRun) result(code int) Result {
	r := Result{ExitCode: code, DurationMS: float64(time.Since(j.start).Microseconds()) / 1000}
	r.Stdout, r.StdoutEncoding = j.out.text()
	r.Stderr, r.StderrEncoding = j.err.text()
	r.StdoutBytes, r.StdoutTruncated = j.out.n, j.out.n > int64(len(j.out.buf))
	r.StderrBytes, r.StderrTruncated = j.err.n, j.err.n > int64(len(j.err.buf))
	return r
}

// interrupted completes r for an interrupted command and returns the exit
// code; ok false: err is no interruption.
func interrupted(ctx context.Context, r *Result, err error) (ok bool) {
	var ie *sandbox.InterruptedError
	if !errors.As(err, &ie) {
		return false
	}
	r.Killed = ie.Killed
	if errors.Is(ie.Cause, sandbox.ErrCommandTimeout) {
		r.TimedOut, r.ExitCode = true, ExitTimeout
		return true
	}
	r.Interrupted = ie.Cause.Error()
	r.ExitCode = exitCode(ctx, ie.Cause)
	return true
}

// printResult writes r to stdout and returns the exit that goes with it.
func (a *App) printResult(r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := a.Env.Stdout.Write(append(b, '\n')); err != nil {
		return &exitError{code: ExitBrokenPipe}
	}
	if r.ExitCode != 0 {
		return &exitError{code: r.ExitCode}
	}
	return nil
}

// parseMaxOutput reads --max-output: bytes, or with a k/m/g suffix
// (KiB, MiB, GiB).
func parseMaxOutput(s string) (int, error) {
	if s == "" {
		return DefaultMaxOutput, nil
	}
	t := strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "ib"), "b"))
	mult := 1
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > (1<<31-1)/mult {
		return 0, &usageError{fmt.Errorf("--max-output %q: not a size", s), "give bytes, or a size like 64k or 4m (at most 2g)"}
	}
	return n * mult, nil
}

// warn says something the user should know, on stderr: a line of text,
// or {"warning": ...} under --json.
func (a *App) warn(msg string) { a.message("warning", "hsbx: warning: ", msg) }

// notice says what hsbx is doing or did, on stderr: a line of text, or
// {"notice": ...} under --json.
func (a *App) notice(msg string) { a.message("notice", "hsbx: ", msg) }

func (a *App) message(field, prefix, msg string) {
	if a.G != nil && a.G.JSON {
		b, _ := json.Marshal(map[string]string{field: msg})
		fmt.Fprintf(a.Env.Stderr, "%s\n", b)
		return
	}
	// Names in a message are data (a task with an escape sequence):
	// shown escaped, as errors are.
	fmt.Fprintf(a.Env.Stderr, "%s%s\n", prefix, safeText(msg))
}

// reportJSON writes err as an ErrorReport on w.
func reportJSON(w io.Writer, kind, msg, hint string, code int) {
	var r ErrorReport
	r.Error.Kind, r.Error.Message, r.Error.Hint, r.Error.ExitCode = kind, msg, hint, code
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "%s\n", b)
}

// wantsJSON says whether the command line asks for --json (before any
// "--"): used where it could not be parsed.
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// errorKind is err's kind under --json: a stable word a program can
// switch on. docs/json.md lists them.
func errorKind(ctx context.Context, err error) string {
	kind, _ := classify(ctx, err)
	return kind
}

// classify is what err is to the CLI: its kind under --json and the exit
// code it maps to (exitCode takes a code a command chose first).
func classify(ctx context.Context, err error) (kind string, code int) {
	var se *SignalError
	if errors.As(err, &se) || errors.As(context.Cause(ctx), &se) {
		if s, ok := se.Signal.(syscall.Signal); ok {
			return "interrupted", 128 + int(s)
		}
		return "interrupted", 130
	}
	var bs *sandbox.SpecError
	var ue *usageError
	switch {
	case errors.As(err, &ue), errors.As(err, &bs):
		return "usage", ExitUsage
	case errors.Is(err, sandbox.ErrMemoryPath):
		return "memory_path", ExitUsage
	case errors.Is(err, runtime.ErrNoOCIRuntime):
		return "no_oci_runtime", ExitUsage
	case errors.Is(err, hsbx.ErrUnsafeDir):
		return "unsafe_dir", ExitUsage
	case errors.Is(err, runtime.ErrNoSuchPath):
		return "no_such_path", ExitError
	case errors.Is(err, sandbox.ErrNoSandbox):
		return "no_sandbox", ExitError
	case errors.Is(err, sandbox.ErrNoSuchUser):
		return "no_such_user", ExitCannotRun
	case errors.Is(err, background.ErrNoProcess):
		return "no_process", ExitError
	case errors.Is(err, sandbox.ErrSnapshotUnsupported):
		return "snapshot_unsupported", ExitUsage
	case errors.Is(err, sandbox.ErrNoSnapshot):
		return "no_snapshot", ExitError
	case errors.Is(err, sandbox.ErrSnapshotExists):
		return "snapshot_exists", ExitError
	case errors.Is(err, sandbox.ErrSnapshotTooLarge):
		return "snapshot_too_large", ExitError
	case errors.Is(err, sandbox.ErrSnapshotInUse):
		return "snapshot_in_use", ExitError
	case errors.Is(err, sandbox.ErrNoSpace):
		return "no_space", ExitError
	}
	var fe *files.Error
	if errors.As(err, &fe) {
		kinds := map[error]string{fs.ErrNotExist: "not_found", files.ErrIsDir: "is_directory", files.ErrNotDir: "not_directory",
			fs.ErrPermission: "permission_denied", files.ErrTooLarge: "file_too_large", files.ErrNotEmpty: "not_empty"}
		return kinds[fe.Kind], ExitError
	}
	for _, k := range engineKinds {
		if errors.Is(err, k.err) {
			return k.kind, ExitEngine
		}
	}
	var sse *sandbox.SessionError
	switch {
	case errors.Is(err, sandbox.ErrNoSession):
		return "no_session", ExitError
	case errors.Is(err, sandbox.ErrResourceExhausted):
		return "resource_exhausted", ExitEngine
	case errors.Is(err, sandbox.ErrNoShell):
		return "no_shell", 127
	case errors.As(err, &sse):
		return "session_failed", ExitEngine
	case errors.Is(err, sandbox.ErrSandboxExists):
		return "sandbox_exists", ExitError
	case errors.Is(err, sandbox.ErrCopyTooLarge):
		return "copy_too_large", ExitError
	case errors.Is(err, sandbox.ErrDrift):
		return "drift", ExitError
	case errors.Is(err, sandbox.ErrBusy):
		return "busy", ExitError
	case errors.Is(err, sandbox.ErrIsolation):
		return "isolation", ExitError
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.code == ExitUsage {
		return "usage", ExitError
	}
	return "error", ExitError
}

// engineKinds are the errors that say the engine is missing, unreachable
// or failing (exit 125), with their --json kinds.
var engineKinds = []struct {
	err  error
	kind string
}{
	{runtime.ErrBinaryNotFound, "engine_not_found"}, {runtime.ErrUnsupported, "engine_unsupported"},
	{runtime.ErrUnreachable, "engine_unreachable"}, {runtime.ErrTimeout, "engine_timeout"},
	{runtime.ErrNetworkSetup, "network_setup"}, {runtime.ErrImageNotFound, "image_not_found"},
	{runtime.ErrRegistryUnreachable, "registry_unreachable"}, {runtime.ErrRegistryTLS, "registry_tls"},
	{runtime.ErrRegistryAuth, "registry_auth"}, {runtime.ErrPullTimeout, "pull_timeout"},
	{sandbox.ErrForeignName, "name_taken"}, {runtime.ErrNameInUse, "name_taken"}, {runtime.ErrForeignClaim, "name_taken"}, {runtime.ErrForeignVolume, "name_taken"},
	{runtime.ErrVolumeInUse, "volume_in_use"},
	{runtime.ErrNotRunning, "not_running"}, {runtime.ErrPaused, "paused"}, {runtime.ErrNotFound, "gone"},
	{runtime.ErrBadOutput, "engine_output"}, {runtime.ErrEngine, "engine"},
}
