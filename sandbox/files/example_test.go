package files_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/files"
)

// The examples run on the fake docker (enginetest.Main puts it on PATH).
func TestMain(m *testing.M) { enginetest.Main(m) }

// Files in the sandbox, through hsbx's agent: written whole (parents
// made), read back byte for byte, listed, and failures a program branches
// on with errors.Is. (On this package's fake engine a sandbox's files are
// the host's, so the example works in a directory of its own.)
func ExampleFiles_Write() {
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
	sb := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir}).Sandbox(sandbox.Key{Profile: "default", Task: "example-files"}, spec)
	defer sb.Down(ctx)
	dir := stateDir + "/work" // in a real sandbox: "/workspace/notes", or a path relative to its cwd

	err = files.Of(sb).Write(ctx, dir+"/notes/todo.txt", strings.NewReader("write the tests\n"), files.Options{Mode: 0o600})
	fmt.Println(err)

	var got strings.Builder
	err = files.Of(sb).Read(ctx, dir+"/notes/todo.txt", &got, files.Options{})
	fmt.Printf("%q %v\n", got.String(), err)

	ents, err := files.Of(sb).List(ctx, dir+"/notes", files.Options{})
	fmt.Println(len(ents), err)
	for _, e := range ents {
		fmt.Println(e.Name, e.Type, e.Size, e.Mode)
	}

	err = files.Of(sb).Read(ctx, dir+"/notes/missing.txt", &got, files.Options{})
	fmt.Println(errors.Is(err, fs.ErrNotExist))
	err = files.Of(sb).Remove(ctx, dir+"/notes", files.Options{})
	fmt.Println(errors.Is(err, files.ErrNotEmpty))
	// Output:
	// <nil>
	// "write the tests\n" <nil>
	// 1 <nil>
	// todo.txt file 16 -rw-------
	// true
	// true
}
