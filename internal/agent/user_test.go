//go:build linux

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The engines' rules for --user, as the sandbox's files say (what docker
// and podman printed for the same files: docs/exec.md).
func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\n# a comment\n\nbad line\nnobody:x:65534:65534:nobody:/:/bin/false\n"+
		"dev:x:1000:1000:Dev:/home/dev:/bin/sh\nodd:x:notanumber:1:o:/o:/bin/sh\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nnogroup:x:65534:\ndev:x:1000:\nwheel:x:10:root,dev\naudio:x:29: dev \nstaff:x:50:other\n"), 0o644)
	for _, c := range []struct {
		spec string
		want *execUser // nil: a NoUserError
	}{
		{"root", &execUser{uid: 0, gid: 0, groups: []uint32{10}, home: "/root"}},
		{"0", &execUser{uid: 0, gid: 0, groups: []uint32{10}, home: "/root"}},
		{"nobody", &execUser{uid: 65534, gid: 65534, home: "/"}},
		{"dev", &execUser{uid: 1000, gid: 1000, groups: []uint32{10, 29}, home: "/home/dev"}},
		{"1000", &execUser{uid: 1000, gid: 1000, groups: []uint32{10, 29}, home: "/home/dev"}},
		{"dev:staff", &execUser{uid: 1000, gid: 50, groups: []uint32{10, 29}, home: "/home/dev"}},
		{"dev:50", &execUser{uid: 1000, gid: 50, groups: []uint32{10, 29}, home: "/home/dev"}},
		{"1234", &execUser{uid: 1234, gid: 0, home: "/"}},
		{"1234:777", &execUser{uid: 1234, gid: 777, home: "/"}},
		{"1234:nogroup", &execUser{uid: 1234, gid: 65534, home: "/"}},
		{"nosuch", nil},
		{"dev:nosuch", nil},
		{"odd", nil},
		{"", nil},
		{":0", nil},
		{"dev:", nil},
		{"4294967295", nil}, // (uid_t)-1 is no uid: taken as a name, and there is none
		{"a\nb", nil},
	} {
		got, err := lookupUser(c.spec, passwd, group)
		var nu *NoUserError
		switch {
		case c.want == nil && !errors.As(err, &nu):
			t.Errorf("%q: got %+v, %v; want a NoUserError", c.spec, got, err)
		case c.want != nil && (err != nil || !reflect.DeepEqual(got, *c.want)):
			t.Errorf("%q: got %+v, %v; want %+v", c.spec, got, err, *c.want)
		}
	}
	// No files at all: numeric ids only.
	if u, err := lookupUser("5:6", filepath.Join(dir, "none"), filepath.Join(dir, "none")); err != nil || u.uid != 5 || u.gid != 6 {
		t.Errorf("no files: %+v, %v", u, err)
	}
	if _, err := lookupUser("root", filepath.Join(dir, "none"), group); err == nil {
		t.Errorf("no passwd file: root was found")
	}
}

// FuzzLookupUser: whatever the files and the spec, an answer or an error,
// never a panic; a name it finds is one the files list.
func FuzzLookupUser(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/sh\n", "wheel:x:10:root\n", "root:wheel")
	f.Add("a:b:c\n::::::\n", ":::\n", "1:2")
	f.Fuzz(func(t *testing.T, passwd, group, spec string) {
		dir := t.TempDir()
		p, g := filepath.Join(dir, "p"), filepath.Join(dir, "g")
		os.WriteFile(p, []byte(passwd), 0o644)
		os.WriteFile(g, []byte(group), 0o644)
		u, err := lookupUser(spec, p, g)
		if err == nil && u.uid > maxID {
			t.Fatalf("%q: uid %d", spec, u.uid)
		}
	})
}
