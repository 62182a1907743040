package agentapi

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

// every holds a Call of each mode, arguments that need care among them.
var every = []Call{
	Agent{}, Features{}, BgList{}, SnapshotRestore{},
	InstallAs{Name: ".hsbx-agent-0123", Then: Agent{}},
	InstallAs{Name: ".hsbx-agent-0123", Then: FileRead{Path: "/a b", Max: 9}},
	KillMarked{Marker: "HSBX_EXEC_ID=abc"},
	TarOut{Src: "/w/."}, TarIn{Dst: "/w/"}, CopyOut{Src: "/etc/hostname", Bound: 8 << 20}, CopyIn{Dst: "/"},
	SessionServer{Base: "/tmp/.hsbx-sessions2-0"}, Trust{Dir: "/tmp/ca"},
	Unreachable{Wait: 1500 * time.Millisecond, Addrs: []string{"10.0.0.1:80", "[::1]:443"}},
	Forward{Addr: "127.0.0.1:8080"},
	FileRead{Path: "-", Max: 0}, FileWrite{Path: "/x", Mode: KeepMode, Max: 1},
	FileWrite{Path: "/x", Mode: 0o4755, Max: 1 << 30}, FileWrite{Path: "/x", Mode: 0, Max: 1},
	FileList{Path: "/"}, FileRemove{Path: "/x", Recursive: true}, FileRemove{Path: "/x"},
	FileWatch{Path: "/w", Recursive: true},
	BgStart{ID: "00ff", Bound: 1 << 20, Command: []string{"sh", "-c", "echo 1"}},
	BgSupervise{ID: "00ff", Command: []string{"--", "-x"}},
	BgInfo{ID: "00ff"}, BgWait{ID: "00ff"}, BgOutput{ID: "00ff", From: 12, Follow: true}, BgOutput{ID: "00ff"},
	BgKill{ID: "00ff", Signal: 15},
	SnapshotHold{Bound: 1 << 30, Paths: []string{"/workspace", "/root"}}, SnapshotHold{Bound: 5},
}

// Parse reads back what Args wrote, for every mode.
func TestParseReadsArgs(t *testing.T) {
	modes := map[string]bool{}
	for _, c := range every {
		args := c.Args()
		modes[args[0]] = true
		got, err := Parse(args)
		if err != nil {
			t.Errorf("%T %q: %v", c, args, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%q: %#v, want %#v", args, got, c)
		}
	}
	all := []string{ModeAgent, ModeFeatures, ModeInstallAs, ModeKillMarked, ModeTarOut, ModeTarIn, ModeCopyOut,
		ModeCopyIn, ModeSessionServer, ModeTrust, ModeUnreachable, ModeForward, ModeFileRead, ModeFileWrite,
		ModeFileList, ModeFileRemove, ModeFileWatch, ModeBgStart, ModeBgSupervise, ModeBgList, ModeBgInfo,
		ModeBgWait, ModeBgOutput, ModeBgKill, ModeSnapshotHold, ModeSnapshotRestore}
	for _, m := range all {
		if !modes[m] {
			t.Errorf("no Call of mode %s in the table", m)
		}
	}
}

// Arguments a mode does not take are an error naming the mode; words that
// name no mode are ErrNotAMode (the binary may be something else).
func TestParseRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "x"}, {"features", "-v"}, {"kill-marked"}, {"kill-marked", "a", "b"}, {"tar-out"},
		{"copy-out", "/x"}, {"copy-out", "/x", "-1"}, {"copy-out", "/x", "1k"},
		{"file-read", "/x", "99999999999999999999"}, {"file-write", "/x", "8", "1"}, {"file-write", "/x", "17777", "1"},
		{"file-write", "/x", "-", "1", "2"}, {"file-remove", "/x", "yes"}, {"file-watch", "/x"},
		{"unreachable", "1s"}, {"unreachable", "soon", "a:1"}, {"bg-start", "id", "10"}, {"bg-start", "id", "x", "sh"},
		{"bg-supervise", "id"}, {"bg-output", "id", "-3", "0"}, {"bg-kill", "id", "0"}, {"bg-kill", "id", "65"},
		{"snapshot-hold"}, {"snapshot-hold", "many"}, {"install-as", "name"}, {"install-as", "name", "nope"},
	} {
		c, err := Parse(args)
		var ae *ArgsError
		if !errors.As(err, &ae) || ae.Mode != args[0] {
			t.Errorf("%q: %#v %v, want an ArgsError of mode %s", args, c, err, args[0])
		}
	}
	for _, args := range [][]string{nil, {}, {""}, {"nope"}, {"--help"}, {"exec", "--", "true"}, {"Agent"}} {
		if c, err := Parse(args); !errors.Is(err, ErrNotAMode) {
			t.Errorf("%q: %#v %v, want ErrNotAMode", args, c, err)
		}
	}
}

// FuzzParse: whatever the arguments, Parse does not panic, and a Call it
// reads writes arguments it reads back to the same Call.
func FuzzParse(f *testing.F) {
	for _, c := range every {
		f.Add(join(c.Args()))
	}
	f.Add("install-as\x00n\x00install-as\x00m\x00agent")
	f.Fuzz(func(t *testing.T, s string) {
		args := split(s)
		c, err := Parse(args)
		if err != nil {
			return
		}
		again, err := Parse(c.Args())
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%q read as %#v, whose Args %q read as %#v %v", args, c, c.Args(), again, err)
		}
	})
}

func join(a []string) string {
	s := ""
	for i, w := range a {
		if i > 0 {
			s += "\x00"
		}
		s += w
	}
	return s
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return slices.Collect(func(yield func(string) bool) {
		start := 0
		for i := 0; i <= len(s); i++ {
			if i == len(s) || s[i] == 0 {
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
	})
}
