package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/cparchive"
	"github.com/hsbx/hsbx/internal/hostcopy"
	"github.com/hsbx/hsbx/internal/iocount"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// Copies move files between the host and a sandbox (Sandbox.Copies):
// through hsbx's agent on the exec channel when it is up, else through the
// engine's own `cp`; either streams (nothing is held in memory) and the
// engine's works on a running or a stopped sandbox. A relative sandbox
// path is taken from the sandbox's working directory. The engine's
// semantics apply: copying to an existing directory puts the source
// inside it, "SRC/." copies a directory's contents, and owners inside the
// sandbox become the sandbox's root.
type Copies struct{ s *Sandbox }

// Copies are the sandbox's copies between the host and it.
func (s *Sandbox) Copies() Copies { return Copies{s} }

// ErrNoSandbox is a copy out of a task that has no sandbox.
var ErrNoSandbox = errors.New("no sandbox for this task")

// ErrMemoryPath is a copy to or from a memory-backed (tmpfs) mount, which
// the engine's cp cannot reach: docker reads and writes the image layer
// beneath the mount (measured on 20.10: a copied file is invisible to
// commands), and a stopped sandbox's tmpfs holds nothing. Podman reaches
// the mount of a running sandbox, so only docker, and stopped sandboxes,
// refuse.
var ErrMemoryPath = errors.New("memory-backed (tmpfs) path: the engine's cp cannot reach it")

// In copies host file or directory src into the sandbox at dst. When the
// task has no sandbox yet it is created first, so a program can upload its
// inputs before the first command.
func (c Copies) In(ctx context.Context, src, dst string) error {
	s := c.s
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("copying %s into sandbox %s: %w", src, s.name, err)
	}
	dst = s.sandboxPath(dst)
	if s.fastCopies() {
		if over, err := cparchive.Over(src, s.m.c.CopyChannelMax); err == nil && !over {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(cparchive.Archive(pw, src)) }()
			made, err := s.fastCopy(ctx, agentapi.CopyIn{Dst: dst}.Args(), pr, nil)
			pr.Close()
			if made {
				return s.copyError(dst, err)
			}
		}
	}
	return s.copying(ctx, true, dst, func(id string, viaAgent bool) error {
		if viaAgent {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(cparchive.Archive(pw, src)) }()
			defer pr.Close()
			return s.viaAgent(ctx, id, agentapi.TarIn{Dst: dst}.Args(), pr, nil)
		}
		return s.rt().CopyTo(ctx, id, src, dst)
	})
}

// Out copies file or directory src of the sandbox to host path dst,
// with docker cp's placement and hsbx's own rules for what the sandbox
// may put on the host (internal/hostcopy): nothing outside dst, symbolic
// links only when they point inside what was copied (others are reported,
// as a *LinksRefusedError, after the rest is copied), holes kept, at most
// Config.CopyMaxBytes of data.
func (c Copies) Out(ctx context.Context, src, dst string) error {
	s := c.s
	src = s.sandboxPath(src)
	o := hostcopy.Options{MaxBytes: s.m.c.CopyMaxBytes}
	if s.fastCopies() {
		var made bool
		err := hostcopy.CopyFrom(dst, src, func(w io.Writer) (err error) {
			made, err = s.fastCopy(ctx, s.copyOutArgs(src), nil, w)
			return err
		}, o)
		if made {
			return s.copyError(src, err)
		}
		// Handed back: nothing was written, on the host either.
	}
	return s.copying(ctx, false, src, func(id string, viaAgent bool) error {
		stream := func(w io.Writer) error { return s.rt().CopyOut(ctx, id, src, w) }
		if viaAgent {
			stream = func(w io.Writer) error { return s.viaAgent(ctx, id, agentapi.TarOut{Src: src}.Args(), nil, w) }
		}
		return hostcopy.CopyFrom(dst, src, stream, o)
	})
}

// LinksRefusedError says a Copies.Out finished except entries it would not
// make on the host: links pointing outside what was copied, devices.
type LinksRefusedError = hostcopy.LinksRefusedError

// ErrCopyTooLarge says a Copies.Out would write more than CopyMaxBytes.
var ErrCopyTooLarge = hostcopy.ErrTooLarge

// InArchive extracts the tar archive read from r into directory dir of
// the sandbox (created first when there is none), as it streams.
func (c Copies) InArchive(ctx context.Context, dir string, r io.Reader) error {
	s := c.s
	dir = s.sandboxPath(dir)
	if s.fastCopies() {
		// A stream of unknown size: up to the bound is read first; a
		// whole archive that small goes through the agent, a larger one
		// to the engine, what was read first and then the rest.
		head, err := io.ReadAll(io.LimitReader(r, s.m.c.CopyChannelMax+1))
		if err != nil {
			return s.copyError(dir, err)
		}
		if int64(len(head)) <= s.m.c.CopyChannelMax {
			if made, err := s.fastCopy(ctx, agentapi.CopyIn{Dst: dir + "/"}.Args(), bytes.NewReader(head), nil); made {
				return s.copyError(dir, err)
			}
		}
		r = io.MultiReader(bytes.NewReader(head), r)
	}
	return s.copying(ctx, true, dir, func(id string, viaAgent bool) error {
		if viaAgent {
			return s.viaAgent(ctx, id, agentapi.TarIn{Dst: dir + "/"}.Args(), r, nil)
		}
		return s.rt().CopyIn(ctx, id, dir, r)
	})
}

// OutArchive writes a tar archive of src in the sandbox to w as it
// streams (the engine's `cp ID:SRC -`: one entry named after src's base).
func (c Copies) OutArchive(ctx context.Context, src string, w io.Writer) error {
	s := c.s
	src = s.sandboxPath(src)
	if s.fastCopies() {
		if made, err := s.fastCopy(ctx, s.copyOutArgs(src), nil, w); made {
			return s.copyError(src, err)
		}
	}
	return s.copying(ctx, false, src, func(id string, viaAgent bool) error {
		if viaAgent {
			return s.viaAgent(ctx, id, agentapi.TarOut{Src: src}.Args(), nil, w)
		}
		return s.rt().CopyOut(ctx, id, src, w)
	})
}

// copying finds the sandbox (verified by labels, in any state; created
// when create is set and there is none) and runs do with its id while
// marking it in use. A path the engine's cp cannot reach (memory-backed,
// on docker or in a stopped sandbox) goes through hsbx's agent in a
// running sandbox (viaAgent); a stopped sandbox's is refused: it holds
// nothing.
func (s *Sandbox) copying(ctx context.Context, create bool, p string, do func(id string, viaAgent bool) error) error {
	c, err := s.copyTarget(ctx, create)
	if err != nil {
		return err
	}
	caps := s.rt().Capabilities()
	rtName := c.OCIRuntime
	if rtName == "" {
		rtName = s.spec.OCIRuntime
	}
	// Under a runtime with a kernel of its own (gVisor), the engine's cp
	// writes and reads the host's view, which the sandbox may not share:
	// a running one is copied from inside, by the agent.
	viaAgent := c.State == runtime.StateRunning && !caps.CopyRunsInside && kernelOfItsOwn(rtName)
	if viaAgent && !s.m.c.Channel {
		return fmt.Errorf("copying %s in sandbox %s: under OCI runtime %q only hsbx's agent copies, and exec_channel is off (docs/containment.md)", p, s.name, rtName)
	}
	if m, ok := s.memoryMount(p); ok && !viaAgent && (!caps.CopyReachesMemoryMounts || c.State != runtime.StateRunning) {
		if c.State != runtime.StateRunning || !s.m.c.Channel {
			why := "the sandbox is not running (a stopped sandbox's memory holds nothing)"
			if c.State == runtime.StateRunning {
				why = "exec_channel is off (hsbx's agent copies there through it)"
			}
			return fmt.Errorf("%w: %s is under %s in sandbox %s and %s; copy through a path on disk, or stream it with `hsbx exec -i -- sh -c 'cat > FILE'`",
				ErrMemoryPath, p, m, s.name, why)
		}
		viaAgent = true
	}
	release := s.markInUse()
	defer release()
	return s.copyError(p, do(c.ID, viaAgent))
}

// fastCopies says whether copies may try the agent of the sandbox's
// exec channel first (Config.CopyChannelMax): the channel is on, and the
// agent runs as root (a sandbox run as a host user other than root has it
// hand every copy back).
func (s *Sandbox) fastCopies() bool {
	return s.m.c.CopyChannelMax > 0 && s.usesChannel(Command{}) && (!s.spec.RunAsHostUser || s.m.c.UID == 0)
}

func (s *Sandbox) copyOutArgs(src string) []string {
	return agentapi.CopyOut{Src: src, Bound: s.m.c.CopyChannelMax}.Args()
}

// fastCopy makes a copy through the agent of the sandbox's exec channel
// when the channel is up for its verified container: no engine call,
// where the engine's cp costs an inspect and a cp. made is false, with
// nothing written, when the copy is the engine's: no channel is up, or the
// agent handed it back (agentapi.ExitUseEngine: not root, over
// CopyChannelMax, a destination the engine must judge; or status 2, an
// agent of an older hsbx that has no such mode).
func (s *Sandbox) fastCopy(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) (made bool, err error) {
	id := s.warmTarget()
	if id == "" {
		return false, nil
	}
	sent := &iocount.Writer{W: stdout}
	var out io.Writer
	if stdout != nil {
		out = sent
	}
	c, errb := agentCommand(args, stdin, out)
	code, err := s.execChannel(ctx, id, c, map[string]string{})
	switch {
	case err == nil && (code == agentapi.ExitUseEngine || code == 2) && sent.N > 0:
		// Only a hostile sandbox sends part of an archive and then hands
		// the copy back: the engine's would follow it in the stream.
		return true, fmt.Errorf("hsbx's agent handed the copy back after sending %d bytes of it", sent.N)
	case errors.Is(err, errNotReached), err == nil && (code == agentapi.ExitUseEngine || code == 2):
		return false, nil
	case errors.Is(err, ErrResourceExhausted) && sent.N == 0:
		// The agent could not start its copy (the sandbox is out of
		// processes): the engine's cp needs none in the sandbox.
		s.m.log.Debug("the agent could not start the copy; the engine's cp makes it", "error", err)
		return false, nil
	case err != nil:
		return true, err
	}
	return true, agentFailed(code, errb)
}

// agentCommand runs hsbx's agent binary itself (`/proc/self/exe ARGS...`)
// through the exec channel, its stderr kept for agentFailed.
func agentCommand(args []string, stdin io.Reader, stdout io.Writer) (Command, *proc.TailBuffer) {
	errb := &proc.TailBuffer{Max: 4 << 10}
	c := Command{Argv: append([]string{agentapi.AgentSelf}, args...), Stdin: stdin, Stdout: stdout, Stderr: errb}
	if stdin != nil {
		c.tap = newStdinTap(stdin) // viaAgent's second try gets it from the first byte
	}
	return c, errb
}

// agentFailed is a copy's error from the agent's exit status (nil for 0).
func agentFailed(code int, errb *proc.TailBuffer) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("hsbx's agent could not copy (exit %d): %s", code, strings.TrimSpace(string(errb.Bytes())))
}

func (s *Sandbox) copyError(p string, err error) error {
	if err != nil {
		return fmt.Errorf("copying %s in sandbox %s: %w", p, s.name, err)
	}
	return nil
}

// viaAgent runs hsbx's agent binary itself (`/proc/self/exe ARGS...`)
// through the exec channel of running sandbox id, for a copy the engine's
// cp cannot make; the CLI starts its holder and waits for it when none
// serves yet.
func (s *Sandbox) viaAgent(ctx context.Context, id string, args []string, stdin io.Reader, stdout io.Writer) error {
	c, errb := agentCommand(args, stdin, stdout)
	code, err := s.execChannel(ctx, id, c, map[string]string{})
	if errors.Is(err, errNotReached) && s.awaitHolder(ctx, id) {
		code, err = s.execChannel(ctx, id, c, map[string]string{})
	}
	switch {
	case errors.Is(err, errNotReached):
		return fmt.Errorf("%w: hsbx's agent copies there through the exec channel, which is %s", ErrMemoryPath, s.ChannelStatus(id))
	case err != nil:
		return err
	}
	return agentFailed(code, errb)
}

// copyTarget is the key's container as the engine reports it now.
func (s *Sandbox) copyTarget(ctx context.Context, create bool) (runtime.Container, error) {
	if id := s.warmTarget(); id != "" {
		cur, err := s.inspectOwn(ctx, id)
		if err != nil {
			return runtime.Container{}, fmt.Errorf("looking for sandbox %s: %w", s.name, err)
		}
		if cur != nil {
			return *cur, nil
		}
		s.forget(id)
	}
	if !s.ephemeral {
		c, found, err := s.probe(ctx)
		if err != nil || found {
			return c, err
		}
	}
	if !create {
		return runtime.Container{}, fmt.Errorf("%w: task %q of profile %q has none (%s makes it)", ErrNoSandbox, s.key.Task, s.key.Profile, s.remedy(RemedyUp))
	}
	res, err := s.Ensure(ctx)
	if err != nil {
		return runtime.Container{}, err
	}
	return runtime.Container{ID: res.ID, Name: res.Name, State: res.State}, nil
}

// sandboxPath makes a sandbox path absolute: a relative one is taken from
// the sandbox's working directory, where exec runs commands (the engines'
// cp would take it from /), keeping what cp reads from its spelling (a
// trailing "/" or "/.").
func (s *Sandbox) sandboxPath(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	cwd := strings.TrimSuffix(s.workDir(), "/")
	if p == "" {
		return cwd + "/"
	}
	return cwd + "/" + p
}

// workDir is the sandbox's working directory: where exec runs a command
// and what a relative sandbox path starts from.
func (s *Sandbox) workDir() string {
	if path.IsAbs(s.spec.Cwd) {
		return s.spec.Cwd
	}
	return "/"
}

// memoryMount reports the tmpfs mount p is under, if any: the hardening
// mounts, /workspace and /root when not persistent, and extra_args'.
func (s *Sandbox) memoryMount(p string) (string, bool) {
	clean := path.Clean(p)
	for _, m := range s.spec.MemoryMounts() {
		if clean == m || strings.HasPrefix(clean, m+"/") {
			return m, true
		}
	}
	return "", false
}
