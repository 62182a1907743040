package kubectl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// kubectl exec: a command through a sh wrapper that sets its environment
// and directory, and the execs still live in a Pod.

// execScript runs a command for Exec: $1 says where its environment comes
// from (0: none; "m" and a value: only hsbx's command marker
// (runtime.ExecMarker), which is no secret; a number: that many bytes of
// stdin; a path: a file to read and delete), $2 is the working directory
// ("": the Pod's), the rest the command. The environment is shell
// assignments ending in
// HSBX_ENV_OK=1, so one that did not arrive whole is an error (126), not a
// command run without it. With an environment, the command starts from a
// fresh /bin/sh (an absolute path is always exec'd): a shell may run
// builtin applets (busybox's yes, echo...) in its own process, whose
// /proc/PID/environ is what it started with, and hsbx finds a command's
// processes by the marker there.
const execScript = `e=$1; w=$2; shift 2
case $e in
0) HSBX_ENV_OK=1 ;;
m*) export ` + runtime.ExecMarker + `="${e#m}"; HSBX_ENV_OK=1 ;;
/*) . "$e"; rm -f "$e" ;;
*) eval "$(dd bs=1 count="$e" 2>/dev/null)" ;;
esac
if [ "$HSBX_ENV_OK" != 1 ]; then echo "hsbx: the command's environment did not arrive (the image needs sh and dd)" >&2; exit 126; fi
unset HSBX_ENV_OK
if [ -n "$w" ]; then cd "$w" || exit 126; fi
[ "$e" = 0 ] || exec /bin/sh -c 'exec "$@"' hsbx-run "$@"
exec "$@"`

// envScript renders env as shell assignments for execScript.
func envScript(env map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString("export " + k + "='" + strings.ReplaceAll(env[k], "'", `'\''`) + "'\n")
	}
	b.WriteString("HSBX_ENV_OK=1\n")
	return b.Bytes()
}

// Exec implements runtime.Runtime with `kubectl exec` through a small sh
// wrapper (execScript), since kubectl exec has no -e and no -w: the
// working directory is an argument, env values travel on stdin ahead of
// the command's own input (or, with a terminal, in a file written by one
// more exec and deleted before the command starts) — never on a command
// line. The status is kubectl's exit status, which is the command's; the
// "command terminated with exit code N" line kubectl adds to stderr is
// dropped. ExecSpec.User is not applied (Lacks ExecUser): commands run as
// the Pod's user (run_as_host_user sets it in the Pod).
func (r *Runtime) Exec(ctx context.Context, s runtime.ExecSpec) (int, error) {
	if len(s.Cmd) == 0 {
		return -1, errors.New("exec: no command given")
	}
	_, name := splitID(s.ID)
	envSrc := "0"
	stdin := s.Stdin
	interactive := s.Interactive
	marker, markerOnly := s.Env[runtime.ExecMarker]
	markerOnly = markerOnly && len(s.Env) == 1
	switch {
	case markerOnly:
		// The marker alone (most commands) rides on the wrapper's argv:
		// no stdin stream to open, no file for a terminal.
		envSrc = "m" + marker
	case len(s.Env) > 0:
		block := envScript(s.Env)
		if s.TTY {
			path := "/tmp/.hsbx-env-" + randomHex()
			code, err := r.Exec(ctx, runtime.ExecSpec{ID: s.ID, Cmd: []string{"/bin/sh", "-c", `umask 077 && cat > "$1"`, "hsbx-env", path},
				Stdin: bytes.NewReader(block), Interactive: true, Timeout: r.timeout})
			if err != nil || code != 0 {
				return -1, fmt.Errorf("writing the command's environment into pod %s: exit %d: %w", name, code, errors.Join(err, runtime.ErrEngine))
			}
			envSrc = path
		} else {
			envSrc = strconv.Itoa(len(block))
			if stdin == nil || !interactive {
				stdin = bytes.NewReader(block)
			} else {
				stdin = io.MultiReader(bytes.NewReader(block), stdin)
			}
			interactive = true
		}
	}
	args := []string{"exec"}
	if interactive {
		args = append(args, "-i")
	}
	if s.TTY {
		args = append(args, "-t")
	}
	args = append(args, name, "-c", ContainerName, "--", "/bin/sh", "-c", execScript, "hsbx-exec", envSrc, s.WorkDir)
	args = append(args, s.Cmd...)
	argv := r.argv(args...)
	cmd := proc.Cmd{Argv: argv, Env: r.env, Stdout: s.Stdout, Timeout: s.Timeout}
	if interactive {
		cmd.Stdin = stdin
	}
	// Two holds: a first line that is kubectl's own error (the Pod is
	// gone, the server unreachable) until the status says whose it was,
	// and kubectl's closing "command terminated with exit code N".
	var tail *tailHold
	var first *enginecli.HoldWriter
	if s.Stderr != nil {
		tail = &tailHold{dst: s.Stderr}
		first = enginecli.NewHoldWriter(tail, kubectlLine)
		cmd.Stderr = first
	}
	finish := func(engineError bool, code int) (held []byte) {
		if first != nil {
			held = first.Finish(engineError)
			tail.finish(code)
		}
		return held
	}
	res, err := r.runner.Run(ctx, cmd)
	if err != nil {
		finish(false, -1)
		return -1, enginecli.RunError(argv, err)
	}
	code, kerr := ExecStatus(res.ExitCode, string(res.Stderr))
	held := finish(kerr != nil, res.ExitCode)
	if kerr != nil {
		return res.ExitCode, &runtime.EngineError{Kind: kerr, Argv: argv, ExitCode: res.ExitCode, Stderr: strings.TrimSpace(string(res.Stderr)), Held: held}
	}
	return code, nil
}

// liveScript prints the marker of every process in the Pod that carries
// one: the commands hsbx started, from any host.
const liveScript = `for d in /proc/[0-9]*; do tr '\0' '\n' < "$d/environ" 2>/dev/null | grep "^$1=" ; done | sort -u`

// LiveExecs implements runtime.Runtime. kubectl cannot list exec
// sessions, so the Pod is asked (one exec) which processes carry hsbx's
// command marker (runtime.ExecMarker); each distinct marker is a live
// command. Commands started by plain `kubectl exec` carry none and are
// not seen.
func (r *Runtime) LiveExecs(ctx context.Context, c runtime.Container) ([]string, error) {
	if c.State != runtime.StateRunning {
		return nil, nil
	}
	var out, errb bytes.Buffer
	code, err := r.Exec(ctx, runtime.ExecSpec{ID: c.ID, Cmd: []string{"/bin/sh", "-c", liveScript, "hsbx-live", runtime.ExecMarker},
		Stdout: &out, Stderr: &errb, Timeout: r.timeout})
	if err != nil {
		return nil, err
	}
	if code != 0 && code != 1 { // grep finding nothing anywhere is 1
		return nil, fmt.Errorf("asking pod %s for its commands: exit %d: %s", c.Name, code, strings.TrimSpace(errb.String()))
	}
	var live []string
	for line := range strings.Lines(out.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), runtime.ExecMarker+"="); ok && v != "" {
			live = append(live, v)
		}
	}
	return live, nil
}
