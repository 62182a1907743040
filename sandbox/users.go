package sandbox

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// A command's user and environment, checked before it runs: the forms a
// user may take, the user the engine cannot switch to (gVisor), the names
// the engine client reads.

// execEnv checks a command's environment: the marker name is reserved.
// steer is the first name (sorted) whose value would steer the engine
// client if it travelled in the client's environment, as values do on the
// plain path ("" when none): such a command needs the exec channel.
func (m *Manager) execEnv(env map[string]string) (out map[string]string, steer string, err error) {
	out = maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if !validEnvName(k) {
			return nil, "", &SpecError{Setting: "env", Msg: fmt.Sprintf("%q is not a valid variable name", k)}
		}
		if k == ExecIDVar {
			return nil, "", &SpecError{Setting: "env", Msg: ExecIDVar + " is reserved: hsbx marks each command's processes with it to stop them on a timeout or signal"}
		}
		if steer == "" && m.checkClientVar(k, out[k]) != nil {
			steer = k
		}
	}
	return out, steer, nil
}

// ErrNoSuchUser is a command asked to run as a user (or group) the
// sandbox does not have, or one hsbx cannot switch to there.
var ErrNoSuchUser = runtime.ErrNoSuchUser

// validUser checks Command.User's spelling (the sandbox decides whether
// there is such a user).
func validUser(u string) error {
	if u == "" {
		return nil
	}
	name, group, two := strings.Cut(u, ":")
	bad := name == "" || two && group == "" || strings.Contains(group, ":") || len(u) > 256
	for _, r := range u {
		bad = bad || r <= ' ' || r == 0x7f
	}
	if bad {
		return &SpecError{Setting: "user", Msg: fmt.Sprintf("%q is not a user: give NAME, UID, NAME:GROUP or UID:GID", u)}
	}
	return nil
}

// userError refuses a command as another user that only hsbx's agent
// could run (the engine's exec has no --user), when it cannot.
func (s *Sandbox) userError(user, why string) error {
	return &SpecError{Setting: "user", Msg: fmt.Sprintf("running a command as %q here takes hsbx's agent (%s), and %s",
		user, s.engineUserLacks(), why)}
}

// engineUserLacks says why the engine's own exec --user cannot run a
// command as another user here ("": it can): the runtime has none
// (kubectl), or the sandbox's OCI runtime does not confine what it starts
// that way — under gVisor a process `exec --user` starts ignores the
// files' permissions (it wrote root's 0444 files and /etc as a user with
// no capabilities; measured with Debian's runsc on docker and podman),
// where one the agent switches to is held to them.
func (s *Sandbox) engineUserLacks() string {
	if why := s.rt().Capabilities().Lacks[runtime.ExecUser]; why != "" {
		return why
	}
	if isGVisor(s.spec.OCIRuntime) {
		return "under gVisor the engine's exec --user does not hold a process to the user's file permissions"
	}
	return ""
}

// steerError refuses a command whose environment names a variable the
// engine client reads, when the exec channel cannot carry it.
func (s *Sandbox) steerError(name, why string) error {
	return &SpecError{Setting: "env", Msg: fmt.Sprintf("%s is read by the engine client itself: hsbx gives it to a command only through the exec channel, and %s; set it in the command (-- env %s=... CMD)", name, why, name)}
}
