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

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/wire"
)

// The file modes: one file operation each, run as the command's user (so
// the sandbox's own permissions decide), exiting with a wire.ExitFile*
// status that says what kind of failure it was. Paths are absolute (the
// host makes a relative one so, from the sandbox's working directory).

var errTooLarge = errors.New("larger than the size bound")

// fileStatus is the exit status for err.
func fileStatus(err error) int {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errTooLarge):
		return agentapi.ExitFileTooLarge
	case errors.Is(err, fs.ErrNotExist):
		return agentapi.ExitFileNotFound
	case errors.As(err, &errno) && errno == syscall.EISDIR:
		return agentapi.ExitFileIsDir
	case errors.As(err, &errno) && errno == syscall.ENOTDIR:
		return agentapi.ExitFileNotDir
	case errors.As(err, &errno) && (errno == syscall.ENOTEMPTY || errno == syscall.EEXIST):
		return agentapi.ExitFileNotEmpty
	case errors.Is(err, fs.ErrPermission), errors.As(err, &errno) && errno == syscall.EROFS:
		return agentapi.ExitFilePermission
	}
	return 1
}

// ReadFile writes the regular file at path to w, refusing one over max
// bytes (a file that grows past it while read is cut and refused too).
func ReadFile(w io.Writer, path string, limit int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	case !fi.Mode().IsRegular():
		return fmt.Errorf("read %s: not a regular file (%s)", path, fi.Mode().Type())
	case fi.Size() > limit:
		return fmt.Errorf("read %s: %d bytes, %w of %d", path, fi.Size(), errTooLarge, limit)
	}
	n, err := io.Copy(w, io.LimitReader(f, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("read %s: it grew past %d bytes while read: %w", path, limit, errTooLarge)
	}
	return err
}

// WriteFile writes r (at most max bytes) to path, whole or not at all: to
// a new file beside it, renamed over it once complete, so no reader ever
// sees half of it. Missing parent directories are made (0755); a link at
// path is written through; mode < 0 keeps an existing file's mode (0644
// for a new one); an existing file's owner is kept when this runs as root.
func WriteFile(r io.Reader, path string, mode int64, limit int64) error {
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	old, err := os.Stat(target)
	switch {
	case err == nil && old.IsDir():
		return &fs.PathError{Op: "write", Path: path, Err: syscall.EISDIR}
	case err == nil && !old.Mode().IsRegular():
		return fmt.Errorf("write %s: not a regular file (%s)", path, old.Mode().Type())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".hsbx-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if n > limit {
		return fmt.Errorf("write %s: over %d bytes: %w", path, limit, errTooLarge)
	}
	perm := fs.FileMode(0o644)
	if old != nil {
		perm = old.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if st, ok := old.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
	}
	if mode >= 0 {
		perm = fs.FileMode(mode) & fs.ModePerm
		perm |= modeBits(mode)
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	done = true
	return nil
}

// modeBits is the setuid, setgid and sticky bits of a Unix mode m in
// Go's spelling.
func modeBits(m int64) fs.FileMode {
	var b fs.FileMode
	if m&0o4000 != 0 {
		b |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		b |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		b |= fs.ModeSticky
	}
	return b
}

// unixMode is fi's mode as a Unix mode's permission bits.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// ListDir writes one agentapi.FileEntry a line for each entry of directory
// path (links not followed), in the directory's order.
func ListDir(w io.Writer, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "list", Path: path, Err: syscall.ENOTDIR}
	}
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	enc := json.NewEncoder(w)
	for {
		ents, err := d.ReadDir(256)
		for _, e := range ents {
			info, ierr := e.Info()
			if ierr != nil {
				continue // gone since it was read
			}
			fe := agentapi.FileEntry{Name: e.Name(), Type: fileType(info.Mode()), Size: info.Size(),
				Mode: unixMode(info.Mode()), MTime: info.ModTime().UnixNano()}
			if fe.Type == "symlink" {
				fe.Target, _ = os.Readlink(filepath.Join(path, e.Name()))
			}
			if err := enc.Encode(fe); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// RemovePath removes path (a link, not what it points to); a directory
// with entries only when recursive. The root is never removed.
func RemovePath(path string, recursive bool) error {
	if filepath.Clean(path) == "/" {
		return errors.New("remove /: refused")
	}
	if base := filepath.Base(path); base == "." || base == ".." {
		// os.RemoveAll("d/..") empties d's parent before it fails.
		return fmt.Errorf("remove %s: refusing a path whose last element is a dot or two (name the directory itself)", path)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !recursive || !fi.IsDir() {
		return os.Remove(path)
	}
	return os.RemoveAll(path)
}

// runFileMode runs one file mode and returns its status.
func runFileMode(c agentapi.Call) int {
	var err error
	switch c := c.(type) {
	case agentapi.FileRead:
		err = ReadFile(os.Stdout, c.Path, c.Max)
	case agentapi.FileWrite:
		// Chunked: input cut short is an error, never a whole file.
		err = WriteFile(wire.Unchunked(os.Stdin), c.Path, c.Mode, c.Max)
		if err != nil {
			// The rest of the input is read (the host sends at most the
			// bound and one byte): kubectl exec -i does not end while
			// input it holds is unread, even after the process exited.
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
	case agentapi.FileList:
		err = ListDir(os.Stdout, c.Path)
	case agentapi.FileRemove:
		err = RemovePath(c.Path, c.Recursive)
	case agentapi.FileWatch:
		err = Watch(os.Stdout, c.Path, c.Recursive)
	default:
		err = fmt.Errorf("%s: not a file mode", c.Args()[0])
	}
	if err != nil {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
	}
	return fileStatus(err)
}
