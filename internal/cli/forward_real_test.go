package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `hsbx forward` on the fakes and the real engines, with network off: it
// says where it listens (--json) once it does, a server in the sandbox
// answers through it, each connection is in the record of what ran, and
// Ctrl-C ends it (exit 130). On the fakes the server is this test's (a
// fake sandbox's processes are the host's).
func TestForwardCLI(t *testing.T) {
	for _, tg := range cliTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			task := fmt.Sprintf("fwd-%d", time.Now().UnixNano())
			env := append(append([]string{}, tg.environ...), "HSBX_TEST_MAIN=1")
			t.Cleanup(func() { runMain(t, env, "down", "--task", task) })
			port := 18081
			if tg.Fake {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi\n") })}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go srv.Serve(ln)
				t.Cleanup(func() { srv.Close() })
				port = ln.Addr().(*net.TCPAddr).Port
			} else {
				if code, out, errOut := runMain(t, env, "exec", "--task", task, "--", "sh", "-c", "mkdir -p /tmp/www && echo hi > /tmp/www/index.html"); code != 0 {
					t.Fatalf("exec: %d %s %s", code, out, errOut)
				}
				if code, out, errOut := runMain(t, env, "bg", "start", "--task", task, "--", "httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", "/tmp/www"); code != 0 {
					t.Fatalf("bg start: %d %s %s", code, out, errOut)
				}
			}
			fwd := exec.Command(os.Args[0], "--json", "forward", "--task", task, fmt.Sprintf("0:%d", port))
			fwd.Env = env
			stdout, err := fwd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			fwd.Stderr = &stderr
			if err := fwd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			var at struct {
				Address string `json:"address"`
				Port    int    `json:"port"`
			}
			if err != nil || json.Unmarshal([]byte(line), &at) != nil || at.Port != port {
				_ = fwd.Process.Kill()
				t.Fatalf("forward said %q (%v); stderr %s", line, err, stderr.String())
			}
			var body string
			for try := 0; try < 50; try++ {
				r, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + at.Address + "/index.html")
				if err == nil {
					b, _ := io.ReadAll(r.Body)
					r.Body.Close()
					if body = string(b); body == "hi\n" {
						break
					}
				}
				time.Sleep(100 * time.Millisecond) // the server may still be starting
			}
			if body != "hi\n" {
				t.Errorf("through the forward: %q", body)
			}
			_ = fwd.Process.Signal(syscall.SIGINT)
			err = fwd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("after Ctrl-C: %v (stderr %s)", err, stderr.String())
			}
			if _, out, _ := runMain(t, env, "--json", "history", "--task", task); !strings.Contains(out, `"kind":"forward","path":"127.0.0.1:`) {
				t.Errorf("the record holds no forward: %s", out)
			}
		})
	}
}
