package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"
)

// A directory hsbx makes is this user's with a private DACL, and passes;
// opened again, it still passes.
func TestOpenMakesAPrivateDirectory(t *testing.T) {
	p := filepath.Join(tempDir(t), "a", "hsbx")
	for range 2 {
		d, err := Open(p, Options{Create: true, Private: true})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
}

// A directory that lets everyone write is refused, naming who may.
func TestOpenRefusesADirectoryEveryoneMayChange(t *testing.T) {
	p := filepath.Join(tempDir(t), "open")
	sd, err := windows.SecurityDescriptorFromString("D:P(A;OICI;FA;;;WD)")
	if err != nil {
		t.Fatal(err)
	}
	p16, _ := windows.UTF16PtrFromString(p)
	if err := windows.CreateDirectory(p16, &windows.SecurityAttributes{
		Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}); err != nil {
		t.Fatal(err)
	}
	if got, err := windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION); err != nil ||
		!strings.Contains(got.String(), "FA;;;WD)") {
		t.Skipf("this Windows did not keep the DACL a directory was made with (Wine derives one from the Unix mode): %v", got)
	}
	_, err = Open(p, Options{Private: true})
	var ue *UnsafeError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "S-1-1-0") {
		t.Fatalf("Open of a directory everyone may change: %v; want an UnsafeError naming S-1-1-0", err)
	}
}

// A file is refused where a directory is expected.
func TestOpenRefusesAFile(t *testing.T) {
	p := filepath.Join(tempDir(t), "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p, Options{}); err == nil {
		t.Fatal("opened a file as a directory")
	}
}

// The DACL verdict, entry by entry.
func TestVerdict(t *testing.T) {
	const me = "S-1-5-21-9-9-9-1000"
	allow := func(sid string, mask uint32) ace {
		return ace{Type: windows.ACCESS_ALLOWED_ACE_TYPE, Mask: mask, SID: sid}
	}
	for _, c := range []struct {
		name  string
		owner string
		dacl  bool
		aces  []ace
		ok    bool
	}{
		{"mine, private", me, true, []ace{allow(me, 0x1f01ff), allow("S-1-5-18", 0x1f01ff)}, true},
		{"admins too", me, true, []ace{allow(me, 0x1f01ff), allow("S-1-5-32-544", 0x1f01ff)}, true},
		{"another owner", "S-1-5-21-9-9-9-1001", true, []ace{allow(me, 0x1f01ff)}, false},
		{"no DACL", me, false, nil, false},
		{"everyone may add files", me, true, []ace{allow(me, 0x1f01ff), allow("S-1-1-0", fileAddFile)}, false},
		{"users may delete children", me, true, []ace{allow("S-1-5-32-545", fileDeleteChild)}, false},
		{"everyone may read", me, true, []ace{allow(me, 0x1f01ff), allow("S-1-1-0", 0x1200a9)}, true},
		{"a deny entry", me, true, []ace{{Type: windows.ACCESS_DENIED_ACE_TYPE, Mask: 0x1f01ff, SID: "S-1-1-0"}}, true},
		{"another may change the DACL", me, true, []ace{allow("S-1-5-21-9-9-9-1001", windows.WRITE_DAC)}, false},
	} {
		err := verdict(`C:\x`, c.owner, me, c.dacl, c.aces)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// Two lock takers: the second is told no while the first holds it.
func TestTryLockWindows(t *testing.T) {
	p := filepath.Join(tempDir(t), "x.lock")
	release, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("first: %v %v", ok, err)
	}
	if _, ok, err := TryLock(p); err != nil || ok {
		t.Fatalf("second while held: ok=%v %v; want false", ok, err)
	}
	release()
	release2, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("after release: %v %v", ok, err)
	}
	release2()
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
