package channel

import (
	"context"
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
