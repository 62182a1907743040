package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/files"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// A port forward on every engine, through the channel and the plain
// path, into a sandbox with network = off: a server in the sandbox (busybox
// httpd, started in the background) is reached from the host's loopback,
// by many connections at once (8 in the gate, 32 under make soak); a port nothing listens on ends each
// connection, not the forward; the forward ends when the sandbox stops.
// On the fakes a sandbox's processes are the host's: the server is this
// test's.
func TestForward(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.eachRoute(t, func(t *testing.T, route execRoute, m *sandbox.Manager) {
			spec := e.spec()
			spec.Network = false
			sb := m.Sandbox(e.key("fwd-"+route.name), spec)
			t.Cleanup(func() { _ = sb.Close(ctx) })
			if _, err := sb.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			port := 18080
			body := "hello through the forward\n"
			if e.tg.Fake {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go srv.Serve(ln)
				t.Cleanup(func() { srv.Close() })
				port = ln.Addr().(*net.TCPAddr).Port
			} else {
				if err := files.Of(sb).Write(ctx, "/tmp/www/index.html", strings.NewReader(body), files.Options{}); err != nil {
					t.Fatal(err)
				}
				if _, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", "/tmp/www"}}); err != nil {
					t.Fatal(err)
				}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var connErrs []error
			done := make(chan error, 1)
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				done <- forward.Run(fctx, sb, ln, forward.Options{Port: port, OnConn: func(_, _ int64, err error) {
					mu.Lock()
					connErrs = append(connErrs, err)
					mu.Unlock()
				}})
			}()
			url := "http://" + ln.Addr().String() + "/index.html"
			get := func() (string, error) {
				c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				for try := 0; ; try++ {
					r, err := c.Get(url)
					if err != nil {
						if try < 50 { // the server may still be starting
							time.Sleep(100 * time.Millisecond)
							continue
						}
						return "", err
					}
					b, err := io.ReadAll(r.Body)
					r.Body.Close()
					return string(b), err
				}
			}
			if got, err := get(); err != nil || got != body {
				t.Fatalf("through the forward: %q %v", got, err)
			}
			var wg sync.WaitGroup
			n := enginetest.Count(8, 32)
			errs := make(chan error, n)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if got, err := get(); err != nil || got != body {
						errs <- fmt.Errorf("%q %v", got, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("one of %d at once: %v", n, err)
			}
			// A port nothing listens on: that connection ends, the
			// forward does not.
			ln2, _ := net.Listen("tcp", "127.0.0.1:0")
			go forward.Run(fctx, sb, ln2, forward.Options{Port: 1})
			if c, err := net.Dial("tcp", ln2.Addr().String()); err == nil {
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				n, _ := c.Read(make([]byte, 1))
				c.Close()
				if n != 0 {
					t.Errorf("a refused port sent data")
				}
			}
			if got, err := get(); err != nil || got != body {
				t.Errorf("after a refused connection: %q %v", got, err)
			}
			if e.tg.Fake {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("ended by its context: %v", err)
				}
				return
			}
			if _, err := sb.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, forward.ErrSandboxStopped) {
					t.Errorf("after the sandbox stopped: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the forward outlived its sandbox by 60s")
			}
		})
	})
}
