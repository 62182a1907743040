package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// OCIRuntimeError says a sandbox could not be made under the OCI runtime
// asked for (Spec.OCIRuntime): the engine has none of that name (it
// matches runtime.ErrNoOCIRuntime; nothing was made), or the runtime
// failed to start the sandbox (Err; the half-made container was removed).
type OCIRuntimeError struct {
	Runtime string
	Dialect runtime.Dialect
	Have    []string // the engine's runtimes, when it lists them
	Err     error
}

func (e *OCIRuntimeError) Error() string {
	if errors.Is(e.Err, runtime.ErrNoOCIRuntime) {
		have := ""
		if len(e.Have) > 0 {
			have = " (it has: " + strings.Join(e.Have, ", ") + ")"
		}
		if e.Dialect == runtime.Kubectl {
			return fmt.Sprintf("oci_runtime: the cluster has no RuntimeClass %q%s", e.Runtime, have)
		}
		return fmt.Sprintf("oci_runtime: %s has no OCI runtime %q%s", e.Dialect, e.Runtime, have)
	}
	return fmt.Sprintf("the sandbox could not start under OCI runtime %q: %v", e.Runtime, e.Err)
}

func (e *OCIRuntimeError) Unwrap() error { return e.Err }

// Hint says what to do, in the engine's terms.
func (e *OCIRuntimeError) Hint() string {
	if !errors.Is(e.Err, runtime.ErrNoOCIRuntime) {
		switch msg := e.Err.Error(); {
		case strings.Contains(msg, "root network namespace"):
			return "this runsc misreads the sandbox's network namespace on this kernel (gVisor before 2023 on Linux 6.x): register it with the runtime argument --network=host, which uses the namespace the engine made, or --network=none (docs/containment.md)"
		case strings.Contains(msg, "cannot set up cgroup") && e.Dialect == runtime.Podman:
			return "rootless, gVisor cannot make cgroups on a cgroups v1 host: run runsc with --ignore-cgroups (a wrapper script given as oci_runtime's path; docs/containment.md), or use a rootful engine"
		}
		return "the engine's message above is the runtime's; `hsbx doctor` lists the engine's runtimes, and oci_runtime = \"\" uses its default"
	}
	switch e.Dialect {
	case runtime.Docker:
		return "register it with dockerd (daemon.json \"runtimes\": {\"" + path.Base(e.Runtime) + "\": {\"path\": \"/usr/bin/" + path.Base(e.Runtime) + "\"}}, then reload dockerd with SIGHUP) or pick one it has (`hsbx doctor` lists them)"
	case runtime.Podman:
		return "give the runtime's absolute path (oci_runtime = \"/usr/bin/runsc\") or name one in containers.conf's [engine.runtimes]"
	case runtime.Kubectl:
		return "name a RuntimeClass of the cluster (`kubectl get runtimeclasses`), or have its administrator create one whose handler the nodes' container runtime has"
	}
	return "pick a runtime the engine has, or set oci_runtime = \"\""
}

// checkOCIRuntime refuses, before anything is made, a runtime the engine
// says it does not have. An engine that cannot list all it accepts
// (podman) judges the name itself when it creates, so it is not asked. A
// name among those info named (known, cached with the host's facts)
// costs no call; any other is asked about afresh (it may have been
// registered since).
func (s *Sandbox) checkOCIRuntime(ctx context.Context, name string, known runtime.OCIRuntimes) error {
	if name == "" || !s.rt().Capabilities().ListsOCIRuntimes || known.Has(name) {
		return nil
	}
	have, err := s.rt().OCIRuntimes(ctx)
	if err != nil {
		return fmt.Errorf("asking the engine for its OCI runtimes (oci_runtime = %q): %w", name, err)
	}
	if have.Complete && !have.Has(name) {
		return &OCIRuntimeError{Runtime: name, Dialect: s.rt().Dialect(), Have: have.Names, Err: runtime.ErrNoOCIRuntime}
	}
	return nil
}

// IsolationError says oci_runtime asks for a runtime but the key's
// existing sandbox runs under another (made before the setting, or by a
// tool that ignored it): it is not used, since what runs in it would have
// less isolation than asked for, and hsbx does not remove it (it may hold
// work).
type IsolationError struct {
	Name, ID string
	Want     string // oci_runtime
	Has      string // the sandbox's runtime ("" the engine's default)
	Task     string
}

func (e *IsolationError) Error() string {
	has := e.Has
	if has == "" {
		has = "the engine's default"
	}
	return fmt.Sprintf("oci_runtime: %q is asked for, but the existing sandbox %s (%.12s) runs under %s", e.Want, e.Name, e.ID, has)
}

// Unwrap makes it ErrIsolation.
func (e *IsolationError) Unwrap() error { return ErrIsolation }

// Hint says how to go on, in the Go package's terms (the hsbx command
// gives its own).
func (e *IsolationError) Hint() string {
	return "Sandbox.Recreate replaces it with one under the runtime asked for (Sandbox.Down removes it)"
}

// ErrIsolation is an existing sandbox with less isolation than asked for
// (*IsolationError).
var ErrIsolation = errors.New("the sandbox runs under another OCI runtime than asked for")

// checkIsolation fails closed when oci_runtime names a runtime and c (as
// inspected: every engine names the runtime there) runs under another:
// never reuse a sandbox with weaker isolation than asked for, whoever
// made it.
func (s *Sandbox) checkIsolation(c runtime.Container) error {
	want := s.spec.OCIRuntime
	if want == "" || sameRuntime(want, c.OCIRuntime) {
		return nil
	}
	return &IsolationError{Name: c.Name, ID: c.ID, Want: want, Has: c.OCIRuntime, Task: s.key.Task}
}

// sameRuntime says two names of OCI runtimes are the same runtime: equal,
// or one a path whose base is the other (podman records the path given).
func sameRuntime(a, b string) bool {
	return a == b || path.IsAbs(a) != path.IsAbs(b) && path.Base(a) == path.Base(b)
}

// isGVisor says whether runtime name (oci_runtime) is gVisor's runsc (a
// name, a path, or a wrapper script named so).
func isGVisor(name string) bool { return strings.Contains(path.Base(name), "runsc") }

// gvisorTasks is how many tasks of the host a process of a gVisor
// sandbox costs, at most as measured: its ptrace platform gives each of
// the sandbox's address spaces a stub process and each of its threads a
// thread of the host, all in the sandbox's cgroup (200 sessions' shells:
// 1,704 host tasks for 208 processes in the sandbox, 8.2 each, with
// podman 4.3 and Debian's runsc of 2022-12).
const gvisorTasks = 10

// enginePids is the pids limit the engine is given for pids_limit: the
// same, but under gVisor, whose engine counts the runtime's own tasks on
// the host, gvisorTasks times it. With 256 given as is, a sandbox died
// (this runsc panics when the host refuses it a thread) at its 21st
// session; so bounded, it holds about pids_limit processes.
func (s Spec) enginePids() int64 {
	if isGVisor(s.OCIRuntime) {
		return s.PidsLimit * gvisorTasks
	}
	return s.PidsLimit
}

// kernelOfItsOwn says whether runtime name (oci_runtime, or the one the
// engine reported) may give the sandbox a view of its files of its own:
// anything but the runtimes that run on the host's kernel (runc, crun,
// youki). gVisor's runsc caches the root file system and keeps tmpfs in
// its own memory, so what the engine's cp writes from the host side may
// never show inside; a VM's may lag. Under such a runtime hsbx copies
// through its agent, inside the sandbox.
func kernelOfItsOwn(name string) bool {
	switch path.Base(name) {
	case "", ".", "/", "runc", "crun", "youki", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux":
		return false
	}
	return true
}
