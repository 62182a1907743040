//go:build linux || darwin

package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the links followed on one path (as the kernel's 40).
const maxLinks = 40

// Open walks path from the root, checking every directory it opens, and
// returns the last one held open. An *UnsafeError names the first
// directory (or link) another user could change.
func Open(path string, o Options) (*Dir, error) {
	if path == "" {
		return nil, errors.New("no directory given")
	}
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		path = abs
	}
	uid := os.Getuid()
	mode := uint32(o.Mode.Perm() &^ 0o022) // never writable by others
	if mode == 0 {
		mode = 0o700
	}
	links := 0
restart:
	path = filepath.Clean(path)
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /: %w", err)
	}
	resolved := "/"
	if err := checkOpened(fd, "/", uid, path == "/", o); err != nil {
		unix.Close(fd)
		return nil, err
	}
	comps := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, name := range comps {
		if name == "" {
			continue
		}
		cur := filepath.Join(resolved, name)
		last := i == len(comps)-1
		var st unix.Stat_t
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) && o.Create {
			if err = unix.Mkdirat(fd, name, mode); err == nil || errors.Is(err, unix.EEXIST) {
				err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
		if err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "open", Path: cur, Err: err}
		}
		if uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
			if int(st.Uid) != 0 && int(st.Uid) != uid {
				unix.Close(fd)
				return nil, &UnsafeError{Path: cur, Why: fmt.Sprintf("is a symbolic link of uid %d", st.Uid)}
			}
			target, err := readlinkat(fd, name)
			unix.Close(fd)
			if err != nil {
				return nil, &fs.PathError{Op: "readlink", Path: cur, Err: err}
			}
			if links++; links > maxLinks {
				return nil, &fs.PathError{Op: "open", Path: path, Err: unix.ELOOP}
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(resolved, target)
			}
			path = filepath.Join(append([]string{target}, comps[i+1:]...)...)
			goto restart
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, &UnsafeError{Path: cur, Why: "is not a directory (or was swapped while hsbx opened it)"}
			}
			return nil, &fs.PathError{Op: "open", Path: cur, Err: err}
		}
		fd = nfd
		if err := checkOpened(fd, cur, uid, last, o); err != nil {
			unix.Close(fd)
			return nil, err
		}
		resolved = cur
	}
	return &Dir{f: os.NewFile(uintptr(fd), resolved), path: resolved}, nil
}

// checkOpened checks the directory open at fd (named p): see the package
// doc. The last directory of a Private open that is this user's and
// writable by nobody else is tightened to 0700 rather than refused.
func checkOpened(fd int, p string, uid int, last bool, o Options) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	mode := uint32(st.Mode)
	owner := int(st.Uid)
	if last {
		if owner != uid {
			return &UnsafeError{Path: p, Why: fmt.Sprintf("belongs to uid %d, not to you (uid %d)", owner, uid)}
		}
		if mode&0o022 != 0 {
			return &UnsafeError{Path: p, Why: fmt.Sprintf("is writable by group or others (mode %04o)", mode&0o7777)}
		}
		if o.Private && mode&0o077 != 0 {
			if err := unix.Fchmod(fd, 0o700); err != nil {
				return &UnsafeError{Path: p, Why: fmt.Sprintf("has mode %04o and could not be made 0700: %v", mode&0o7777, err)}
			}
		}
		return nil
	}
	if owner != 0 && owner != uid {
		return &UnsafeError{Path: p, Why: fmt.Sprintf("belongs to uid %d, neither root nor you (uid %d)", owner, uid)}
	}
	if mode&0o022 != 0 && mode&unix.S_ISVTX == 0 {
		return &UnsafeError{Path: p, Why: fmt.Sprintf("is writable by group or others and not sticky (mode %04o)", mode&0o7777)}
	}
	return nil
}

func readlinkat(fd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		k, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			return "", err
		}
		if k < n {
			return string(buf[:k]), nil
		}
	}
}

// OpenFile opens a file in a checked directory without following a link
// at its name, and refuses anything but a regular file of this user's.
// flag and perm are os.OpenFile's; never pass O_TRUNC (truncate what
// was checked instead).
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	if flag&os.O_TRUNC != 0 {
		return nil, errors.New("privdir.OpenFile: O_TRUNC would act before the check")
	}
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, &UnsafeError{Path: path, Why: "is a symbolic link"}
		}
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Getuid() {
		f.Close()
		return nil, &UnsafeError{Path: path, Why: "is not a regular file of yours"}
	}
	return f, nil
}

// TryLock takes an exclusive lock on the file at path (made if missing,
// opened as OpenFile does) without waiting: ok false when another
// process holds it. The lock is on the file the name holds when TryLock
// returns: a holder that removed its lock file as it ended cannot leave
// two processes each holding "the" lock.
func TryLock(path string) (release func(), ok bool, err error) {
	for range 10 {
		f, err := OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, false, err
		}
		fd := int(f.Fd())
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, &fs.PathError{Op: "flock", Path: path, Err: err}
		}
		var held, now unix.Stat_t
		if unix.Fstat(fd, &held) == nil && unix.Lstat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return func() { f.Close() }, true, nil
		}
		f.Close() // removed or replaced since we opened it: lock the new one
	}
	return nil, false, fmt.Errorf("%s keeps being replaced", path)
}
