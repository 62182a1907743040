//go:build unix

package channel

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
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
