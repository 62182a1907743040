package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// dieBound is how soon after its sandbox dies every command on it must
// have ended: the channel's stall check (a second of quiet, a ping's 5 s,
// an inspect), the plain path's watch (10 s, then every 5 s, 2 s of
// grace), a forward's 5 s check, with room for a loaded machine.
const dieBound = 45 * time.Second

// A sandbox that dies under its commands never hangs them. Under gVisor
// the engine does not end an exec whose sandbox died (its runtime
// process killed, as a runtime crash or an OOM kill of it would): a
// command through the channel, one on the plain path, a session's
// script, a file write still taking input, a background process's wait
// and a forward with a connection open are all in flight when the
// sandbox's runsc-sandbox process is killed; each ends, with an error,
// within dieBound, and the next command starts the sandbox again.
func TestSandboxDiesUnderCommands(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes have no runtime process to kill (internal/channel's stall tests stand in)")
		}
		if os.Geteuid() != 0 {
			t.Skip("killing the engine's runtime process takes root")
		}
		ctx := context.Background()
		spec := e.gvisor()
		sb := e.channelManager().Sandbox(e.key("dies"), spec)
		t.Cleanup(func() { _, _ = sb.Down(context.Background()) })
		res, err := sb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			t.Fatalf("warm: %d %v", code, err)
		}
		plain := e.manager().Sandbox(e.key("dies"), spec)
		type outcome struct {
			name string
			err  error
			at   time.Time
		}
		ended := make(chan outcome, 8)
		run := func(name string, f func() error) {
			go func() {
				err := f()
				ended <- outcome{name, err, time.Now()}
			}()
		}
		asErr := func(code int, err error) error {
			if err == nil && code == 0 {
				return errors.New("exit 0")
			}
			if err == nil {
				return fmt.Errorf("exit %d", code)
			}
			return err
		}
		long := []string{"sleep", "300"}
		run("exec through the channel", func() error { return asErr(sb.Exec(ctx, sandbox.Command{Argv: long})) })
		run("exec on the plain path", func() error { return asErr(plain.Exec(ctx, sandbox.Command{Argv: long})) })
		run("a session's script", func() error {
			r, err := sb.Session("dies", "").Run(ctx, "sleep 300", sandbox.Script{})
			return asErr(r.Code, err)
		})
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte("the start of it")) }() // and no end
		run("a file write taking input", func() error {
			err := files.Of(sb).Write(ctx, "/tmp/dies", pr, files.Options{})
			if err == nil {
				return errors.New("written")
			}
			return err
		})
		p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: long})
		if err != nil {
			t.Fatal(err)
		}
		run("a background process's wait", func() error {
			info, err := p.Wait(ctx)
			if err == nil {
				return fmt.Errorf("waited: %+v", info)
			}
			return err
		})
		// A forward with a connection open to a listener in the sandbox.
		if _, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"nc", "-l", "-p", "8089"}}); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		run("a forward", func() error {
			err := forward.Run(ctx, sb, ln, forward.Options{Port: 8089})
			if err == nil {
				return errors.New("forward ended cleanly")
			}
			return err
		})
		time.Sleep(2 * time.Second) // nc listening, the commands in flight
		fc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		_, _ = fc.Write([]byte("hello\n"))
		time.Sleep(2 * time.Second)

		killRuntime(t, res.ID)
		killed := time.Now()
		deadline := time.After(2 * dieBound)
		for n := 0; n < 6; n++ {
			select {
			case o := <-ended:
				took := o.at.Sub(killed)
				t.Logf("%s ended %s after the kill: %v", o.name, took.Round(100*time.Millisecond), o.err)
				if took > dieBound {
					t.Errorf("%s ended %s after its sandbox died, over %s", o.name, took.Round(time.Second), dieBound)
				}
			case <-deadline:
				t.Fatalf("%d of 6 commands still wait %s after their sandbox died", 6-n, 2*dieBound)
			}
		}
		// The next command starts it again.
		var out bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "again"}, Stdout: &out}); err != nil || code != 0 || out.String() != "again\n" {
			t.Fatalf("after: %q %d %v", out.String(), code, err)
		}
	})
}

// killRuntime kills -9 the gVisor sandbox process of container id (its
// runsc-sandbox, whose command line names the container's directory), as
// a runtime crash would.
func killRuntime(t *testing.T, id string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.HasPrefix(b, []byte("runsc-sandbox")) || !bytes.Contains(b, []byte(id)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(f, "/proc/"), "%d/cmdline", &pid); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no runsc-sandbox process of %.12s to kill", id)
	}
}
