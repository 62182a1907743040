//go:build unix

package channel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/runtime"
)

// A starting holder prunes what ended holders left: a failed channel's
// log and mark, kept when its holder ended (no lock file left to find
// them by), and a killed holder's lock — once the newest of a socket's
// files is a day old and no holder holds its lock. Its own files, a
// served socket's, recent ones and anything else stay.
func TestPruneHolderFiles(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-pruneAfter - time.Hour)
	files := map[string]bool{ // name → pruned
		"failed.sock.log": true, "failed.sock.unavailable": true,
		"killed.sock.lock": true, "killed.sock.log": true,
		"served.sock.lock": false, "served.sock.log": false,
		"recent.sock.log": false, "mixed.sock.log": false, "mixed.sock.unavailable": false,
		"self.sock.log": false, "self.sock.lock": false,
		"notes.txt": false, ".log": false,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if name != "recent.sock.log" && name != "mixed.sock.unavailable" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	release, ok, err := privdir.TryLock(filepath.Join(dir, "served.sock.lock"))
	if err != nil || !ok {
		t.Fatalf("locking served.sock.lock: %v %v", ok, err)
	}
	defer release()
	pruneHolderFiles(dir, "self.sock")
	for name, pruned := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		switch {
		case pruned && err == nil:
			t.Errorf("%s was kept; want it pruned", name)
		case !pruned && err != nil:
			t.Errorf("%s was pruned (%v); want it kept", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "failed.sock.lock")); err == nil {
		t.Error("pruning left the lock file it took")
	}
}

// endedSince reads the mark a shutdown leaves: a holder asked for before
// it does not serve, one asked for after it does; no mark, a garbled one
// or one in the future (the clock set back) stops none.
func TestEndedSince(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "x.sock")
	before := time.Now()
	if endedSince(sock, before) {
		t.Fatal("no mark: ended")
	}
	markEnded(sock)
	if !endedSince(sock, before) {
		t.Fatal("a holder asked for before the mark serves")
	}
	if endedSince(sock, time.Now().Add(time.Millisecond)) {
		t.Fatal("a holder asked for after the mark does not serve")
	}
	for _, content := range []string{"garbage", "", "-", "99999999999999999999999", "9223372036854775807"} {
		if err := os.WriteFile(sock+".ended", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if endedSince(sock, before) {
			t.Errorf("mark %q stops a holder", content)
		}
	}
}

// A holder asked for before a stop, down or replacement asked its socket's
// holders to end — still queued for the lock, or just started — does not
// open a channel (its agent would be an exec the engine counts as a
// running command); one asked for after it does.
func TestHolderAskedForBeforeAShutdownDoesNotServe(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "x.sock")
	asked := time.Now().UnixNano()
	Shutdown(context.Background(), sock) // no holder serves: only the mark
	opened := 0
	opts := HoldOptions{OpenRuntime: func(context.Context, string) (runtime.Runtime, error) {
		opened++
		return nil, errors.New("no engine in this test")
	}}
	if err := Hold(context.Background(), HoldSpec{Dir: dir, Name: "x.sock", ID: "c1", Asked: asked}, opts); err != nil || opened != 0 {
		t.Fatalf("a holder asked for before the shutdown: %v, opened the engine %d time(s)", err, opened)
	}
	if err := Hold(context.Background(), HoldSpec{Dir: dir, Name: "x.sock", ID: "c1", Asked: time.Now().UnixNano()}, opts); err == nil || opened != 1 {
		t.Fatalf("a holder asked for after the shutdown: %v, opened the engine %d time(s)", err, opened)
	}
}

// ShutdownWait returns only once no holder holds the socket's lock: one
// that is starting (opening its channel) has ended.
func TestShutdownWaitWaitsForAStartingHolder(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "x.sock")
	release, ok, err := privdir.TryLock(sock + ".lock")
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	returned := make(chan struct{})
	go func() { ShutdownWait(context.Background(), sock); close(returned) }()
	select {
	case <-returned:
		t.Fatal("ShutdownWait returned while a holder held the lock")
	case <-time.After(300 * time.Millisecond):
	}
	release()
	<-returned
	if !endedSince(sock, time.Now().Add(-time.Minute)) {
		t.Fatal("ShutdownWait left no mark")
	}
}
