package background_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
)

// The examples run on the fake docker (enginetest.Main puts it on PATH).
func TestMain(m *testing.M) { enginetest.Main(m) }

// A command in the background: its id at once, then its output and how
// it ended — from this handle or any other, after this process has gone.
func ExampleProcesses_Start() {
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
	spec.Cwd = "/"
	sb := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir}).Sandbox(sandbox.Key{Profile: "default", Task: "example-bg"}, spec)
	defer sb.Down(ctx)

	p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo building; exit 2"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	same := background.Of(sb).Get(p.ID, "") // what another process would hold, by id
	info, err := same.Wait(ctx)
	fmt.Println(*info.ExitCode, info.Running, err)

	var out strings.Builder
	err = same.Output(ctx, &out, background.OutputOptions{})
	fmt.Printf("%q %v\n", out.String(), err)

	_, err = background.Of(sb).Get("0000000000000000", "").Info(ctx)
	fmt.Println(errors.Is(err, background.ErrNoProcess))
	// Output:
	// 2 false <nil>
	// "building\n" <nil>
	// true
}
