package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
)

// Background processes on every engine, started through the channel and
// the plain path: the id at once; the process outlives the handle (its
// channel closed) and is found by id from another Manager (another
// process); its output, followed until it ends; its exit status; a kill
// that reaches what it started; the output bound (the oldest dropped and
// said so); another user's processes apart.
func TestBackground(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.eachRoute(t, func(t *testing.T, route execRoute, _ *sandbox.Manager) {
			sb := e.shared(t, route.channel)
			// It ends when the test says (a file appears), not after a
			// time: on a loaded machine a second passed before the other
			// handle asked. A fake sandbox's processes are the host's.
			gate := "/tmp/hsbx-bg-go-" + e.base + route.name
			if e.tg.Fake {
				t.Cleanup(func() { _ = os.Remove(gate) })
			}
			p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", `echo "start $V"; while [ ! -e "$G" ]; do sleep 1; done; echo done; exit 3`}, Env: map[string]string{"V": "x", "G": gate}})
			if err != nil {
				t.Fatal(err)
			}
			_ = sb.Close(ctx)                                                // its channel goes; the process does not
			other := background.Of(e.shared(t, route.channel)).Get(p.ID, "") // another process's
			info, err := other.Info(ctx)
			if err != nil || !info.Running || info.PID == 0 || strings.Join(info.Argv, " ") == "" {
				t.Fatalf("info from another handle: %+v %v", info, err)
			}
			if g, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"touch", gate}}); err != nil {
				t.Fatal(err)
			} else if info, err := g.Wait(ctx); err != nil || info.ExitCode == nil || *info.ExitCode != 0 {
				t.Fatalf("touch %s: %+v %v", gate, info, err)
			}
			var out bytes.Buffer
			if err := other.Output(ctx, &out, background.OutputOptions{Follow: true}); err != nil || out.String() != "start x\ndone\n" {
				t.Fatalf("followed output %q %v", out.String(), err)
			}
			info, err = other.Wait(ctx)
			if err != nil || info.Running || info.ExitCode == nil || *info.ExitCode != 3 || info.OutputBytes != 13 {
				t.Fatalf("wait: %+v %v", info, err)
			}
			// A tree, killed whole.
			q, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "sleep 300 & sleep 300 & echo both; wait"}})
			if err != nil {
				t.Fatal(err)
			}
			// Killed once the tree is whole (on a loaded machine the kill
			// came before the shell had started its second sleep).
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				var b bytes.Buffer
				if err := q.Output(ctx, &b, background.OutputOptions{}); err == nil && b.String() == "both\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the shell did not start its two sleeps within 30s")
				}
			}
			n, err := q.Signal(ctx, syscall.SIGTERM)
			if err != nil || n < 3 {
				t.Errorf("kill reached %d (%v), want the shell and its two sleeps", n, err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			info, err = q.Wait(wctx)
			cancel()
			if err != nil || info.ExitCode == nil || *info.ExitCode != 128+int(syscall.SIGTERM) {
				t.Errorf("after the kill: %+v %v", info, err)
			}
			// Over the bound: the oldest dropped, and said.
			big, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "head -c 6000000 /dev/zero; echo; echo tail-end"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := big.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			var dropped bytes.Buffer
			if err := big.Output(ctx, &out, background.OutputOptions{Dropped: &dropped}); err != nil {
				t.Fatal(err)
			}
			if out.Len() > background.OutputMax || !strings.HasSuffix(out.String(), "\ntail-end\n") || !strings.Contains(dropped.String(), "were dropped") {
				t.Errorf("over the bound: %d bytes kept, ends %q, mark %q", out.Len(), out.String()[max(0, out.Len()-12):], dropped.String())
			}
			// Not found: an unknown id; a command that is not there.
			if _, err := background.Of(sb).Get("0123456789abcdef", "").Info(ctx); !errors.Is(err, background.ErrNoProcess) {
				t.Errorf("an unknown id: %v", err)
			}
			_, err = background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"no-such-command-hsbx"}})
			var ee *sandbox.ExitError
			if !errors.As(err, &ee) || ee.Code != 127 {
				t.Errorf("a missing command: %v", err)
			}
			list, err := background.Of(sb).List(ctx, "")
			if err != nil || len(list) < 3 {
				t.Errorf("list: %d %v", len(list), err)
			}
			if e.tg.Fake || e.kube() && !route.channel {
				return // the fake cannot switch user; kubectl has no --user
			}
			// Another user's are its own.
			np, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sleep", "1"}, User: "nobody"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := background.Of(sb).Get(np.ID, "").Info(ctx); !errors.Is(err, background.ErrNoProcess) {
				t.Errorf("nobody's process seen as root's: %v", err)
			}
			if info, err := np.Wait(ctx); err != nil || info.ExitCode == nil || *info.ExitCode != 0 {
				t.Errorf("nobody's process: %+v %v", info, err)
			}
		})
	})
}
