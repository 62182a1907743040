package hsbx_test

// This file is the program an agent framework would write, against hsbx's
// public API only (TestExamplesUsePublicAPIOnly checks its imports).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/sandbox"
)

// An agent session: 20 commands with their stdout, stderr and exit code, a
// long output streamed, 4 commands at once with one of them cancelled, and
// the teardown.
func Example_agentSession() {
	ctx := context.Background()
	client, err := hsbx.Open(ctx, hsbx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	sb := client.Sandbox("agent-session")
	defer sb.Down(ctx)

	mismatches := 0
	for i := range 20 {
		var stdout, stderr bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{
			Argv:   []string{"sh", "-c", fmt.Sprintf("echo out %d; echo err %d >&2; exit %d", i, i, i%4)},
			Stdout: &stdout, Stderr: &stderr,
		})
		if err != nil { // the engine failed; a command's own failure is its code
			fmt.Println(err)
			return
		}
		if stdout.String() != fmt.Sprintf("out %d\n", i) || stderr.String() != fmt.Sprintf("err %d\n", i) || code != i%4 {
			mismatches++
		}
	}
	fmt.Println("20 commands, mismatches:", mismatches)

	lines, last := 0, ""
	for line, err := range sb.Lines(ctx, sandbox.Command{Argv: []string{"seq", "100000"}}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		lines, last = lines+1, line
	}
	fmt.Println("streamed", lines, "lines, the last", last)

	cancelled, cancel := context.WithCancel(ctx)
	time.AfterFunc(500*time.Millisecond, cancel)
	results := make([]string, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 3 { // the one the agent gives up on
				_, err := sb.Output(cancelled, "sleep", "60")
				results[i] = fmt.Sprint("cancelled: ", errors.Is(err, context.Canceled))
				return
			}
			out, err := sb.Output(ctx, "echo", fmt.Sprint("concurrent ", i))
			results[i] = fmt.Sprintf("%q %v", out, err)
		}()
	}
	wg.Wait()
	for _, r := range results {
		fmt.Println(r)
	}

	removed, err := sb.Down(ctx)
	fmt.Println("torn down:", len(removed.Containers), err)
	// Output:
	// 20 commands, mismatches: 0
	// streamed 100000 lines, the last 100000
	// "concurrent 0\n" <nil>
	// "concurrent 1\n" <nil>
	// "concurrent 2\n" <nil>
	// cancelled: true
	// torn down: 1 <nil>
}
