//go:build windows

package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"
)

// On Windows who may change a directory is its owner and its DACL, read
// from the opened handle (GetSecurityInfo), never by path. The last
// directory must belong to this user, and its DACL may let nobody but this
// user, SYSTEM and the Administrators change it; hsbx makes the ones it
// creates with exactly that DACL, protected from inheritance. The
// directories above it are not checked: on Windows a directory cannot be
// renamed or replaced while it is open (hsbx holds it open), and a user's
// profile is closed to other users.

// trusted are the SIDs other than this user's that may hold write access:
// SYSTEM, BUILTIN\Administrators and CREATOR OWNER (inherited to the
// owner, who is checked).
var trusted = [...]string{"S-1-5-18", "S-1-5-32-544", "S-1-3-0"}

// writeRights are the rights that let someone change what a directory
// holds, or who may.
const writeRights = fileAddFile | fileAddSubdirectory | fileWriteEA | fileDeleteChild | fileWriteAttributes |
	windows.DELETE | windows.WRITE_DAC | windows.WRITE_OWNER | windows.GENERIC_WRITE | windows.GENERIC_ALL

// A directory's own access rights (winnt.h).
const (
	fileAddFile         = 0x2
	fileAddSubdirectory = 0x4
	fileWriteEA         = 0x10
	fileDeleteChild     = 0x40
	fileWriteAttributes = 0x100
)

// Open makes (when asked) and opens path, then checks the opened directory.
func Open(path string, o Options) (*Dir, error) {
	if path == "" {
		return nil, errors.New("no directory given")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	me, err := UserSID()
	if err != nil {
		return nil, err
	}
	if o.Create {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := mkdirPrivate(path, me); err != nil && !errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
			return nil, &fs.PathError{Op: "mkdir", Path: path, Err: err}
		}
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	// FILE_FLAG_OPEN_REPARSE_POINT: a link or junction is opened itself,
	// and refused below, never followed.
	h, err := windows.CreateFile(p, windows.READ_CONTROL|windows.FILE_LIST_DIRECTORY|windows.FILE_READ_ATTRIBUTES,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := checkOpened(h, path, me); err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	return &Dir{f: os.NewFile(uintptr(h), path), path: path}, nil
}

// mkdirPrivate makes path with a DACL for this user and SYSTEM only.
func mkdirPrivate(path string, me *windows.SID) error {
	sd, err := windows.SecurityDescriptorFromString("D:P(A;OICI;FA;;;" + me.String() + ")(A;OICI;FA;;;SY)")
	if err != nil {
		return err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	return windows.CreateDirectory(p, &windows.SecurityAttributes{
		Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd})
}

// checkOpened checks the directory h is: a directory, no link, this
// user's, and changeable by no other user (its DACL).
func checkOpened(h windows.Handle, path string, me *windows.SID) error {
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &info); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if info.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 || info.FileAttributes&windows.FILE_ATTRIBUTE_DIRECTORY == 0 {
		return &UnsafeError{Path: path, Why: "is a link, a junction or not a directory"}
	}
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return &fs.PathError{Op: "reading the security of", Path: path, Err: err}
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return &UnsafeError{Path: path, Why: "has no owner hsbx can read"}
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return &UnsafeError{Path: path, Why: "has no DACL hsbx can read"}
	}
	var aces []ace
	if dacl != nil {
		for i := range uint32(dacl.AceCount) {
			var a *windows.ACCESS_ALLOWED_ACE
			if err := windows.GetAce(dacl, i, &a); err != nil {
				return &UnsafeError{Path: path, Why: fmt.Sprintf("has a DACL hsbx cannot read (%v)", err)}
			}
			sid := (*windows.SID)(unsafe.Pointer(&a.SidStart))
			aces = append(aces, ace{Type: a.Header.AceType, Mask: uint32(a.Mask), SID: sid.String()})
		}
	}
	return verdict(path, owner.String(), me.String(), dacl != nil, aces)
}

// ace is the part of an access-control entry the verdict reads.
type ace struct {
	Type byte
	Mask uint32
	SID  string
}

// verdict: the owner must be this user, and no entry may allow anyone
// but this user (or SYSTEM, the Administrators) to change the directory.
// No DACL at all lets everyone do everything.
func verdict(path, owner, me string, hasDACL bool, aces []ace) error {
	if owner != me {
		return &UnsafeError{Path: path, Why: fmt.Sprintf("belongs to %s, not to you (%s)", owner, me)}
	}
	if !hasDACL {
		return &UnsafeError{Path: path, Why: "has no DACL (everyone may change it)"}
	}
	for _, a := range aces {
		if a.Type != windows.ACCESS_ALLOWED_ACE_TYPE || a.Mask&writeRights == 0 || a.SID == me {
			continue
		}
		ok := false
		for _, t := range trusted {
			ok = ok || a.SID == t
		}
		if !ok {
			return &UnsafeError{Path: path, Why: fmt.Sprintf("lets %s change it (access mask %#x)", a.SID, a.Mask)}
		}
	}
	return nil
}

// UserSID is this process's user (the exec channel's pipe checks use it too).
func UserSID() (*windows.SID, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("reading this process's user: %w", err)
	}
	return u.User.Sid, nil
}

// OpenFile opens path without following a final link (a reparse point
// is opened itself and refused).
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	if flag&os.O_TRUNC != 0 {
		return nil, errors.New("privdir.OpenFile: O_TRUNC would act before the check")
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, &UnsafeError{Path: path, Why: "is a symbolic link"}
	}
	return os.OpenFile(path, flag, perm)
}

// TryLock takes an exclusive lock on the file at path (made if missing)
// without waiting: ok false when another process holds it. As on Unix,
// the lock is on the file the name holds when TryLock returns.
func TryLock(path string) (release func(), ok bool, err error) {
	for range 10 {
		f, err := OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, false, err
		}
		ol := new(windows.Overlapped)
		err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
		if err != nil {
			f.Close()
			if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
				return nil, false, nil
			}
			return nil, false, &fs.PathError{Op: "LockFileEx", Path: path, Err: err}
		}
		held, err1 := f.Stat()
		now, err2 := os.Lstat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() { f.Close() }, true, nil
		}
		f.Close() // removed or replaced since we opened it: lock the new one
	}
	return nil, false, fmt.Errorf("%s keeps being replaced", path)
}
