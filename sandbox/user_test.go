package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/sandbox"
)

// Command.User on every engine, through the channel (the agent switches
// user) and the plain path (the engine's --user; kubectl has none, so
// there only the channel can): the uid, gid and HOME the engines give,
// a user or group the image lacks as ErrNoSuchUser with nothing run, and
// the sandbox's own user after. On the fakes the plain path cannot switch
// user (its sandbox is the host's processes) and the agent reads the
// host's files: the ids are checked on the real engines, the uid the
// agent gives on the fakes.
func TestExecAsUser(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.eachRoute(t, func(t *testing.T, path execRoute, _ *sandbox.Manager) {
			sb := e.shared(t, path.channel)
			run := func(user string, argv ...string) (string, string, int, error) {
				var out, errb bytes.Buffer
				code, err := sb.Exec(ctx, sandbox.Command{Argv: argv, User: user, Stdout: &out, Stderr: &errb})
				return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), code, err
			}
			if _, _, code, err := run("", "true"); code != 0 || err != nil {
				t.Fatalf("first command: %d %v", code, err)
			}
			if e.kube() && !path.channel {
				_, _, _, err := run("nobody", "id", "-u")
				var se *sandbox.SpecError
				if !errors.As(err, &se) || se.Setting != "user" || !strings.Contains(err.Error(), "kubectl exec has no --user") {
					t.Fatalf("kubectl's plain path as another user: %v, want the setting refused", err)
				}
				return
			}
			onEngine := !e.tg.Fake
			for _, c := range []struct{ user, want string }{
				{"nobody", "65534 65534 /"},
				{"65534:0", "65534 0 /"},
				{"1234", "1234 0 /"},
				{"root", "0 0 /root"},
			} {
				out, stderr, code, err := run(c.user, "sh", "-c", `echo "$(id -u) $(id -g) $HOME"`)
				if err != nil || code != 0 {
					t.Fatalf("as %s: %d %v (%s)", c.user, code, err, stderr)
				}
				switch uid, _, _ := strings.Cut(c.want, " "); {
				case onEngine && out != c.want:
					t.Errorf("as %s: %q, want %q", c.user, out, c.want)
				case !onEngine && path.channel && !strings.HasPrefix(out, uid+" "):
					t.Errorf("as %s on the fake's agent (the host's users): %q, want uid %s", c.user, out, uid)
				}
			}
			for _, bad := range []string{"nosuch-hsbx", "root:nosuch-hsbx"} {
				out, stderr, _, err := run(bad, "echo", "ran")
				if !errors.Is(err, sandbox.ErrNoSuchUser) || out != "" || !strings.Contains(err.Error(), "unable to find") {
					t.Errorf("as %s: %v, stdout %q, stderr %q; want ErrNoSuchUser naming it, nothing run", bad, err, out, stderr)
				}
			}
			if out, _, code, err := run("", "id", "-u"); (onEngine || path.channel) && (out != "0" || code != 0 || err != nil) {
				t.Errorf("after: the sandbox's own user is %q (%d %v), want 0", out, code, err)
			}
			if !onEngine {
				return // sessions as another user on the fakes: session_user.txtar
			}
			// A session as nobody: its state carries over, apart from
			// root's session of the same name.
			script := func(ss *sandbox.Session, text string) string {
				var out bytes.Buffer
				res, err := ss.Run(ctx, text, sandbox.Script{Stdout: &out})
				if err != nil || res.Code != 0 {
					t.Fatalf("session %s: %q: %d %v", ss.Name(), text, res.Code, err)
				}
				return strings.TrimSpace(out.String())
			}
			mine, theirs := sb.Session(e.base+"u", ""), sb.Session(e.base+"u", "nobody")
			script(mine, "export WHO=root-shell")
			if got := script(theirs, `export WHO=nobody-shell; echo "$(id -u) $HOME"`); got != "65534 /" {
				t.Errorf("nobody's session: %q", got)
			}
			if got := script(theirs, `echo "$WHO"`); got != "nobody-shell" {
				t.Errorf("nobody's session's state: %q", got)
			}
			if got := script(mine, `echo "$WHO $(id -u)"`); got != "root-shell 0" {
				t.Errorf("root's session of the same name: %q", got)
			}
			if _, err := sb.Session(e.base+"u", "nosuch-hsbx").Run(ctx, "true", sandbox.Script{}); !errors.Is(err, sandbox.ErrNoSuchUser) {
				t.Errorf("a session as a user the sandbox lacks: %v", err)
			}
			_ = theirs.Close(ctx)
		})
	})
}
