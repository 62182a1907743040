//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"github.com/hsbx/hsbx/internal/agentapi"
)

// watchMask is what a watch asks inotify for: entries made, written
// (each write, and the close after writing) and removed, renames as both,
// and the watched directory itself going away.
const watchMask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR

// maxWatches bounds the directories one recursive watch follows.
const maxWatches = 8192

// Watch writes a agentapi.FileEvent a line for each change under directory
// path (its subdirectories too when recursive, new ones as they appear)
// until path itself is removed or moved (nil) or writing fails. The first
// line is "watching": the watch is in place. Events a burst repeats (a
// file written in many pieces) are written once per read of the kernel's
// queue; a queue that overflowed is said ("overflow": changes were lost).
func Watch(w io.Writer, path string, recursive bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "watch", Path: path, Err: syscall.ENOTDIR}
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	defer syscall.Close(fd)
	dirs := map[int32]string{}
	var add func(dir string, top bool) error
	add = func(dir string, top bool) error {
		if len(dirs) >= maxWatches {
			return fmt.Errorf("watch %s: more than %d directories", path, maxWatches)
		}
		// The kernel's read check, made by opening it: gVisor's
		// inotify_add_watch takes a directory its caller may not read.
		var err error
		if d, oerr := os.Open(dir); oerr != nil {
			err = oerr
			var pe *fs.PathError
			if errors.As(oerr, &pe) {
				err = pe.Err
			}
		} else {
			d.Close()
			var wd int
			if wd, err = syscall.InotifyAddWatch(fd, dir, watchMask); err == nil {
				dirs[int32(wd)] = dir
			}
		}
		if err != nil {
			if top {
				return &fs.PathError{Op: "watch", Path: dir, Err: err}
			}
			return nil // gone, or not ours to read: not followed
		}
		if !recursive {
			return nil
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				if err := add(filepath.Join(dir, e.Name()), false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := add(path, true); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	if err := enc.Encode(agentapi.FileEvent{Event: "watching", Path: path, Type: "dir"}); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return os.NewSyscallError("read inotify", err)
		}
		var batch []agentapi.FileEvent
		seen := map[agentapi.FileEvent]bool{}
		emit := func(ev agentapi.FileEvent) {
			if !seen[ev] {
				seen[ev] = true
				batch = append(batch, ev)
			}
		}
		ended := false
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameLen := int(ev.Len)
			name := ""
			if nameLen > 0 && off+syscall.SizeofInotifyEvent+nameLen <= n {
				raw := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+nameLen]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off += syscall.SizeofInotifyEvent + nameLen
			if ev.Mask&syscall.IN_Q_OVERFLOW != 0 {
				emit(agentapi.FileEvent{Event: "overflow", Path: path})
				continue
			}
			dir, ok := dirs[ev.Wd]
			if ev.Mask&syscall.IN_IGNORED != 0 {
				delete(dirs, ev.Wd)
				if ok && dir == path {
					ended = true
				}
				continue
			}
			if !ok {
				continue
			}
			if ev.Mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0 {
				if dir == path {
					ended = true
				}
				continue
			}
			p := filepath.Join(dir, name)
			typ := ""
			if ev.Mask&syscall.IN_ISDIR != 0 {
				typ = "dir"
			}
			switch {
			case ev.Mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
				emit(agentapi.FileEvent{Event: "created", Path: p, Type: typ})
				if typ == "dir" && recursive {
					if err := add(p, false); err != nil {
						return err
					}
				}
			case ev.Mask&(syscall.IN_MODIFY|syscall.IN_CLOSE_WRITE) != 0:
				emit(agentapi.FileEvent{Event: "written", Path: p, Type: typ})
			case ev.Mask&(syscall.IN_DELETE|syscall.IN_MOVED_FROM) != 0:
				emit(agentapi.FileEvent{Event: "removed", Path: p, Type: typ})
			}
		}
		for _, ev := range batch {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		}
		if ended {
			return enc.Encode(agentapi.FileEvent{Event: "removed", Path: path, Type: "dir"})
		}
	}
}
