package sandbox_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// Under gVisor the framework surface holds as under runc: a file written
// and read back by the agent (gVisor's own file system, which the
// engine's cp does not see), a watch seeing a command's write, another
// user, a background process and a port forward into the sandbox.
func TestSurfaceUnderGVisor(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes' runsc is a name only")
		}
		ctx := context.Background()
		spec := e.gvisor()
		spec.Network = false
		sb := e.channelManager().Sandbox(e.key("gv-surface"), spec)
		t.Cleanup(func() { _ = sb.Close(ctx) })
		data := []byte("under gVisor\x00\xff\n")
		if err := files.Of(sb).Write(ctx, "/tmp/gv/a.bin", bytes.NewReader(data), files.Options{}); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := files.Of(sb).Read(ctx, "/tmp/gv/a.bin", &got, files.Options{User: "nobody"}); err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("read back as nobody: %q %v", got.Bytes(), err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events := make(chan files.Event, 16)
		go func() {
			_ = files.Of(sb).Watch(wctx, "/tmp/gv", files.Options{}, func(ev files.Event) { events <- ev })
		}()
		if ev := <-events; ev.Op != "watching" {
			t.Fatalf("watch began with %+v", ev)
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo x > /tmp/gv/new"}}); code != 0 || err != nil {
			t.Fatal(code, err)
		}
		for deadline := time.After(10 * time.Second); ; {
			select {
			case ev := <-events:
				if ev.Op == "created" && ev.Path == "/tmp/gv/new" {
					goto watched
				}
			case <-deadline:
				t.Fatal("the watch saw no create under gVisor")
			}
		}
	watched:
		cancel()
		if _, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:18082", "-h", "/tmp/gv"}}); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fctx, fcancel := context.WithCancel(ctx)
		defer fcancel()
		go func() { _ = forward.Run(fctx, sb, ln, forward.Options{Port: 18082}) }()
		var body string
		for try := 0; try < 50 && body != "x\n"; try++ {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err == nil {
				_, _ = c.Write([]byte("GET /new HTTP/1.0\r\n\r\n"))
				var b bytes.Buffer
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, _ = b.ReadFrom(c)
				c.Close()
				if _, after, ok := strings.Cut(b.String(), "\r\n\r\n"); ok {
					body = after
				}
			}
			if body != "x\n" {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if body != "x\n" {
			t.Errorf("through the forward under gVisor: %q", body)
		}
	})
}
