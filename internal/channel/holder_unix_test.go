//go:build unix

package channel

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// A client that goes away in the middle of its input (no end of input,
// no kill) gets its command stopped: nobody is left to read its output.
// The command here would otherwise outlive the input by 30 seconds.
func TestHolderStopsTheCommandOfAClientGoneMidInput(t *testing.T) {
	sock := serve(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	w, r := wire.NewWriter(nc), wire.NewReader(nc)
	if f, err := r.Read(); err != nil || f.Type != wire.THello {
		t.Fatalf("hello: %v %v", f.Type, err)
	}
	if err := w.WriteJSON(wire.TStart, 0, wire.Start{Stdin: true, Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; cat > /dev/null; exec sleep 30"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(wire.TStdin, 0, bytes.Repeat([]byte("x"), 100<<10)); err != nil {
		t.Fatal(err)
	}
	closeAndAwaitEnd(t, nc, pidFile, "mid-input")
}

// A client that sends its command and dies before it has read anything
// (a signal before the CLI's handlers are in: RunVia sends first) gets
// its command stopped too.
func TestHolderStopsTheCommandOfAClientGoneBeforeTheHello(t *testing.T) {
	sock := serve(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.NewWriter(nc).WriteJSON(wire.TStart, 0, wire.Start{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 30"}}); err != nil {
		t.Fatal(err)
	}
	closeAndAwaitEnd(t, nc, pidFile, "before reading the hello")
}

// closeAndAwaitEnd waits for the command to write its pid to pidFile,
// closes the client's connection and fails unless the command then ends.
func closeAndAwaitEnd(t *testing.T, nc net.Conn, pidFile, when string) {
	t.Helper()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	nc.Close()
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("the command lived on after its client went away " + when)
		}
	}
}
