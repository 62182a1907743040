// Package privdir opens the directories hsbx keeps sockets, locks, logs
// and state in, after proving that no other user can change what is in
// them: every directory from the root down is checked on what was opened
// (openat without following links, then fstat), never by path and then
// used by path. A directory passes when it belongs to root or this user
// and others cannot write it (a world-writable directory must be sticky,
// as /tmp is, so others cannot rename or remove what this user made in
// it); the last one must belong to this user. A symbolic link on the way
// is followed only when root or this user owns it.
//
// The Dir is held open: on Linux, FDPath names it through /proc/self/fd,
// so every later path under it resolves through the checked directory
// and not through names someone could swap.
package privdir

import (
	"errors"
	"fmt"
	"os"
)

// ErrUnsafe is what every *UnsafeError is (errors.Is).
var ErrUnsafe = errors.New("a directory another user could change")

// UnsafeError says a directory on the way could be changed by another
// user (or is not a directory): hsbx will not keep anything there.
type UnsafeError struct {
	Path string // the directory (or link) that failed the check
	Why  string
}

func (e *UnsafeError) Error() string {
	return fmt.Sprintf("%s %s: another user could change what hsbx keeps there", e.Path, e.Why)
}

// Unwrap makes the error ErrUnsafe.
func (e *UnsafeError) Unwrap() error { return ErrUnsafe }

// Hint says what to do about an unsafe directory.
func (e *UnsafeError) Hint() string {
	return fmt.Sprintf("make %s a directory that only you (or root) can write, or remove it so hsbx makes it afresh", e.Path)
}

// Options say how to open a directory.
type Options struct {
	// Create makes missing directories on the way, with Mode (0 = 0700).
	Create bool
	Mode   os.FileMode
	// Private also refuses any group or other permission on the last
	// directory (sockets' directory: mode 0700).
	Private bool
}

// Dir is a directory that passed the check, held open.
type Dir struct {
	f    *os.File
	path string // the resolved path, every component checked
}

// Path is the directory's resolved path (links followed, each checked).
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return d.f.Close() }

// File is the open directory.
func (d *Dir) File() *os.File { return d.f }
