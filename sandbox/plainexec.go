package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/runtime"
)

// The plain path: one engine exec of a command, watched for a hung engine,
// and the kill of what a command left running (by its marker).

// livenessDelay is how long a command may stay silent before hsbx checks,
// once, that the engine still answers (a hung engine otherwise hangs exec
// forever; a long silent command is fine once the engine has answered).
// Long enough that execs queued behind a busy engine do not each pay for a
// check (16 concurrent execs on podman with 2 cores take up to ~6 s each).
const livenessDelay = 10 * time.Second

// engineHungError is the cause of an exec stopped because the engine did not
// answer the liveness check.
type engineHungError struct{ err error }

func (e *engineHungError) Error() string {
	return fmt.Sprintf("the engine stopped answering while the command was starting: %v", e.err)
}

func (e *engineHungError) Unwrap() error { return e.err }

func (s *Sandbox) execOnce(ctx context.Context, target string, c Command, env map[string]string) (int, error) {
	defer s.markInUse()()
	token := execToken()
	env = maps.Clone(env)
	env[ExecIDVar] = token // the marker always wins
	execCtx, cancel, end := commandContext(ctx, c)
	defer end()
	var alive atomic.Bool // the engine has shown life (output arrived)
	stdout, stderr := watch(c.Stdout, "stdout", c.TTY, &alive, cancel), watch(c.Stderr, "stderr", c.TTY, &alive, cancel)
	spec := runtime.ExecSpec{
		ID: target, Cmd: c.Argv, WorkDir: c.WorkDir, Env: env,
		Interactive: c.Interactive || c.Stdin != nil, TTY: c.TTY, Stdin: c.Stdin,
		Stdout: stdout, Stderr: stderr,
	}
	if st := c.stats; st != nil {
		defer func() { st.plain(c, stdout, stderr) }()
	}
	if s.spec.RunAsHostUser {
		spec.User = fmt.Sprintf("%d:%d", s.m.c.UID, s.m.c.GID)
	}
	if c.User != "" {
		spec.User = c.User
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.checkEngine(execCtx, target, &alive, cancel) }()
	code, err := s.rt().Exec(execCtx, spec)
	interrupted, cause := execCtx.Err() != nil, context.Cause(execCtx)
	cancel(nil) // ends the liveness check
	wg.Wait()
	var hung *engineHungError
	var ended *channel.SandboxEndedError
	switch {
	case !interrupted:
		return code, err
	case errors.As(cause, &hung):
		return -1, hung
	case errors.As(cause, &ended):
		return -1, fmt.Errorf("%w: sandbox %s was stopped or removed while the command ran (down, stop, another process, or it died): %v; it may have run part-way",
			runtime.ErrEngine, s.name, ended)
	}
	// The client was stopped; the command's processes live on in the
	// sandbox (the engine does not stop them). Kill them by their marker,
	// within one engine call's time.
	ie := &InterruptedError{Cause: cause}
	killCtx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), s.rt().CallTimeout()+time.Second)
	defer kcancel()
	ie.Killed, ie.KillErr = s.killMarked(killCtx, target, token)
	return -1, ie
}

// checkEngine waits livenessDelay; if the command has shown no output by
// then, it asks the engine once (an inspect, bounded by the engine
// timeout). An engine that does not answer stops the exec. From then on
// it watches the sandbox (channel.WatchSandbox): one that stopped or went
// under the command (a crash, an OOM kill, its runtime killed — under
// gVisor the engine then never ends the exec) stops the exec, when the
// engine has not ended it itself.
func (s *Sandbox) checkEngine(ctx context.Context, target string, alive *atomic.Bool, stop context.CancelCauseFunc) {
	delay := s.m.c.LivenessDelay
	if delay == 0 {
		delay = livenessDelay
	}
	if delay < 0 || sleepCtx(ctx, delay) != nil {
		return
	}
	hung := func(err error) error {
		if !alive.Load() && (errors.Is(err, runtime.ErrTimeout) || errors.Is(err, runtime.ErrUnreachable)) {
			return &engineHungError{err: err}
		}
		return nil
	}
	if err := channel.WatchSandbox(ctx, s.rt(), target, hung); err != nil {
		stop(err)
	}
}

// watch wraps a command's output writer: the first write marks the engine
// alive, and a failed write stops the command (cause *WriterError). A
// terminal is handed to the client as it is (it needs the real device).
func watch(w io.Writer, stream string, tty bool, alive *atomic.Bool, stop context.CancelCauseFunc) io.Writer {
	if w == nil || tty {
		return w
	}
	return &watchWriter{w: w, stream: stream, alive: alive, stop: stop}
}

type watchWriter struct {
	w      io.Writer
	stream string
	alive  *atomic.Bool
	stop   context.CancelCauseFunc
	failed atomic.Bool
	n      atomic.Int64 // bytes written (the record of what ran)
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.alive.Store(true)
	if w.failed.Load() {
		return len(p), nil // already stopping: drop the rest
	}
	n, err := w.w.Write(p)
	w.n.Add(int64(n))
	if err != nil {
		w.failed.Store(true)
		w.stop(&WriterError{Stream: w.stream, Err: err})
		return len(p), nil // let the client be stopped by the cancel, not by a pipe
	}
	return n, nil
}

// killScript kills every process whose environment holds HSBX_EXEC_ID=$1
// (with $1 empty: any HSBX_EXEC_ID, every command hsbx started). It needs
// /bin/sh, tr and grep in the image (busybox and every distro image have
// them).
const killScript = `t="` + ExecIDVar + `=$1"; n=0
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | if [ -n "$1" ]; then grep -qxF "$t"; else grep -q "^$t"; fi; then kill -9 "$p" 2>/dev/null && n=$((n+1)); fi
done
echo "$n"`

// EndOrphanCommands kills every process that carries hsbx's command
// marker in the running container id — every command an hsbx process
// started there — and returns how many. It is for a per-process sandbox
// whose creator is gone: only its creator ran commands in it, so what
// carries the marker is that dead process's leftovers, not anyone's work
// (an exec session without the marker is not touched). It needs sh, tr
// and grep in the image.
func EndOrphanCommands(ctx context.Context, rt runtime.Runtime, id string) (int, error) {
	var out, errb strings.Builder
	code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", killScript, "hsbx-kill", ""}, Stdout: &out, Stderr: &errb,
		Timeout: rt.CallTimeout()})
	if err != nil {
		return 0, err
	}
	var n int
	if _, serr := fmt.Sscan(out.String(), &n); code != 0 || serr != nil {
		return 0, fmt.Errorf("the kill command exited %d in the sandbox (it needs sh, tr and grep): %s", code, clip(out.String()+" "+errb.String(), 200))
	}
	return n, nil
}

func (s *Sandbox) killMarked(ctx context.Context, target, token string) (int, error) {
	var out, errb strings.Builder
	spec := runtime.ExecSpec{ID: target, Cmd: []string{"sh", "-c", killScript, "hsbx-kill", token}, Stdout: &out, Stderr: &errb,
		Timeout: s.rt().CallTimeout()}
	if s.spec.RunAsHostUser {
		spec.User = fmt.Sprintf("%d:%d", s.m.c.UID, s.m.c.GID)
	}
	code, err := s.rt().Exec(ctx, spec)
	if err == nil && code == 0 {
		var n int
		if _, err := fmt.Sscan(out.String(), &n); err != nil {
			return 0, fmt.Errorf("the kill command printed %q, not a count: %w", clip(out.String(), 100), err)
		}
		return n, nil
	}
	if err != nil && (errors.Is(err, runtime.ErrNotRunning) || errors.Is(err, runtime.ErrNotFound) ||
		errors.Is(err, runtime.ErrUnreachable) || errors.Is(err, runtime.ErrTimeout)) {
		return 0, err
	}
	// No shell (or no tr, grep) in the image: hsbx's agent does the same
	// with one plain exec of its own binary, when the channel is on.
	why := fmt.Sprintf("the kill command exited %d in the sandbox (it needs sh, tr and grep): %s", code, clip(errb.String(), 200))
	if err != nil {
		why = err.Error()
	}
	if !s.m.c.Channel {
		return 0, fmt.Errorf("%s; with exec_channel on, hsbx's agent would stop it without a shell", why)
	}
	n, aerr := channel.KillMarked(ctx, s.agent(ctx, target, spec.User), ExecIDVar+"="+token)
	if aerr != nil {
		return 0, fmt.Errorf("%s; hsbx's agent could not stop it either: %w", why, aerr)
	}
	return n, nil
}
