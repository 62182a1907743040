package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// The agent's other modes, each one plain exec of the agent binary: kill-
// marked, unreachable, trust, and any mode a caller runs (RunAgent).

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
