package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
)

// userConfined checks, in sb (running, the agent's channel on), that every
// agent mode run as nobody has exactly nobody's permissions: in dir (made
// here, root's, 0755) holding ro (root's, 0444) and locked (root's, 0700,
// with a file), nobody writes, removes, reads, lists and watches nothing
// there, and a background process, a session and a command as nobody
// cannot write there either; /tmp and /var/tmp are every user's (1777,
// nobody writes there).
func userConfined(t *testing.T, sb *sandbox.Sandbox, dir string) {
	t.Helper()
	ctx := context.Background()
	sh := func(user, script string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, User: user, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("as %q: %s: %v", user, script, err)
		}
		return strings.TrimSpace(out.String()), code
	}
	setup := `set -e; d='` + dir + `'; rm -rf "$d"; mkdir -p "$d/locked"; echo s > "$d/locked/s"; chmod 700 "$d/locked"; echo hi > "$d/ro"; chmod 444 "$d/ro"; chmod 755 "$d"; stat -c %a /tmp /var/tmp`
	if out, code := sh("", setup); code != 0 || out != "1777\n1777" {
		t.Fatalf("setup, and /tmp and /var/tmp's modes: %d %q, want 1777 both", code, out)
	}
	nobody := files.Options{User: "nobody"}
	var got bytes.Buffer
	for _, c := range []struct {
		name string
		err  error
	}{
		{"write root's 0444 file", files.Of(sb).Write(ctx, dir+"/ro", strings.NewReader("x"), nobody)},
		{"write a new file in root's 0755 directory", files.Of(sb).Write(ctx, dir+"/new", strings.NewReader("x"), nobody)},
		{"remove root's file from root's directory", files.Of(sb).Remove(ctx, dir+"/ro", nobody)},
		{"read in root's 0700 directory", files.Of(sb).Read(ctx, dir+"/locked/s", &got, nobody)},
		{"list root's 0700 directory", func() error { _, err := files.Of(sb).List(ctx, dir+"/locked", nobody); return err }()},
	} {
		if !errors.Is(c.err, fs.ErrPermission) {
			t.Errorf("as nobody, %s: %v, want a permission error", c.name, c.err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	events := 0
	err := files.Of(sb).Watch(wctx, dir+"/locked", nobody, func(files.Event) { events++; cancel() })
	cancel()
	if err == nil || events != 0 {
		t.Errorf("as nobody, watch root's 0700 directory: %v after %d event(s), want an error and none", err, events)
	}
	p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "touch '" + dir + "/bg'"}, User: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := p.Wait(ctx); err != nil || info.ExitCode == nil || *info.ExitCode == 0 {
		t.Errorf("as nobody, a background process writing in root's directory: %+v %v, want it refused", info, err)
	}
	res, err := sb.Session("confined", "nobody").Run(ctx, "touch '"+dir+"/session'", sandbox.Script{})
	if err != nil || res.Code == 0 {
		t.Errorf("as nobody, a session writing in root's directory: %+v %v, want it refused", res, err)
	}
	if _, code := sh("nobody", "touch '"+dir+"/exec'"); code == 0 {
		t.Error("as nobody, a command wrote in root's directory")
	}
	if out, code := sh("nobody", `echo x > /tmp/nobody-$$ && echo y > /var/tmp/nobody-$$ && echo ok`); code != 0 || out != "ok" {
		t.Errorf("as nobody, /tmp and /var/tmp: %d %q, want both written", code, out)
	}
	if out, _ := sh("", "cat '"+dir+"/ro'; ls '"+dir+"'"); out != "hi\nlocked\nro" {
		t.Errorf("after: %s holds %q, want ro unchanged and nothing new", dir, out)
	}
}

// Under the default runtime, as under gVisor (TestGVisorEveryEngine): an
// agent mode run as another user has that user's permissions, and /tmp
// is every user's.
func TestUserConfinedEveryMode(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes run the agent as this host's user, on this host's files")
		}
		userConfined(t, e.shared(t, true), "/"+e.base+"confined") // the image's layer: root's on every engine
	})
}
