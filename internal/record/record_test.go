package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Encode writes what encoding/json reads as the record itself.
func TestEncodeReadsBack(t *testing.T) {
	for _, r := range []Record{
		{Kind: "exec"},
		{Time: time.Date(2026, 11, 27, 1, 2, 3, 456, time.UTC), Duration: 12, Host: "h\x00st", UID: 1000, PID: 42,
			Profile: "p", Task: "t\n\"x\"", Sandbox: "hsbx-p-t-0", Kind: "exec", Argv: []string{"sh", "-c", "echo \xff <&>"},
			Env: []string{"A", "B"}, User: "nobody", Via: "channel", ExitCode: -1, TimedOut: true, Killed: true,
			Error: "boom\u2028", BytesIn: 1, BytesOut: -1, BytesErr: 3},
		{Kind: "run", Script: "cd /tmp", Session: "default", Path: "/x"},
	} {
		var got Record
		line := Encode(r)
		if !strings.HasSuffix(string(line), "}\n") || strings.Count(string(line), "\n") != 1 {
			t.Fatalf("not one line: %q", line)
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		m, _ := json.Marshal(r)
		var want Record
		_ = json.Unmarshal(m, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Encode %s\nreads %+v\nwant  %+v", line, got, want)
		}
	}
}

// FuzzEncode: whatever the strings, one line that reads back as
// json.Marshal's does.
func FuzzEncode(f *testing.F) {
	f.Add("exec", "a\xffb", "\n", int64(-1))
	f.Fuzz(func(t *testing.T, kind, arg, task string, n int64) {
		r := Record{Kind: kind, Argv: []string{arg}, Task: task, BytesOut: n, Time: time.Unix(0, n).UTC()}
		line := Encode(r)
		if strings.Count(string(line), "\n") != 1 {
			t.Fatalf("not one line: %q", line)
		}
		var got, want Record
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		m, _ := json.Marshal(r)
		_ = json.Unmarshal(m, &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q reads %+v, want %+v", line, got, want)
		}
	})
}

// Appended from many processes' worth of writers, rotated, read back
// whole; a file another user could have made is refused.
func TestAppendRotateRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	big := strings.Repeat("x", 3000)
	n := MaxSize/3000 + 50
	for i := range n {
		if err := Append(p, Record{Kind: "exec", Argv: []string{big}, PID: i}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := Read(p)
	if err != nil || len(recs) == 0 || recs[len(recs)-1].PID != n-1 {
		t.Fatalf("read %d records (%v)", len(recs), err)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].PID != recs[i-1].PID+1 {
			t.Fatalf("records out of order or missing at %d: %d after %d", i, recs[i].PID, recs[i-1].PID)
		}
	}
	for _, f := range []string{p, p + ".1"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi, err)
		}
	}
	os.Remove(p)
	os.Symlink(filepath.Join(dir, "elsewhere"), p)
	if err := Append(p, Record{Kind: "exec"}); err == nil {
		t.Errorf("appended through a link")
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	got := Clip([]string{"a", long, "b"})
	if len(got) != 2 || !strings.HasSuffix(got[1], "…") || len(got[0])+len(got[1]) > maxArgv+len("…") {
		t.Errorf("Clip: %d parts, %d bytes", len(got), len(strings.Join(got, "")))
	}
	if c := ClipString("héllo", 2); c != "h…" {
		t.Errorf("ClipString on a rune: %q", c)
	}
}
