package forward_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// The examples run on the fake docker (enginetest.Main puts it on PATH).
func TestMain(m *testing.M) { enginetest.Main(m) }

// A server in the sandbox reached from the host: every connection to a
// host listener is relayed to the sandbox's port by hsbx's agent. (On this
// package's fake engine a sandbox's processes are the host's, so the
// "sandbox's" server is this example's own.)
func ExampleRun() {
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
	sb := sandbox.New(sandbox.Config{Runtime: rt, StateDir: stateDir}).Sandbox(sandbox.Key{Profile: "default", Task: "example-fwd"}, spec)
	defer sb.Down(ctx)

	inside, _ := net.Listen("tcp", "127.0.0.1:0") // in a real sandbox: a dev server on its port 8080
	go http.Serve(inside, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the sandbox\n") }))
	port := inside.Addr().(*net.TCPAddr).Port

	ln, err := net.Listen("tcp", "127.0.0.1:0") // the host's side
	if err != nil {
		fmt.Println(err)
		return
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- forward.Run(fctx, sb, ln, forward.Options{Port: port}) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))

	stop()
	fmt.Println(<-done) // ended by its context: nil
	// Output:
	// hello from the sandbox
	// <nil>
}
