package channel

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/agentbin"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// UnavailableError says the agent cannot run in this sandbox (a binary
// that is not a static Linux one, another CPU architecture, a root file
// system the engine cannot copy into): commands take the plain exec path.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return "exec channel unavailable: " + e.Reason }

// Agent says where and how to run the agent.
type Agent struct {
	Runtime runtime.Runtime
	ID      string // the sandbox's verified container id
	User    string // exec --user ("" = the container's)
	// Binary, when set, is the agent to run instead of the one hsbx
	// carries for the engine's platform (internal/agentbin): a static
	// Linux build of hsbx or of cmd/hsbx-agent.
	Binary string
	Log    *slog.Logger
	// Platform is the engine's "os/arch" when the caller knows it (a
	// cached fact); "" asks the engine (Platform: one `version` call).
	Platform string
}

// pathPrefix names the agent in a sandbox; the rest is a digest of the
// binary, so a different hsbx never talks to a stale agent.
const pathPrefix = agentapi.AgentPathPrefix

// agentPath is where an agent of this digest lives inside a sandbox.
func agentPath(digest string) string { return pathPrefix + digest[:16] }

// CheckBinary says whether binary can run as the agent in a Linux
// container of platform ("linux/amd64"): a static ELF executable for it.
func CheckBinary(binary, platform string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return &UnavailableError{Reason: fmt.Sprintf("%s is not a Linux executable: %v", binary, err)}
	}
	defer f.Close()
	_, arch, _ := strings.Cut(platform, "/")
	if want, ok := machines[arch]; !ok || f.Machine != want {
		return &UnavailableError{Reason: fmt.Sprintf("%s is built for %s, not the engine's %s", binary, f.Machine, platform)}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return &UnavailableError{Reason: fmt.Sprintf("%s is dynamically linked (build it with CGO_ENABLED=0)", binary)}
		}
	}
	return nil
}

var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386,
	"arm": elf.EM_ARM, "riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390}

// Platform is where the engine runs its sandboxes ("linux/amd64"), as
// it reports it (one `version` call); an engine that does not say is
// taken to be this host's architecture on Linux.
func Platform(ctx context.Context, rt runtime.Runtime) (string, error) {
	v, err := rt.Version(ctx)
	if err != nil {
		return "", err
	}
	if v.Platform != "" {
		return v.Platform, nil
	}
	return "linux/" + goruntime.GOARCH, nil
}

// agentBin is the agent for a's sandbox: its digest (what names it
// there), and its bytes on demand — the one hsbx carries is decompressed
// only when it has to be installed, so a holder whose sandbox has it
// already never holds its megabytes.
func agentBin(ctx context.Context, a Agent) (digest string, bytesOf func() ([]byte, error), err error) {
	platform := a.Platform
	if platform == "" {
		if platform, err = Platform(ctx, a.Runtime); err != nil {
			return "", nil, fmt.Errorf("asking the engine for its platform: %w", err)
		}
	}
	if a.Binary == "" {
		d, err := agentbin.Digest(platform)
		if err != nil {
			return "", nil, &UnavailableError{Reason: err.Error()}
		}
		return d, func() ([]byte, error) {
			ag, err := agentbin.For(platform)
			if err != nil {
				return nil, &UnavailableError{Reason: err.Error()}
			}
			return ag.Bytes, nil
		}, nil
	}
	if err := CheckBinary(a.Binary, platform); err != nil {
		return "", nil, err
	}
	b, err := os.ReadFile(a.Binary)
	if err != nil {
		return "", nil, &UnavailableError{Reason: err.Error()}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), func() ([]byte, error) { return b, nil }, nil
}

// Open starts the agent in the sandbox (`exec -i ID AGENT agent`) and
// returns the channel to it. A missing agent is copied in with the
// engine's cp (into the container's root file system, which the hardened
// run keeps writable and exec-able) and started once more. The channel
// outlives ctx's cancellation; Close ends it. It works from any host: all
// it needs is the engine client's exec stream.
func Open(ctx context.Context, a Agent) (*Conn, error) {
	if a.Log == nil {
		a.Log = slog.New(slog.DiscardHandler)
	}
	digest, bytesOf, err := agentBin(ctx, a)
	if err != nil {
		return nil, err
	}
	path := agentPath(digest)
	conn, err := start(ctx, a, append([]string{path}, agentapi.Agent{}.Args()...))
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil || passing(err) {
		return nil, err
	}
	a.Log.Debug("agent not running; installing it", "path", path, "error", err)
	bin, err := bytesOf()
	if err != nil {
		return nil, err
	}
	ierr, err := installAndRun(ctx, a, path, bin, func(run []string) (err error) {
		conn, err = start(ctx, a, append(run, agentapi.Agent{}.Args()...))
		if err != nil && !passing(err) {
			err = &notStartedError{err}
		}
		return err
	})
	switch {
	case ierr != nil:
		return nil, ierr
	case err != nil && passing(err):
		return nil, err
	case err != nil:
		return nil, &UnavailableError{Reason: err.Error()}
	}
	return conn, nil
}

// KillMarked kills the processes in a's sandbox that carry marker
// ("HSBX_EXEC_ID=token") with the agent binary run as one plain exec
// (`AGENT kill-marked MARKER`), installing it first when it is missing:
// the way to stop a command in a sandbox without the shell that hsbx's
// kill script needs. It returns how many processes it reached.
func KillMarked(ctx context.Context, a Agent, marker string) (int, error) {
	out, err := runMode(ctx, a, a.Runtime.CallTimeout(), false, nil, agentapi.KillMarked{Marker: marker})
	if err != nil {
		return 0, err
	}
	return agentapi.ReadKilled([]byte(out))
}

// Unreachable runs `AGENT unreachable WAIT ADDR...` in a's sandbox (one
// plain exec, installing the agent first when it is missing) and returns
// the TCP addresses the sandbox could still connect to after wait: none
// when every one is out of its reach.
func Unreachable(ctx context.Context, a Agent, wait time.Duration, addrs []string) ([]string, error) {
	out, err := runMode(ctx, a, a.Runtime.CallTimeout()+wait+time.Duration(len(addrs))*time.Second, true, nil,
		agentapi.Unreachable{Wait: wait, Addrs: addrs})
	if err != nil {
		return nil, err
	}
	var open []string
	for l := range strings.Lines(out) {
		if l = strings.TrimSpace(l); l != "" {
			open = append(open, l)
		}
	}
	if len(open) == 0 && strings.TrimSpace(out) != "" {
		return nil, fmt.Errorf("the agent's reach test printed %q", clip(out))
	}
	return open, nil
}

// InstallTrust runs `AGENT trust DIR` in a's sandbox with the sandbox's
// CA certificate (pem) on its stdin: DIR/ca.pem and DIR/ca-bundle.pem
// (the image's bundle with it) are written, for the CA variables to name.
func InstallTrust(ctx context.Context, a Agent, dir string, pem []byte) error {
	_, err := runMode(ctx, a, a.Runtime.CallTimeout(), false, pem, agentapi.Trust{Dir: dir})
	return err
}

// AgentExec is one run of an agent mode as a plain exec (RunAgent): its
// arguments, streams and bound.
type AgentExec struct {
	Args           []string
	Stdin          io.Reader // nil: none
	Stdout, Stderr io.Writer
	Timeout        time.Duration // 0: none
	// Env (values through the engine client's environment) and WorkDir
	// are the mode's process's.
	Env     map[string]string
	WorkDir string
}

// RunAgent runs the agent's mode x.Args as one plain exec in a's sandbox,
// streaming, and returns its exit status; the agent is installed first
// when it is missing (found by a run of its `features` mode, which reads
// nothing: the streaming run is never a second try that lost its input).
func RunAgent(ctx context.Context, a Agent, x AgentExec) (int, error) {
	digest, bytesOf, err := agentBin(ctx, a)
	if err != nil {
		return -1, err
	}
	path := agentPath(digest)
	stderr := x.Stderr
	run := func(agent []string) (int, error) {
		spec := runtime.ExecSpec{ID: a.ID, Cmd: append(agent, x.Args...), User: a.User,
			Stdout: x.Stdout, Stderr: stderr, Timeout: x.Timeout, Env: x.Env, WorkDir: x.WorkDir}
		if x.Stdin != nil {
			spec.Stdin, spec.Interactive = x.Stdin, true
		}
		// A run that lasts is watched: a sandbox that dies under it ends
		// it (the engine may not).
		ectx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			if sleep(ectx, AgentExecWatch) {
				if err := WatchSandbox(ectx, a.Runtime, a.ID, nil); err != nil {
					cancel(err)
				}
			}
		}()
		code, err := a.Runtime.Exec(ectx, spec)
		var ended *SandboxEndedError
		if errors.As(context.Cause(ectx), &ended) && ctx.Err() == nil {
			return -1, fmt.Errorf("%w: the sandbox stopped or went while hsbx's agent ran (%v); it may have run part-way", runtime.ErrEngine, ended)
		}
		return code, err
	}
	if x.Stdin != nil {
		// Input is read once: the agent is made sure of first.
		if _, err := runModeOf(ctx, a, digest, bytesOf, a.Runtime.CallTimeout(), false, nil, agentapi.Features{}); err != nil {
			return -1, err
		}
		return run([]string{path})
	}
	// No input: tried at once; an agent that is not there never started
	// (the runtime's 127 or 126, before any output), so it is installed
	// and run once more.
	first := &proc.TailBuffer{Max: 4 << 10}
	stderr = first
	code, err := run([]string{path})
	stderr = x.Stderr
	if err != nil || code != 127 && code != 126 || ctx.Err() != nil {
		if x.Stderr != nil {
			_, _ = x.Stderr.Write(first.Bytes()) // the try's words are the answer's
		}
		return code, err
	}
	bin, err := bytesOf()
	if err != nil {
		return -1, err
	}
	ierr, err := installAndRun(ctx, a, path, bin, func(agent []string) (err error) {
		code, err = run(agent)
		if err == nil && (code == 127 || code == 126) {
			// What the engine's cp wrote is not what the sandbox sees
			// (gVisor): written from inside, it runs.
			return &notStartedError{fmt.Errorf("the agent installed at %s did not start (exit %d)", agent[0], code)}
		}
		return err
	})
	if ierr != nil {
		return -1, ierr
	}
	return code, err
}

// runMode runs one of the agent's one-shot modes (args) as a plain exec
// (stdin, when not nil, on its standard input) and returns what it
// printed; exit 1 is an answer too when one is allowed (the mode printed
// what it found). The agent is installed first when it is missing.
func runMode(ctx context.Context, a Agent, timeout time.Duration, one bool, stdin []byte, call agentapi.Call) (string, error) {
	digest, bytesOf, err := agentBin(ctx, a)
	if err != nil {
		return "", err
	}
	return runModeOf(ctx, a, digest, bytesOf, timeout, one, stdin, call)
}

// runModeOf is runMode with the agent agentBin found.
func runModeOf(ctx context.Context, a Agent, digest string, bytesOf func() ([]byte, error), timeout time.Duration, one bool, stdin []byte, call agentapi.Call) (string, error) {
	path := agentPath(digest)
	args := call.Args()
	run := func(agent []string) (string, int, error) {
		var out strings.Builder
		errb := &proc.TailBuffer{Max: 4 << 10}
		spec := runtime.ExecSpec{ID: a.ID, Cmd: append(agent, args...), User: a.User,
			Stdout: &out, Stderr: errb, Timeout: timeout}
		if stdin != nil {
			spec.Stdin, spec.Interactive = bytes.NewReader(stdin), true
		}
		code, err := a.Runtime.Exec(ctx, spec)
		if err == nil && code != 0 && code != 127 && code != 126 && len(errb.Bytes()) > 0 && (code != 1 || !one) {
			err = fmt.Errorf("the agent's %s exited %d: %s", args[0], code, strings.TrimSpace(string(errb.Bytes())))
		}
		if err == nil && code == 1 && one {
			code = 0
		}
		return out.String(), code, err
	}
	out, code, err := run([]string{path})
	switch {
	case err == nil && code == 0:
		return out, nil
	case err != nil || code != 127 && code != 126 || ctx.Err() != nil:
		// It ran (and failed), or the engine failed: a mode runs once.
		if err == nil {
			err = fmt.Errorf("the agent's %s exited %d", args[0], code)
		}
		return "", err
	}
	bin, err := bytesOf()
	if err != nil {
		return "", err
	}
	ierr, err := installAndRun(ctx, a, path, bin, func(agent []string) (err error) {
		out, code, err = run(agent)
		if err == nil && (code == 127 || code == 126) {
			return &notStartedError{fmt.Errorf("the agent installed at %s did not start (exit %d)", agent[0], code)}
		}
		if err == nil && code != 0 {
			err = fmt.Errorf("the agent's %s exited %d", args[0], code)
		}
		return err
	})
	if ierr != nil {
		return "", ierr
	}
	if err != nil {
		return "", err
	}
	return out, nil
}

// installAndRun installs the agent with the engine's cp and runs it
// (use); when cp could not write it (podman's, under gVisor: a read-only
// view of the root), or what it wrote does not run (not what the sandbox
// sees), it writes the agent from inside and runs it again. ierr is the
// install's failure, err use's.
//
// use is tried again only when the agent did not start (its error a
// *notStartedError): a mode that ran runs once. When writing it from
// inside fails (another process's install took the place meanwhile), the
// agent at path is tried once: that process's copy is as good.
func installAndRun(ctx context.Context, a Agent, path string, bin []byte, use func(run []string) error) (ierr, err error) {
	run, ierr := install(ctx, a, path, bin)
	if ierr == nil {
		err = use(run)
	}
	var ns *notStartedError
	if (ierr != nil && !passing(ierr) || errors.As(err, &ns)) && ctx.Err() == nil {
		if a.Log != nil {
			a.Log.Debug("the engine's cp could not install the agent; writing it from inside the sandbox", "cp", ierr, "run", err)
		}
		if run, ierr = installInside(ctx, a, path, bin); ierr == nil {
			err = use(run)
		} else if !passing(ierr) && ctx.Err() == nil {
			if uerr := use([]string{path}); !errors.As(uerr, &ns) {
				ierr, err = nil, uerr // another process's agent: it ran
			}
		}
	}
	return ierr, err
}

// notStartedError is a run of the agent that never started (the
// runtime's 127 or 126, or no hello): the install is what failed.
type notStartedError struct{ err error }

func (e *notStartedError) Error() string { return e.err.Error() }
func (e *notStartedError) Unwrap() error { return e.err }

// passing says err is about the sandbox's state or the engine right now
// (stopped, gone, paused, unreachable, slow), not about whether the agent
// can run in it: no verdict is recorded, and the next command tries again.
func passing(err error) bool {
	for _, e := range []error{runtime.ErrNotRunning, runtime.ErrNotFound, runtime.ErrPaused, runtime.ErrTimeout, runtime.ErrUnreachable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// agentTarget is where install writes the agent and how to run it the
// first time (see install).
func agentTarget(a Agent, path string, bin []byte) (target string, run []string) {
	target, run = path, []string{path}
	root := a.User == "" || a.User == "0" || a.User == "root" || strings.HasPrefix(a.User, "0:") || strings.HasPrefix(a.User, "root:")
	if root && bytes.Contains(bin, []byte(agentapi.AgentFeatures)) {
		var r [8]byte
		_, _ = rand.Read(r[:])
		target = path + ".new-" + hex.EncodeToString(r[:])
		run = []string{target, agentapi.ModeInstallAs, strings.TrimPrefix(path, "/")} // then the mode: agentapi.InstallAs
	}
	return target, run
}

// agentArchive streams a tar of the agent at target (mode 0755) into pw.
func agentArchive(pw *io.PipeWriter, target string, bin []byte) {
	tw := tar.NewWriter(pw)
	err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(target, "/"), Mode: 0o755, Size: int64(len(bin)),
		Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
	if err == nil {
		_, err = tw.Write(bin)
	}
	if err == nil {
		err = tw.Close()
	}
	pw.CloseWithError(err)
}

// installInside writes the agent from inside the sandbox, through an exec
// of the image's own tar (or, without one, its sh and cat), for a sandbox
// whose runtime does not show its processes what the engine's cp wrote
// from the host (gVisor caches the root file system it was started
// with). It returns how to run the agent, as install does.
func installInside(ctx context.Context, a Agent, path string, bin []byte) ([]string, error) {
	target, run := agentTarget(a, path, bin)
	try := func(cmd []string, archive bool) (int, string, error) {
		pr, pw := io.Pipe()
		if archive {
			go agentArchive(pw, target, bin)
		} else {
			go func() { _, err := pw.Write(bin); pw.CloseWithError(err) }()
		}
		defer pr.Close()
		errb := &proc.TailBuffer{Max: 4 << 10}
		code, err := a.Runtime.Exec(ctx, runtime.ExecSpec{ID: a.ID, Cmd: cmd, User: a.User, Interactive: true,
			Stdin: pr, Stdout: io.Discard, Stderr: errb, Timeout: 10 * a.Runtime.CallTimeout()})
		return code, string(errb.Bytes()), err
	}
	code, msg, err := try([]string{"tar", "-x", "-f", "-", "-C", "/"}, true)
	if err == nil && code == 127 {
		// No tar in the image: its shell, the path as an argument.
		code, msg, err = try([]string{"sh", "-c", `cat > "$1" && chmod 0755 "$1"`, "sh", target}, false)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("writing the agent into the sandbox from inside: %w", err)
	case code != 0:
		return nil, &UnavailableError{Reason: fmt.Sprintf("writing the agent into the sandbox from inside (tar, or sh and cat) exited %d: %s", code, clip(msg))}
	}
	return run, nil
}

// install copies the agent into the container, mode 0755, owned by root,
// through `cp -` (works for rootless and remote engines alike), and
// returns how to run it the first time. Any number of hosts may install
// at once, and an engine's cp unlinks and rewrites the file it extracts:
// so the agent goes in under a name of its own (path.new-RANDOM), never
// written again, and its first run renames it to path (agent.RunMode's
// install-as), which replaces any other host's copy in one step — a
// process never runs a file while it is being written. An exec user that
// is not root cannot rename in /, and an agent from an hsbx before
// install-as (an exec_channel_agent of an older build: its binary lacks
// agentapi.AgentFeatures) cannot rename itself: their agents are written at
// path.
func install(ctx context.Context, a Agent, path string, bin []byte) (run []string, err error) {
	target, run := agentTarget(a, path, bin)
	pr, pw := io.Pipe()
	go agentArchive(pw, target, bin)
	if err := a.Runtime.CopyIn(ctx, a.ID, "/", pr); err != nil {
		pr.CloseWithError(err)
		if passing(err) {
			return nil, fmt.Errorf("copying the agent into the sandbox: %w", err)
		}
		return nil, &UnavailableError{Reason: fmt.Sprintf("copying the agent into the sandbox: %v", err)}
	}
	return run, nil
}

// helloWait bounds the wait for a started agent's hello.
func helloWait(rt runtime.Runtime) time.Duration { return rt.CallTimeout() }

// start runs the agent (cmd: its path and mode) and reads its hello.
func start(ctx context.Context, a Agent, cmd []string) (*Conn, error) {
	execCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// OS pipes, handed to the engine client as they are: no copying
	// goroutine can keep its exec from returning once the client exits.
	inR, inW, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cancel()
		inR.Close()
		inW.Close()
		return nil, err
	}
	// Before the agent's hello, anything on stderr is the engine failing
	// to start it; podman then waits for stdin to close before it exits,
	// so close it at once instead of waiting out the hello.
	stderr := &startWatch{tail: proc.TailBuffer{Max: 4 << 10}, onWrite: func() { _ = inW.Close() }}
	done := make(chan execResult, 1)
	go func() {
		code, err := a.Runtime.Exec(execCtx, runtime.ExecSpec{ID: a.ID, Cmd: cmd, User: a.User,
			Interactive: true, Stdin: inR, Stdout: outW, StdoutDirect: true, Stderr: stderr})
		// The client is gone: our ends are the last, so the reader sees
		// EOF and writers EPIPE.
		outW.Close()
		inR.Close()
		done <- execResult{code, err}
	}()
	cl := &closer{in: inW, cancel: cancel, done: done}
	wire.GrowPipe(outR)
	// Room for several input frames in the client's stdin, so the holder
	// writes a chunk without waiting for the client to read it (with the
	// agent's side grown too, 200 MB through `exec -i` 8–15 % faster).
	wire.GrowPipe(inW)
	// The engine says it could not start the agent on stdout (docker's
	// "OCI runtime exec failed: ..."), where the hello should be: its
	// first bytes are kept for the error.
	head := &headReader{r: wire.Gather(outR), got: make(chan struct{})}
	conn, err := NewConn(head, inW, multiCloser{cl, outR}, helloWait(a.Runtime))
	stderr.started()
	if err != nil {
		cancel()
		_ = inW.Close()
		r := <-done
		// The client is gone, so what it printed is in the pipe: the
		// hello's reader takes it (our hello may have failed first, on the
		// pipe the client closed), before the pipe is closed here.
		select {
		case <-head.got:
		case <-time.After(time.Second):
		}
		outR.Close()
		if r.err != nil {
			return nil, fmt.Errorf("starting the agent: %w", r.err)
		}
		msg := stderr.text()
		if strings.TrimSpace(msg) == "" {
			msg = head.text()
		}
		return nil, fmt.Errorf("starting the agent: %v (exit %d: %s)", err, r.code, clip(msg))
	}
	conn.OnStall(func(ctx context.Context) { stalled(ctx, a, conn) })
	return conn, nil
}

// stalled asks the engine about the sandbox when a command waits on its
// agent and the agent does not answer a ping:
//   - paused (after the command was sent: a command sent to an agent
//     quiet for a while is pinged first, and one that does not answer is
//     not sent): unpaused, and the command runs, once, as the plain path
//     runs a command in a paused sandbox;
//   - stopped or gone (a crash, an OOM kill, its runtime killed: under
//     gVisor the engine then never ends the exec stream): the channel is
//     aborted, and every command on it ends within seconds;
//   - running, its agent silent for AgentDeadAfter (the agent's own
//     bound for hsbx's silence): aborted too.
//
// An engine that does not answer is asked again at the next stall.
func stalled(ctx context.Context, a Agent, conn *Conn) {
	ctx, cancel := context.WithTimeout(ctx, 2*a.Runtime.CallTimeout())
	defer cancel()
	cs, err := a.Runtime.Inspect(ctx, a.ID)
	switch {
	case errors.Is(err, runtime.ErrNotFound) || err == nil && len(cs) == 0:
		conn.Abort(errors.New("the sandbox is gone: the agent went away"))
	case err != nil || len(cs) != 1:
		return
	case cs[0].State == runtime.StatePaused:
		if !conn.waiting() {
			return // paused while idle: it stays paused
		}
		err = a.Runtime.Unpause(ctx, a.ID)
		if a.Log != nil {
			a.Log.Warn("the sandbox was paused while a command waited on the exec channel; unpaused it so the command runs", "id", a.ID, "error", err)
		}
	case cs[0].State != runtime.StateRunning:
		conn.Abort(fmt.Errorf("the sandbox is %s: the agent went away", cs[0].State))
	case conn.silent() > conn.deadAfter && conn.deadAfter > 0:
		conn.Abort(fmt.Errorf("the agent has sent nothing for %s while the sandbox runs: taken for gone", conn.silent().Round(time.Second)))
	}
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	for _, c := range m {
		_ = c.Close()
	}
	return nil
}

// closer ends an agent: EOF on its stdin makes it kill what it runs and
// exit; the engine client is killed if it lingers.
type closer struct {
	once   sync.Once
	in     io.Closer
	cancel context.CancelFunc
	done   <-chan execResult
}

// execResult is how the agent's exec ended.
type execResult struct {
	code int
	err  error
}

func (c *closer) Close() error {
	c.once.Do(func() {
		_ = c.in.Close()
		select {
		case <-c.done:
		case <-time.After(KillWait):
		}
		c.cancel()
	})
	return nil
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if s == "" {
		return "no message"
	}
	return s
}

// headReader keeps the first bytes read through it (up to headMax) while
// passing everything on.
type headReader struct {
	r    io.Reader
	mu   sync.Mutex
	head []byte
	got  chan struct{} // closed at the first read that returned anything
	once sync.Once
}

const headMax = 1 << 10

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.mu.Lock()
	if room := headMax - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(n, room)]...)
	}
	h.mu.Unlock()
	if n > 0 || err != nil {
		h.once.Do(func() { close(h.got) })
	}
	return n, err
}

// text is the first line kept: the engine's words when it printed some
// instead of the agent's hello.
func (h *headReader) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	line, _, _ := strings.Cut(string(h.head), "\n")
	if !utf8.ValidString(line) || strings.ContainsFunc(line, func(r rune) bool { return r < ' ' && r != '\t' }) {
		return "" // frames, not words
	}
	return line
}

// startWatch keeps the agent's exec's stderr and calls onWrite on the
// first write before started.
type startWatch struct {
	mu      sync.Mutex
	tail    proc.TailBuffer
	onWrite func()
	up      bool
}

func (w *startWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.up && w.onWrite != nil {
		w.onWrite()
		w.onWrite = nil
	}
	return w.tail.Write(p)
}

func (w *startWatch) started() {
	w.mu.Lock()
	w.up = true
	w.mu.Unlock()
}

func (w *startWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.tail.Bytes())
}
