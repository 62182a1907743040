package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/sandbox"
)

// An agent framework keeps one sandbox per task and runs every shell
// command of the session in it. (In this package's tests, the engine found
// on PATH is the fake docker.)
func Example() {
	ctx := context.Background()
	rt, _, err := detect.Open(ctx, detect.Options{
		Engine: enginecli.Options{Env: os.Environ()},
	})
	if err != nil {
		fmt.Println("no engine:", err)
		return
	}
	stateDir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(stateDir)
	m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir, Environ: os.Environ()})

	spec := sandbox.DefaultSpec()
	spec.Image = "busybox"
	sb := m.Sandbox(sandbox.Key{Profile: "default", Task: "example"}, spec)

	res, err := sb.Ensure(ctx) // created, or reused from an earlier process
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Action, res.Name)

	code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "hello from the sandbox"}, Stdout: os.Stdout})
	fmt.Println("exit", code, err)

	_ = sb.Close(ctx)          // persist mode: the sandbox keeps running for the next process
	removed, _ := sb.Down(ctx) // explicit teardown
	fmt.Println("removed", len(removed.Containers))
	// Output:
	// created hsbx-default-example-0aa313e583e4
	// hello from the sandbox
	// exit 0 <nil>
	// removed 1
}

// The os/exec-shaped helpers: output as bytes, and stdout as a stream of
// lines (leaving the loop early stops the command in the sandbox).
func ExampleSandbox_Output() {
	ctx := context.Background()
	rt, _, err := detect.Open(ctx, detect.Options{})
	if err != nil {
		fmt.Println("no engine:", err)
		return
	}
	stateDir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(stateDir)
	spec := sandbox.DefaultSpec()
	spec.Image = "busybox"
	sb := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir}).Sandbox(sandbox.Key{Profile: "default", Task: "example-output"}, spec)
	defer sb.Down(ctx)

	out, err := sb.Output(ctx, "echo", "captured")
	fmt.Printf("%q %v\n", out, err)

	_, err = sb.Output(ctx, "sh", "-c", "echo oops >&2; exit 3")
	var ee *sandbox.ExitError
	fmt.Println(errors.As(err, &ee), ee.Code, strings.TrimSpace(string(ee.Stderr)))

	for line, err := range sb.Lines(ctx, sandbox.Command{Argv: []string{"yes", "line"}}) {
		fmt.Println(line, err)
		break // stops `yes` in the sandbox
	}
	// Output:
	// "captured\n" <nil>
	// true 3 oops
	// line <nil>
}

// A session keeps a shell's state from one script to the next: what an
// agent framework's "run this shell command" tool wants.
func ExampleSession() {
	ctx := context.Background()
	rt, _, err := detect.Open(ctx, detect.Options{})
	if err != nil {
		fmt.Println("no engine:", err)
		return
	}
	stateDir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(stateDir)
	spec := sandbox.DefaultSpec()
	spec.Image = "busybox"
	sb := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir}).Sandbox(sandbox.Key{Profile: "default", Task: "example-session"}, spec)
	defer sb.Down(ctx)

	sh := sb.Session("agent-1", "")
	res, err := sh.Run(ctx, `mkdir -p /tmp/proj && cd /tmp/proj && export STAGE=test`, sandbox.Script{})
	fmt.Println(res.Code, res.New, err)

	var out strings.Builder
	res, err = sh.Run(ctx, `echo "$(pwd) $STAGE"; exit 3`, sandbox.Script{Stdout: &out})
	fmt.Print(out.String())
	fmt.Println(res.Code, res.Ended != "", err)

	res, _ = sh.Run(ctx, `true`, sandbox.Script{})
	fmt.Println(res.New, res.Reset)
	_ = sh.Close(ctx)
	// Output:
	// 0 true <nil>
	// /tmp/proj test
	// 3 true <nil>
	// true its shell exited (status 3)
}

// A sandbox under gVisor (Spec.OCIRuntime): on an engine that has no such
// runtime, nothing is made and the error says what it has. (The fake
// docker on this package's PATH has only runc.)
func ExampleSpec_ociRuntime() {
	ctx := context.Background()
	rt, _, err := detect.Open(ctx, detect.Options{Engine: enginecli.Options{Env: os.Environ()}})
	if err != nil {
		fmt.Println("no engine:", err)
		return
	}
	stateDir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(stateDir)
	m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir, Environ: os.Environ()})

	spec := sandbox.DefaultSpec()
	spec.Image = "busybox"
	spec.OCIRuntime = "runsc" // gVisor: a kernel of its own between the sandbox and the host
	_, err = m.Sandbox(sandbox.Key{Profile: "default", Task: "gvisor"}, spec).Ensure(ctx)
	var oe *sandbox.OCIRuntimeError
	if errors.As(err, &oe) && errors.Is(err, runtime.ErrNoOCIRuntime) {
		fmt.Println(oe)
	}
	// Output:
	// oci_runtime: docker has no OCI runtime "runsc" (it has: io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc)
}

// A sandbox whose network is `allow`: no network interface but loopback,
// and hsbx's relay (the proxy variables point at it) to what the list
// names, applied on the host. Sandbox.EgressLog is where each decision is
// written. A list entry that is not a name, address or CIDR is refused
// before anything is made.
func ExampleEgress() {
	spec := sandbox.DefaultSpec()
	spec.Network = false
	spec.Egress = &sandbox.Egress{Allow: []string{"*.pypi.org:443", "files.pythonhosted.org:443", "10.1.2.0/24"}}
	fmt.Println(spec.Validate())
	spec.Egress.Allow = append(spec.Egress.Allow, "pypi.*")
	fmt.Println(spec.Validate())
	// Output:
	// <nil>
	// egress_allow: "pypi.*": a wildcard is only a leading "*."; want host names (*.example.com), addresses or CIDRs, each with an optional :PORT
}

// A brokered secret: the sandbox sees a placeholder under OPENAI_API_KEY,
// and the relay puts the value (here from a function, called per
// request) into HTTPS requests to api.openai.com only.
func ExampleSecret() {
	spec := sandbox.DefaultSpec()
	spec.Network = false
	spec.Egress = &sandbox.Egress{Allow: []string{"pypi.org"}, Secrets: []sandbox.Secret{{
		Name:  "OPENAI_API_KEY",
		Hosts: []string{"api.openai.com"},
		Value: func() (string, error) { return os.Getenv("OPENAI_API_KEY"), nil },
	}}}
	fmt.Println(spec.Validate())
	spec.Egress.Secrets[0].Env = "OPENAI_API_KEY" // a second source
	fmt.Println(spec.Validate())
	// Output:
	// <nil>
	// secrets: secret OPENAI_API_KEY: give exactly one of env, file (or Value in Go) for where its value is on the host
}

// A snapshot of a sandbox's files, a rollback to it, and forks from it.
func ExampleSnapshots() {
	ctx := context.Background()
	rt, _, err := detect.Open(ctx, detect.Options{})
	if err != nil {
		fmt.Println("no engine:", err)
		return
	}
	stateDir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(stateDir)
	spec := sandbox.DefaultSpec()
	spec.Image = "busybox"
	m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir})
	sb := m.Sandbox(sandbox.Key{Profile: "example", Task: "attempt"}, spec)
	if _, err := sb.Ensure(ctx); err != nil {
		fmt.Println(err)
		return
	}
	snap, err := sb.Snapshots().Take(ctx, "before-refactor") // files, not processes
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(snap.Name, snap.Task)

	// ... the attempt goes wrong: back to the snapshot, in place.
	if _, err := sb.Snapshots().Rollback(ctx, "before-refactor"); err != nil {
		fmt.Println(err)
		return
	}

	// Two more attempts from the same state, each its own sandbox.
	forks := []*sandbox.Sandbox{sb}
	for _, task := range []string{"attempt-2", "attempt-3"} {
		fork := m.Sandbox(sandbox.Key{Profile: "example", Task: task}, spec)
		res, err := fork.Snapshots().Fork(ctx, "before-refactor")
		fmt.Println(task, res.Action, err)
		forks = append(forks, fork)
	}

	err = m.RemoveSnapshot(ctx, sb.Key().Scope(), "before-refactor")
	fmt.Println(errors.Is(err, sandbox.ErrSnapshotInUse)) // sandboxes stand on it
	for _, f := range forks {
		_, _ = f.Down(ctx)
	}
	fmt.Println(m.RemoveSnapshot(ctx, sb.Key().Scope(), "before-refactor"))
	// Output:
	// before-refactor attempt
	// attempt-2 created <nil>
	// attempt-3 created <nil>
	// true
	// <nil>
}
