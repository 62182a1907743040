package channel

import (
	"context"
	"errors"
	"github.com/hsbx/hsbx/internal/agent"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// otherUID is a user that is neither root nor the test's.
const otherUID = 1001

// TestMain lets the test binary play another user's fake holder
// (HSBX_TEST_FOREIGN_HOLDER=SOCKET:LOG): it greets like a holder and
// writes whatever a client sends to LOG.
func TestMain(m *testing.M) {
	// Sessions' keepers are this binary run again (os.Executable).
	if code, ok := agent.RunMode(os.Args[1:], "test"); ok {
		os.Exit(code)
	}
	if spec := os.Getenv("HSBX_TEST_FOREIGN_HOLDER"); spec != "" {
		sock, logPath, _ := strings.Cut(spec, ":")
		foreignHolder(sock, logPath)
		return
	}
	os.Exit(m.Run())
}

func foreignHolder(sock, logPath string) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		os.Exit(3)
	}
	_ = os.Chmod(sock, 0o777)
	log, err := os.Create(logPath)
	if err != nil {
		os.Exit(4)
	}
	_ = os.WriteFile(logPath+".ready", nil, 0o644)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = log.WriteString("connected\n")
		_ = wire.NewWriter(c).WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto})
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(log, c)
		_, _ = log.WriteString("\nclosed\n")
		c.Close()
	}
}

// The review's takeover: a socket at the path a client dials, served by
// another user. The client must see that before it sends anything: no
// argv, no environment value reaches the other user.
func TestRunViaRefusesAnotherUsersHolder(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a listener as another user")
	}
	dir, err := os.MkdirTemp("", "hsbx-foreign-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary sits where the other user may not enter: copy it.
	bin := filepath.Join(dir, "holder.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sock, logPath := filepath.Join(dir, "h.sock"), filepath.Join(dir, "got.log")
	cmd := exec.Command(bin)
	cmd.Env = []string{"HSBX_TEST_FOREIGN_HOLDER=" + sock + ":" + logPath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(logPath + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other user's holder did not start")
		}
	}
	req := Request{Start: wire.Start{Argv: []string{"echo", "argv-secret"}, Env: []string{"TOKEN=env-secret"}}}
	_, err = RunVia(context.Background(), sock, req)
	if !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "peer uid 1001") {
		t.Fatalf("RunVia to another user's holder: %v, want ErrNotDelivered naming the peer", err)
	}
	if Alive(sock, time.Second) {
		t.Fatal("Alive trusted another user's holder")
	}
	Shutdown(context.Background(), sock)
	// Everything the listener got, once the client hung up.
	var got []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got, _ = os.ReadFile(logPath)
		if strings.Count(string(got), "closed") >= 3 {
			break
		}
	}
	if strings.Count(string(got), "connected") == 0 {
		t.Fatalf("the test proves nothing: the client never reached the listener (%q)", got)
	}
	if strings.Contains(string(got), "secret") || strings.Contains(string(got), "\x02") {
		t.Fatalf("the other user's listener received the command: %q", got)
	}
}
