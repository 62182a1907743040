package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// forwardRows measure a port forward (the Go package's Sandbox.Forward,
// through the channel) into the warm sandbox, where busybox httpd serves
// a 100 MB file from memory, against a direct connection to a Go file
// server on the host's loopback serving the same file: the throughput of
// one 100 MB GET, and a connection's set-up (20 sequential small GETs, a
// new connection each).
func forwardRows(ctx context.Context, e *engine) []row {
	sb := libraryClient(ctx, e).Sandbox("warm")
	defer sb.Close(ctx)
	size := int64(sized(100 << 20))
	const port = 18090
	setup := fmt.Sprintf("mkdir -p /tmp/fwd && head -c %d /dev/zero > /tmp/fwd/big && echo x > /tmp/fwd/small", size)
	if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", setup}}); err != nil || code != 0 {
		fail("%s: forward setup: exit %d: %v", e.name, code, err)
	}
	p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: []string{"httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", "/tmp/fwd"}})
	if err != nil {
		fail("%s: httpd in the sandbox: %v", e.name, err)
	}
	defer p.Signal(ctx, 9)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = forward.Run(fctx, sb, ln, forward.Options{Port: port}) }()

	dir, err := os.MkdirTemp("", "hsbx-bench-fwd-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	f, _ := os.Create(filepath.Join(dir, "big"))
	_ = f.Truncate(int64(size))
	f.Close()
	_ = os.WriteFile(filepath.Join(dir, "small"), []byte("x\n"), 0o644)
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go srv.Serve(hostLn)
	defer srv.Close()

	get := func(addr, name string, want int64) time.Duration {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Minute}
		start := time.Now()
		for try := 0; ; try++ {
			r, err := c.Get("http://" + addr + "/" + name)
			if err != nil {
				if try < 50 && strings.Contains(err.Error(), "EOF") || try < 50 && strings.Contains(err.Error(), "reset") {
					time.Sleep(100 * time.Millisecond) // httpd still starting
					start = time.Now()
					continue
				}
				fail("%s: GET %s through %s: %v", e.name, name, addr, err)
			}
			n, err := io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if err != nil || n != want {
				fail("%s: GET %s: %d bytes of %d: %v", e.name, name, n, want, err)
			}
			return time.Since(start)
		}
	}
	get(ln.Addr().String(), "small", 2)
	h, b := pair(ctx, e, *runs,
		func() time.Duration { return get(ln.Addr().String(), "big", size) },
		func() time.Duration { return get(hostLn.Addr().String(), "big", size) })
	mbs := func(d time.Duration) string { return fmt.Sprintf("%.0f MB/s", float64(size)/1e6/d.Seconds()) }
	thr := row{"port forward: one " + mb(int(size)) + " GET through `Sandbox.Forward` (the channel) from busybox httpd in the sandbox vs a direct connection to a Go file server on the host (throughput)",
		mbs(h), mbs(b), fmt.Sprintf("%.3f", float64(b)/float64(h)), "—", "untargeted: the exec stream carries the data (the decided path)"}
	twenty := func(addr string) time.Duration {
		var total time.Duration
		for range 20 {
			total += get(addr, "small", 2)
		}
		return total / 20
	}
	h, b = pair(ctx, e, *runs, func() time.Duration { return twenty(ln.Addr().String()) }, func() time.Duration { return twenty(hostLn.Addr().String()) })
	conn := row{"port forward: a new connection and a small GET through `Sandbox.Forward` vs the same to a server on the host (mean of 20)",
		ms(h), ms(b), fmt.Sprintf("%.3f", float64(h)/float64(b)), "—", "untargeted"}
	return []row{thr, conn}
}
