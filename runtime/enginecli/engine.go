// Package enginecli implements runtime.Runtime over an engine CLI. The argv
// shapes hsbx uses are the same for docker and podman; what differs — output
// formats, exit codes, messages — comes from a Dialect (runtime/docker,
// runtime/podman).
package enginecli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// Op names the engine subcommand an error came from; classification differs
// between subcommands (exit code 1 means "no such container" for docker
// exec but is the command's own status just as often).
type Op string

// The subcommands hsbx runs.
const (
	OpPS      Op = "ps"
	OpInspect Op = "inspect"
	OpRun     Op = "run"
	OpStart   Op = "start"
	OpStop    Op = "stop"
	OpUnpause Op = "unpause"
	OpRemove  Op = "rm"
	OpExec    Op = "exec"
	OpVersion Op = "version"
	OpInfo    Op = "info"
	OpImage   Op = "image inspect"
	OpCleanup Op = "cleanup"
	OpTop     Op = "top"
	OpCopy    Op = "cp"
	OpPull    Op = "pull"
	OpCommit  Op = "commit"
	OpImages  Op = "image ls"
	OpImageRm Op = "image rm"
)

// Dialect is what one engine family contributes.
type Dialect interface {
	Name() runtime.Dialect
	// PSFormat is the --format value that makes ps print JSON.
	PSFormat() string
	// InfoFormat is the --format value that makes info print JSON.
	InfoFormat() string
	ParsePS(out []byte) ([]runtime.Container, error)
	ParseInfo(out []byte) (runtime.Info, error)
	ParseVersion(out []byte) (runtime.Version, error)
	// Classify maps a failed call's exit code and stderr to a sentinel from
	// package runtime. For OpExec it returns nil when the status is the
	// command's own rather than the engine's.
	Classify(op Op, exitCode int, stderr string) error
	// ExecErrorCode is a status exec exits with when the engine, not the
	// command, failed (docker 1, podman 125): with Classify it tells
	// whether a stderr line may be the engine's.
	ExecErrorCode() int
	// StaleExecSessions says inspect's ExecIDs may hold sessions that are
	// not running (podman 4.3 keeps those that failed to start).
	StaleExecSessions() bool
	// Capabilities is what the engine can do where engines differ.
	Capabilities() runtime.Capabilities
	// RunGrace is how long a cancelled or timed-out `run` is given to
	// finish after SIGTERM rather than being SIGKILLed (0: killed at
	// once). See proc.Cmd.Graceful.
	RunGrace() time.Duration
}

// Options configure an Engine.
type Options struct {
	// Runner runs the CLI (hsbx's own wiring); nil means a plain runner
	// that logs to Logger.
	Runner *proc.Runner
	// Logger, when set, receives one debug record per engine call with its
	// argv, exit status and duration (what `--log-level debug` shows).
	Logger *slog.Logger
	// Env is the environment the CLI runs with (DOCKER_HOST,
	// CONTAINER_HOST, contexts... pass through untouched); nil means the
	// process's environment. Spec env values are added to it.
	Env []string
	// Timeout bounds every engine call except exec (default 60s); run gets
	// four times as long, since it may pull an image.
	Timeout time.Duration
}

// WithDefaults fills what o leaves unset: a runner logging to o.Logger,
// DefaultTimeout, and the process environment.
func (o Options) WithDefaults() Options {
	if o.Runner == nil {
		o.Runner = &proc.Runner{Log: o.Logger}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	return o
}

// DefaultTimeout bounds an engine call when Options.Timeout is not set.
const DefaultTimeout = 60 * time.Second

// Engine is a runtime.Runtime driving one CLI binary.
type Engine struct {
	d       Dialect
	bin     string
	runner  *proc.Runner
	env     []string
	timeout time.Duration
	loc     func() runtime.Location
}

var (
	_ runtime.Runtime = (*Engine)(nil)
	_ runtime.Locator = (*Engine)(nil)
)

// New returns an Engine for the CLI at bin speaking dialect d.
func New(d Dialect, bin string, o Options) *Engine {
	o = o.WithDefaults()
	e := &Engine{d: d, bin: bin, runner: o.Runner, env: o.Env, timeout: o.Timeout}
	e.loc = sync.OnceValue(func() runtime.Location { return Locate(string(d.Name()), bin, e.env, goruntime.GOOS) })
	return e
}

// Location implements runtime.Locator: where the engine runs, from what
// the client reads to choose it (no engine call; read once).
func (e *Engine) Location() runtime.Location { return e.loc() }

// Dialect implements runtime.Runtime.
func (e *Engine) Dialect() runtime.Dialect { return e.d.Name() }

// Binary implements runtime.Runtime.
func (e *Engine) Binary() string { return e.bin }

// CallTimeout implements runtime.Runtime.
func (e *Engine) CallTimeout() time.Duration { return e.timeout }

// Capabilities implements runtime.Runtime: the dialect's.
func (e *Engine) Capabilities() runtime.Capabilities {
	c := e.d.Capabilities()
	c.EnvByFile = true // passEnv
	return c
}

// Endpoint implements runtime.Runtime: the dialect, the binary, the
// variables both clients read to pick a daemon, and for docker the
// current context of its configuration file when no variable names one.
func (e *Engine) Endpoint() string {
	return Endpoint(string(e.d.Name()), e.bin, e.env)
}

// call runs one engine command and classifies a non-zero exit.
func (e *Engine) call(ctx context.Context, op Op, args []string, timeout time.Duration) (proc.Result, error) {
	return e.callWith(ctx, op, args, sandboxEnv{}, timeout)
}

// callWith is call with a sandbox's variables as passEnv parted them.
func (e *Engine) callWith(ctx context.Context, op Op, args []string, env sandboxEnv, timeout time.Duration) (proc.Result, error) {
	argv := append([]string{e.bin}, args...)
	c := proc.Cmd{Argv: argv, Env: e.clientEnv(env.client), Timeout: timeout, Files: env.files}
	if op == OpRun {
		c.Graceful = e.d.RunGrace()
	}
	res, err := e.runner.Run(ctx, c)
	if err != nil {
		return res, e.runError(argv, err)
	}
	if res.ExitCode != 0 {
		return res, e.classify(op, argv, res.ExitCode, string(res.Stderr))
	}
	return res, nil
}

func (e *Engine) runError(argv []string, err error) error { return RunError(argv, err) }

// RunError turns a failure to run an engine CLI at all (timeout, missing
// binary, cancelled caller) into the runtime's errors.
func RunError(argv []string, err error) error {
	var te *proc.TimeoutError
	switch {
	case errors.As(err, &te):
		return &runtime.EngineError{Kind: runtime.ErrTimeout, Argv: argv, ExitCode: -1,
			Stderr: fmt.Sprintf("no answer after %s", te.Timeout)}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, proc.ErrNotFound), errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %v", runtime.ErrBinaryNotFound, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up: name the subcommand, never the whole argv
		// (it may hold a script); the argv is in the debug log.
		cause := context.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			cause = context.DeadlineExceeded
		}
		return fmt.Errorf("`%s` interrupted: %w", (&runtime.EngineError{Argv: argv}).Command(), cause)
	}
	return err
}

func (e *Engine) classify(op Op, argv []string, code int, stderr string) error {
	kind := e.d.Classify(op, code, stderr)
	if kind == nil {
		kind = runtime.ErrEngine
	}
	return &runtime.EngineError{Kind: kind, Argv: argv, ExitCode: code, Stderr: strings.TrimSpace(stderr)}
}

// clientEnv is the CLI's environment: the base plus the spec's values, so
// "-e NAME" on argv picks the value up without it ever being on a command line.
func (e *Engine) clientEnv(extra map[string]string) []string {
	if len(extra) == 0 {
		return e.env
	}
	env := make([]string, 0, len(e.env)+len(extra))
	for _, kv := range e.env {
		k, _, _ := strings.Cut(kv, "=")
		if _, override := extra[k]; !override {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// List implements runtime.Runtime.
func (e *Engine) List(ctx context.Context, o runtime.ListOptions) ([]runtime.Container, error) {
	args := []string{"ps", "-a", "--no-trunc", "--format", e.d.PSFormat()}
	for _, l := range o.Labels {
		args = append(args, "--filter", "label="+l)
	}
	for _, s := range o.Status {
		args = append(args, "--filter", "status="+string(s))
	}
	if o.Name != "" {
		args = append(args, "--filter", "name="+o.Name)
	}
	res, err := e.call(ctx, OpPS, args, e.timeout)
	if err != nil {
		return nil, err
	}
	cs, err := e.d.ParsePS(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("%w: %s ps: %v", runtime.ErrBadOutput, e.d.Name(), err)
	}
	return cs, nil
}

// Inspect implements runtime.Runtime.
func (e *Engine) Inspect(ctx context.Context, ids ...string) ([]runtime.Container, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := append([]string{"container", "inspect"}, ids...)
	res, callErr := e.call(ctx, OpInspect, args, e.timeout)
	if callErr != nil && !errors.Is(callErr, runtime.ErrNotFound) {
		return nil, callErr
	}
	cs, err := ParseInspect(res.Stdout)
	if err != nil {
		if callErr != nil { // e.g. docker prints "[]" plus the error; anything else is noise
			return nil, callErr
		}
		return nil, fmt.Errorf("%w: %s container inspect: %v", runtime.ErrBadOutput, e.d.Name(), err)
	}
	if missing := Missing(ids, cs); len(missing) > 0 {
		return cs, &runtime.MissingError{IDs: missing}
	}
	if callErr != nil { // the engine said something was missing but all came back
		return cs, callErr
	}
	return cs, nil
}

// Missing returns the ids that match none of cs (by full ID, ID prefix or name).
func Missing(ids []string, cs []runtime.Container) []string {
	var missing []string
	for _, id := range ids {
		found := false
		for _, c := range cs {
			if c.ID == id || c.Name == id || (len(id) >= 4 && strings.HasPrefix(c.ID, id)) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, id)
		}
	}
	return missing
}

// isID reports whether s looks like a container ID (12 to 64 hex digits).
func isID(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Run implements runtime.Runtime.
func (e *Engine) Run(ctx context.Context, s runtime.RunSpec) (string, error) {
	if s.Image == "" {
		return "", errors.New("run: no image given")
	}
	if len(s.Claims) > 0 {
		return "", fmt.Errorf("%w: %s keeps persistent files in host directories, not claims", runtime.ErrUnsupported, e.Dialect())
	}
	if err := e.EnsureVolumes(ctx, s.Volumes...); err != nil {
		return "", err
	}
	// --pull never: a missing image fails at once (ErrImageNotFound) and
	// the sandbox layer pulls it under pull_timeout with progress, instead
	// of the engine pulling silently inside a create bounded by 4x the
	// engine timeout (and blamed on the daemon when a registry is slow).
	args := []string{"run", "-d", "--pull", "never"}
	if s.Name != "" {
		args = append(args, "--name", s.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		args = append(args, "--label", k+"="+s.Labels[k])
	}
	pe, err := passEnv(s.Env)
	if err != nil {
		return "", err
	}
	defer pe.done()
	args = append(args, pe.args...)
	args = append(args, s.Args...)
	args = append(args, s.Image)
	args = append(args, s.Cmd...)
	res, err := e.callWith(ctx, OpRun, args, pe, 4*e.timeout)
	if err != nil {
		return "", err
	}
	id := lastLine(res.Stdout)
	if !isID(id) {
		return "", fmt.Errorf("%w: %s run printed %q where a container ID was expected", runtime.ErrBadOutput, e.d.Name(), clip(res.Stdout))
	}
	return id, nil
}

// Start implements runtime.Runtime.
func (e *Engine) Start(ctx context.Context, id string) error {
	_, err := e.call(ctx, OpStart, []string{"start", id}, e.timeout)
	return err
}

// Stop implements runtime.Runtime.
func (e *Engine) Stop(ctx context.Context, id string, grace time.Duration) error {
	secs := int((grace + time.Second - 1) / time.Second)
	_, err := e.call(ctx, OpStop, []string{"stop", "-t", strconv.Itoa(secs), id}, e.timeout+grace)
	return err
}

// Unpause implements runtime.Runtime.
func (e *Engine) Unpause(ctx context.Context, id string) error {
	_, err := e.call(ctx, OpUnpause, []string{"unpause", id}, e.timeout)
	return err
}

// Remove implements runtime.Runtime. Both engines echo each ref they
// removed. podman 4.3's `rm -f a missing b` exits 0, prints nothing and
// removes nothing, so refs missing from the echo are retried one by one;
// a single missing ref is then reported gone (as asked).
func (e *Engine) Remove(ctx context.Context, force bool, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	echoed, err := e.remove(ctx, force, ids)
	if err != nil || len(ids) == 1 {
		return err
	}
	var errs []error
	for _, id := range ids {
		if !echoed[id] {
			if _, err := e.remove(ctx, force, []string{id}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveStorage implements runtime.StorageRemover: `podman rm --storage
// NAME` (it echoes the name; a missing one is "no such container", exit
// 1 — measured on podman 4.3, which removes a listed container too: see
// StorageRemover). Docker has no such thing.
func (e *Engine) RemoveStorage(ctx context.Context, name string) (bool, error) {
	if e.Dialect() != runtime.Podman {
		return false, fmt.Errorf("%w: %s keeps no storage-only containers", runtime.ErrUnsupported, e.Dialect())
	}
	res, err := e.call(ctx, OpRemove, []string{"rm", "--storage", name}, e.timeout)
	var ee *runtime.EngineError
	if errors.As(err, &ee) && e.onlyNotFound(ee.Stderr) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(res.Stdout)) != "", nil
}

// remove runs one rm and returns the refs the engine echoed as removed.
func (e *Engine) remove(ctx context.Context, force bool, ids []string) (map[string]bool, error) {
	args := []string{"rm"}
	if force {
		args = append(args, "-f")
	}
	args = append(args, ids...)
	res, err := e.call(ctx, OpRemove, args, e.timeout)
	echoed := map[string]bool{}
	for _, f := range strings.Fields(string(res.Stdout)) {
		echoed[f] = true
	}
	var ee *runtime.EngineError
	if errors.As(err, &ee) && e.onlyNotFound(ee.Stderr) {
		err = nil // every complaint was about a container that is already gone
	}
	return echoed, err
}

// onlyNotFound reports whether every error line in stderr says "no such container".
func (e *Engine) onlyNotFound(stderr string) bool {
	seen := false
	for line := range strings.Lines(stderr) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !errors.Is(e.d.Classify(OpRemove, 1, line), runtime.ErrNotFound) {
			return false
		}
		seen = true
	}
	return seen
}

func lastLine(b []byte) string {
	lines := strings.Fields(string(bytes.TrimSpace(b)))
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
