package channel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The holder's named pipe: both ends pass the peer check (this user on
// either side), bytes go both ways intact, what the server wrote before it
// hung up still arrives, and a read deadline fires.
func TestPipeRoundTrip(t *testing.T) {
	path := filepath.Join(tempDir(t), "h.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	served := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer nc.Close()
		if err := checkPeer(nc); err != nil {
			served <- err
			return
		}
		got := make([]byte, 5)
		if _, err := io.ReadFull(nc, got); err != nil || string(got) != "hello" {
			served <- errors.Join(err, errors.New("the server read "+string(got)))
			return
		}
		_, err = nc.Write(big)
		served <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(nc)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the client read %d bytes (%v); want %d", len(got), err, len(big))
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	// A second client on the same listener, and a deadline that fires.
	go func() {
		if nc, err := ln.Accept(); err == nil {
			time.Sleep(2 * time.Second)
			nc.Close()
		}
	}()
	nc2, err := dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	_ = nc2.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := nc2.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v; want the deadline exceeded", err)
	}
}

// Closing the listener ends a waiting Accept; then nobody can connect.
func TestPipeCloseEndsAccept(t *testing.T) {
	path := filepath.Join(tempDir(t), "h.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	time.Sleep(100 * time.Millisecond)
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits 5s after Close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := dial(ctx, path); err == nil {
		t.Fatal("dialled a closed holder")
	}
}

// No holder: the client learns it at once, and Alive says no.
func TestPipeNoHolder(t *testing.T) {
	path := filepath.Join(tempDir(t), "none.sock")
	start := time.Now()
	if _, err := dial(context.Background(), path); err == nil {
		t.Fatal("dialled a pipe nobody serves")
	}
	if Alive(path, time.Second) {
		t.Fatal("Alive with no holder")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("finding no holder took %s", d)
	}
}

// A pipe's name depends on the socket path it stands for (not on case,
// as Windows paths do not), and fits the pipe namespace.
func TestPipeName(t *testing.T) {
	a, b := PipeName(`C:\Users\a\AppData\Local\hsbx\x.sock`), PipeName(`C:\Users\b\AppData\Local\hsbx\x.sock`)
	if a == b {
		t.Fatalf("two users' sockets share the pipe %s", a)
	}
	if a != PipeName(`c:\users\A\appdata\local\hsbx\x.sock`) {
		t.Fatal("the same path in another case names another pipe")
	}
	if !strings.HasPrefix(a, `\\.\pipe\hsbx-`) || len(a) > 256 {
		t.Fatalf("pipe name %q", a)
	}
	if err := SocketPathFits(strings.Repeat(`C:\long`, 100)); err != nil {
		t.Fatalf("a long directory on Windows: %v (the pipe's name does not grow with it)", err)
	}
}

// The peer verdict: another user's process is refused, naming both.
func TestSameUser(t *testing.T) {
	if err := sameUser("S-1-5-21-1-2-3-1000", "S-1-5-21-1-2-3-1000", 7); err != nil {
		t.Fatal(err)
	}
	err := sameUser("S-1-5-21-1-2-3-1001", "S-1-5-21-1-2-3-1000", 7)
	if err == nil || !strings.Contains(err.Error(), "S-1-5-21-1-2-3-1001") || !strings.Contains(err.Error(), "process 7") {
		t.Fatalf("another user's peer: %v", err)
	}
}

// tempDir is t.TempDir without its cleanup's verdict: Wine (where these
// tests run in CI) lacks the call Go's RemoveAll makes on Windows.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "hsbx-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}
