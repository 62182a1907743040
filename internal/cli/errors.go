package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// How the CLI ends: an error's exit code and words, the hints it gives,
// and the remedies in its own terms.

// usageHint follows every usage error.
const usageHint = "run 'hsbx --help' (or 'hsbx COMMAND --help') for usage; nothing was done"

// usageError is a bad flag value a command found (exit 2), with its fix.
type usageError struct {
	err  error
	hint string
}

func (e *usageError) Error() string { return e.err.Error() }

func (e *usageError) Unwrap() error { return e.err }

// Hint says what to give instead.
func (e *usageError) Hint() string { return e.hint }

// exitError carries an exit code chosen by a command.
type exitError struct {
	code int
	err  error // nil when the command already said everything
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// SignalError is the context cause main sets when a signal arrives.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string { return "received " + e.Signal.String() }

// report prints err with a hint (as an ErrorReport under --json) and
// returns the exit code it maps to.
func report(ctx context.Context, w io.Writer, err error, asJSON bool) int {
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return ee.code
	}
	code, hint := exitCode(ctx, err), cliHint(err)
	kind := errorKind(ctx, err)
	if hint == "" {
		hint = kindHints[kind]
	}
	if asJSON {
		reportJSON(w, kind, err.Error(), hint, code)
		return code
	}
	fmt.Fprintf(w, "hsbx: %s\n", safeText(err.Error()))
	if hint != "" {
		fmt.Fprintf(w, "  hint: %s\n", hint)
	}
	return code
}

func exitCode(ctx context.Context, err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	_, code := classify(ctx, err)
	return code
}

// cliHint is the fix printed for err: the hsbx command's own words where
// the Go package's error names a remedy in Go terms (Sandbox.Recreate),
// else the error's hint (runtime.Hint).
func cliHint(err error) string {
	var de *sandbox.DriftError
	var be *sandbox.BusyError
	var ne *sandbox.NetworkModeError
	var ie *sandbox.IsolationError
	switch {
	case errors.As(err, &de):
		return "`hsbx up --recreate` replaces it with one made from these settings (/workspace and /root are kept when persistent), `hsbx down` removes it, or set on_drift = warn to use it as it is"
	case errors.As(err, &be):
		return "try again when the command has ended (`hsbx ls` shows the sandbox), or `hsbx down` removes it whatever runs in it"
	case errors.As(err, &ne):
		return fmt.Sprintf("`hsbx up --recreate --task %s` replaces it with one whose network is %s (`hsbx down --task %s` removes it), or set network to what it has", ne.Task, networkWanted(ne), ne.Task)
	case errors.As(err, &ie):
		return fmt.Sprintf("%s replaces it with one under %s (%s removes it), or set oci_runtime to what it runs under", cliRemedy(sandbox.RemedyRecreate, sandbox.Key{Task: ie.Task}), ie.Want, cliRemedy(sandbox.RemedyDown, sandbox.Key{Task: ie.Task}))
	case errors.Is(err, sandbox.ErrResourceExhausted):
		return "each session is a shell in the sandbox: `hsbx session close NAME` those no longer needed, end what runs there, or raise pids_limit or memory"
	case errors.Is(err, sandbox.ErrNoShell):
		return "sessions need bash or sh in the image; `hsbx exec` runs an argv without a shell"
	}
	return runtime.Hint(err)
}

// kindHints are the hints of errors that name no fix of their own, by
// their --json kind: every error has one.
var kindHints = map[string]string{
	"usage":                usageHint,
	"no_session":           "`hsbx session ls` lists the sandbox's sessions; a run makes one",
	"no_sandbox":           "`hsbx up` makes the task's sandbox (`hsbx ls` lists them)",
	"no_such_path":         "check the path (`hsbx exec -- ls DIR` lists a directory in the sandbox)",
	"sandbox_exists":       "`hsbx down` removes it first, or use another --task",
	"no_such_user":         "name a user the sandbox's /etc/passwd lists (`hsbx exec -- cat /etc/passwd`), or a numeric UID[:GID]",
	"not_found":            "check the path (`hsbx file ls DIR` lists a directory of the sandbox)",
	"is_directory":         "name a file (`hsbx file ls DIR` lists the directory)",
	"not_directory":        "name a directory: the path, or one on its way, is a file",
	"permission_denied":    "the sandbox's user may not: do it as another user (-u root), or change the file's mode",
	"file_too_large":       "raise the bound (copy_max_size, HSBX_COPY_MAX_SIZE), or use `hsbx cp`, which streams",
	"not_empty":            "`hsbx file rm -r` removes a directory with everything in it",
	"copy_too_large":       "raise copy_max_size (HSBX_COPY_MAX_SIZE), or copy less",
	"session_failed":       "run it again (a new session server starts); what failed is named above",
	"snapshot_unsupported": "snapshots need docker or podman (engine = docker, or podman)",
	"no_snapshot":          "`hsbx snapshot ls` lists the profile's snapshots",
	"snapshot_exists":      "choose another name, or remove it first (`hsbx snapshot rm NAME`)",
	"snapshot_too_large":   "raise snapshot_max_size (HSBX_SNAPSHOT_MAX_SIZE), or remove files from the sandbox first",
	"snapshot_in_use":      "remove the sandboxes made from it first (`hsbx down --task TASK`), and snapshots taken of them",
	"no_space":             "free space in the sandbox (its disk quota, or the engine's disk), then try again",
	"error":                "the message says what failed; --log-level debug shows each engine call hsbx made",
	"internal":             "this is hsbx's own failure: please report it",
}

// cliRemedy names a remedy in the library's warnings and errors as the
// hsbx command that does it, with the key's --task and --profile when
// they are not the defaults.
func cliRemedy(r sandbox.Remedy, k sandbox.Key) string {
	cmd := map[sandbox.Remedy]string{sandbox.RemedyRecreate: "hsbx up --recreate", sandbox.RemedyDown: "hsbx down", sandbox.RemedyUp: "hsbx up"}[r]
	if k.Task != "" && k.Task != "default" {
		cmd += " --task " + k.Task
	}
	if k.Profile != "" && k.Profile != "default" {
		cmd += " --profile " + k.Profile
	}
	return "`" + cmd + "`"
}

// networkWanted is the network a NetworkModeError's sandbox was refused
// for.
func networkWanted(ne *sandbox.NetworkModeError) string {
	if ne.Want == "" {
		return "off"
	}
	return ne.Want
}
