//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/wire"
)

// The file modes' results and the kinds of their failures (exit statuses).
func TestFileModes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "f.bin")
	data := []byte("bin\x00ary\xff\n")
	if err := WriteFile(bytes.NewReader(data), p, 0o600, 100); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("written: %v %v", fi, err)
	}
	var out bytes.Buffer
	if err := ReadFile(&out, p, 100); err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("read back %q %v", out.Bytes(), err)
	}
	// Rewritten: the mode kept (-1), nothing half-made left beside it.
	if err := WriteFile(strings.NewReader("two"), p, -1, 100); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after a rewrite: %v", fi.Mode())
	}
	// Through a link: the file it names is written, the link stays.
	link := filepath.Join(dir, "link")
	os.Symlink(p, link)
	if err := WriteFile(strings.NewReader("three"), link, 0o4755, 100); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "three" {
		t.Errorf("through the link: %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced")
	}
	if fi, _ := os.Stat(p); fi.Mode()&fs.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode 4755: %v", fi.Mode())
	}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"read a missing file", ReadFile(io.Discard, filepath.Join(dir, "none"), 10), agentapi.ExitFileNotFound},
		{"read a directory", ReadFile(io.Discard, dir, 10), agentapi.ExitFileIsDir},
		{"read over the bound", ReadFile(io.Discard, p, 2), agentapi.ExitFileTooLarge},
		{"read under a file", ReadFile(io.Discard, filepath.Join(p, "x"), 10), agentapi.ExitFileNotDir},
		{"write over the bound", WriteFile(strings.NewReader("12345"), filepath.Join(dir, "big"), -1, 4), agentapi.ExitFileTooLarge},
		{"write a directory", WriteFile(strings.NewReader("x"), dir, -1, 4), agentapi.ExitFileIsDir},
		{"write under a file", WriteFile(strings.NewReader("x"), filepath.Join(p, "x"), -1, 4), agentapi.ExitFileNotDir},
		{"list a file", ListDir(io.Discard, p), agentapi.ExitFileNotDir},
		{"list a missing one", ListDir(io.Discard, filepath.Join(dir, "none")), agentapi.ExitFileNotFound},
		{"remove a missing one", RemovePath(filepath.Join(dir, "none"), true), agentapi.ExitFileNotFound},
		{"remove a full directory", RemovePath(filepath.Join(dir, "a"), false), agentapi.ExitFileNotEmpty},
		{"remove /", RemovePath("/", true), 1},
		{"read a device", ReadFile(io.Discard, "/dev/null", 10), 1},
	} {
		if got := fileStatus(c.err); got != c.want {
			t.Errorf("%s: status %d (%v), want %d", c.name, got, c.err, c.want)
		}
	}
	// Input cut short (hsbx killed mid-write) is never a whole file.
	var framed bytes.Buffer
	_, _ = io.Copy(&framed, wire.Chunked(strings.NewReader("all of it")))
	cut := filepath.Join(dir, "cut")
	if err := WriteFile(wire.Unchunked(bytes.NewReader(framed.Bytes()[:framed.Len()-4])), cut, -1, 100); err == nil {
		t.Error("input cut before its end chunk was written")
	}
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Errorf("input cut short left a file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "big")); !os.IsNotExist(err) {
		t.Errorf("a write over the bound left a file: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Errorf("left beside the file: %v", ents)
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o500)
		if got := fileStatus(WriteFile(strings.NewReader("x"), filepath.Join(ro, "f"), -1, 4)); got != agentapi.ExitFilePermission {
			t.Errorf("write in a read-only directory: %d", got)
		}
	}
	out.Reset()
	if err := ListDir(&out, dir); err != nil {
		t.Fatal(err)
	}
	got := map[string]agentapi.FileEntry{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e agentapi.FileEntry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got[e.Name] = e
	}
	if got["a"].Type != "dir" || got["link"].Type != "symlink" || got["link"].Target != p || len(got) != 2 {
		t.Errorf("list: %+v", got)
	}
	if err := RemovePath(filepath.Join(dir, "a"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("removed recursively, yet: %v", err)
	}
}

// Watch: created, written and removed, in a subdirectory made after it
// began too, and its end when the directory goes.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Watch(pw, dir, true); pw.Close() }()
	sc := bufio.NewScanner(pr)
	next := func() agentapi.FileEvent {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("no event: %v", sc.Err())
		}
		var ev agentapi.FileEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	if ev := next(); ev.Event != "watching" {
		t.Fatalf("first: %+v", ev)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	if ev := next(); ev != (agentapi.FileEvent{Event: "created", Path: sub, Type: "dir"}) {
		t.Fatalf("mkdir: %+v", ev)
	}
	time.Sleep(50 * time.Millisecond) // the new directory's watch is added after its event
	f := filepath.Join(sub, "f")
	os.WriteFile(f, []byte("x"), 0o644)
	want := []string{"created " + f, "written " + f}
	for i := 0; i < len(want); {
		ev := next()
		if ev.Event+" "+ev.Path == want[i] {
			i++
		}
	}
	os.Remove(f)
	for ev := next(); ev.Event != "removed" || ev.Path != f; ev = next() {
	}
	os.RemoveAll(dir)
	for ev := next(); ev.Path != dir; ev = next() {
	}
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	if err := Watch(io.Discard, filepath.Join(dir, "none"), false); fileStatus(err) != agentapi.ExitFileNotFound {
		t.Errorf("a missing directory: %v", err)
	}
}

// A path ending in . or .. is refused whole: os.RemoveAll("d/..") empties
// d's parent before it fails.
func TestRemovePathRefusesDotEnds(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "d") + "/..", filepath.Join(dir, "d") + "/.", filepath.Join(dir, "d", "e") + "/../.."} {
		if err := RemovePath(p, true); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d", "e")); err != nil {
		t.Fatalf("something was removed: %v", err)
	}
}
