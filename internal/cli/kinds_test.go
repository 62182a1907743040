package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Each error is its --json kind and exit code, and every one has a hint:
// hsbx's own failures among them (a session's server or shell, processes
// run out), which a program must tell from a script's status.
func TestErrorKindsAndHints(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string
		code int
	}{
		{&sandbox.SessionError{Session: "s", Msg: "no new session: ...", Exhausted: true}, "resource_exhausted", ExitEngine},
		{fmt.Errorf("%w: exec: \"true\": fork/exec: resource temporarily unavailable", sandbox.ErrResourceExhausted), "resource_exhausted", ExitEngine},
		{&sandbox.SessionError{Session: "s", Msg: "the image has no shell", NoShell: true}, "no_shell", 127},
		{&sandbox.SessionError{Session: "s", Msg: "the session server went away", Lost: true}, "session_failed", ExitEngine},
		{fmt.Errorf("%w: s", sandbox.ErrNoSession), "no_session", ExitError},
		{&usageError{err: errors.New("--task: empty")}, "usage", ExitUsage},
		{fmt.Errorf("%w: x", sandbox.ErrNoSandbox), "no_sandbox", ExitError},
		{fmt.Errorf("%w: x", runtime.ErrUnreachable), "engine_unreachable", ExitEngine},
		{&sandbox.OCIRuntimeError{Runtime: "runsc", Dialect: runtime.Docker, Err: runtime.ErrNoOCIRuntime}, "no_oci_runtime", ExitUsage},
		{&sandbox.OCIRuntimeError{Runtime: "runsc", Dialect: runtime.Podman, Err: fmt.Errorf("%w: cannot run with network enabled in root network namespace", runtime.ErrEngine)}, "engine", ExitEngine},
		{&sandbox.IsolationError{Name: "n", ID: "i", Want: "runsc", Task: "t"}, "isolation", ExitError},
		{fmt.Errorf("%w: k", sandbox.ErrSnapshotUnsupported), "snapshot_unsupported", ExitUsage},
		{fmt.Errorf("%w: n", sandbox.ErrNoSnapshot), "no_snapshot", ExitError},
		{fmt.Errorf("%w: n", sandbox.ErrSnapshotExists), "snapshot_exists", ExitError},
		{fmt.Errorf("%w: n", sandbox.ErrSnapshotTooLarge), "snapshot_too_large", ExitError},
		{fmt.Errorf("%w: n", sandbox.ErrSnapshotInUse), "snapshot_in_use", ExitError},
		{fmt.Errorf("%w: n", sandbox.ErrNoSpace), "no_space", ExitError},
		{errors.New("something else"), "error", ExitError},
	} {
		kind, code := classify(context.Background(), tc.err)
		if kind != tc.kind || code != tc.code {
			t.Errorf("%v: kind %q exit %d, want %q %d", tc.err, kind, code, tc.kind, tc.code)
		}
		if h := cliHint(tc.err); h == "" && kindHints[kind] == "" {
			t.Errorf("%v (%s) has no hint", tc.err, kind)
		}
	}
}
