package channel

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// Putting the agent in a sandbox: copied in with the engine's cp (or
// written from inside, under gVisor), under a name of its own, renamed
// into place on its first run.

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
