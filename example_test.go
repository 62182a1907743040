package hsbx_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/sandbox"
)

// A program opens hsbx as the hsbx command would: the configuration from
// its file and the HSBX_* and Hermes TERMINAL_* environment, the CLI's
// state directory, the automatic orphan sweep. It then works in one task's
// sandbox: ensure it, run commands capturing their output, stream a
// command's lines, copy a file in and the result out, and tear it down.
// (In this package's tests the engine on PATH is the fake docker.)
func Example() {
	ctx := context.Background()
	client, err := hsbx.Open(ctx, hsbx.Options{})
	if err != nil {
		fmt.Println(err) // a *config.Error, or the engine's (runtime.Hint says what to do)
		return
	}
	sb := client.Sandbox("example") // the configured profile and spec, this task

	res, err := sb.Ensure(ctx) // created, started, or reused from an earlier process
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Action, res.Name)

	out, err := sb.Output(ctx, "echo", "hello from the sandbox")
	fmt.Printf("%q %v\n", out, err)

	for line, err := range sb.Lines(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo one; echo two"}}) {
		fmt.Println("line:", line, err)
	}

	dir, _ := os.MkdirTemp("", "hsbx-example-")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "input.csv"), []byte("a,b\n1,2\n"), 0o644)
	if err := sb.Copies().In(ctx, filepath.Join(dir, "input.csv"), "/workspace/"); err != nil {
		fmt.Println(err)
		return
	}
	if err := sb.Copies().Out(ctx, "/workspace/input.csv", filepath.Join(dir, "result.csv")); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(filepath.Join(dir, "result.csv"))
	fmt.Printf("copied back: %q\n", b)

	removed, err := sb.Down(ctx) // explicit teardown; otherwise it stays for the next process
	fmt.Println("removed", len(removed.Containers), err)
	// Output:
	// created hsbx-examples-example-b8666b066334
	// "hello from the sandbox\n" <nil>
	// line: one <nil>
	// line: two <nil>
	// copied back: "a,b\n1,2\n"
	// removed 1 <nil>
}

// Open, then one command in a task's sandbox: the README's Go example,
// which TestReadmeGoExampleIsRun keeps identical to quickStart's body.
func ExampleOpen() {
	if err := quickStart(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output: hello from the sandbox
}

func quickStart(ctx context.Context) error {
	// readme-go-example begins
	client, err := hsbx.Open(ctx, hsbx.Options{}) // the CLI's configuration, engine and state
	if err != nil {
		return err
	}
	sb := client.Sandbox("example")                              // this task, in the configured profile
	out, err := sb.Output(ctx, "echo", "hello from the sandbox") // created on first use, then reused
	if err != nil {
		return err // *sandbox.ExitError on a non-zero exit
	}
	fmt.Printf("%s", out)
	_, err = sb.Down(ctx) // or leave it running for the next process
	return err
	// readme-go-example ends
}

// LoadConfig resolves every setting as `hsbx config` shows it: flag (none
// here) > environment > file > default, each with its source.
func ExampleLoadConfig() {
	cfg, err := hsbx.LoadConfig(nil) // nil: this process's environment
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []struct {
		key, value, source string
	}{
		{"profile", cfg.Profile.Value, cfg.Profile.Source},
		{"sandbox.image", cfg.Sandbox.Image.Value, cfg.Sandbox.Image.Source},
		{"sandbox.network", fmt.Sprint(cfg.Sandbox.Network.Value), cfg.Sandbox.Network.Source},
	} {
		fmt.Printf("%s = %s (%s)\n", s.key, s.value, s.source)
	}
	// Output:
	// profile = examples (env HSBX_PROFILE)
	// sandbox.image = busybox (env TERMINAL_DOCKER_IMAGE)
	// sandbox.network = on (default)
}
