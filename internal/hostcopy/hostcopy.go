// Package hostcopy writes what a sandbox sends (a tar stream of the
// engine's `cp ID:SRC -`, or `tar -c` in a Pod) onto the host, with docker
// cp's placement rules — into DST when it is a directory, as DST otherwise,
// SRC's contents when SRC ends in "/." — and rules of its own where docker
// cp's would let the sandbox reach past the destination:
//
//   - nothing is written outside the destination: absolute names, ".."
//     and paths through a symbolic link are refused;
//   - a symbolic link is made only when it points inside what was copied
//     (relative, and resolving there); others — "/etc/passwd", "/", "../.."
//     — are not made, and the copy reports them (LinksRefusedError) after
//     finishing the rest;
//   - a hard link only to a file this copy wrote; devices and fifos are
//     not made (reported the same way);
//   - runs of zeros become holes (a 2 GiB sparse file stays sparse), and
//     Options.MaxBytes bounds the data written;
//   - a copy that stops half-way says how far it got.
package hostcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// Options bound a copy.
type Options struct {
	// MaxBytes bounds the file data a copy may write (0: no bound).
	MaxBytes int64
}

// LinksRefusedError says the copy finished, except entries it would not
// make on the host: links pointing outside what was copied, hard links to
// files it did not write, devices and fifos.
type LinksRefusedError struct {
	Dst     string
	Refused []string // "name -> target" or "name (device)"
}

func (e *LinksRefusedError) Error() string {
	const show = 5
	list := strings.Join(e.Refused[:min(len(e.Refused), show)], ", ")
	if len(e.Refused) > show {
		list += fmt.Sprintf(", and %d more", len(e.Refused)-show)
	}
	return fmt.Sprintf("copied to %s, except %d entr%s not made on the host (links must point inside what was copied; no devices or fifos): %s",
		e.Dst, len(e.Refused), plural(len(e.Refused), "y", "ies"), list)
}

// ErrTooLarge says a copy would write more than Options.MaxBytes.
var ErrTooLarge = errors.New("the copy is larger than its bound")

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// CopyFrom places the archive that stream writes (of sandbox path src) at
// host path dst. The error is the engine's when it failed first, else
// the extraction's.
func CopyFrom(dst, src string, stream func(io.Writer) error, o Options) error {
	contents := strings.HasSuffix(src, "/.") || src == "."
	base := path.Base(path.Clean(src))
	x := extractor{opts: o, root: dst, strip: base, rename: base, top: base}
	switch st, err := os.Stat(dst); {
	case contents:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		x.strip, x.rename, x.top = "", "", "."
	case err == nil && st.IsDir():
		// the entry lands in it under its own name
	default:
		if _, err := os.Stat(filepath.Dir(dst)); err != nil {
			return fmt.Errorf("%w: %v", runtime.ErrNoSuchPath, err)
		}
		x.root = filepath.Dir(dst)
		x.rename, x.top = filepath.Base(dst), filepath.Base(dst)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := x.extract(pr)
		_ = pr.CloseWithError(err)
		done <- err
	}()
	err := stream(pw)
	_ = pw.CloseWithError(err)
	xerr := <-done
	if err != nil && (xerr == nil || errors.Is(xerr, err)) {
		return err // the engine failed first (a missing path, ...): its words
	}
	return x.finish(dst, xerr) // the extraction stopped first (the engine then saw a closed pipe)
}

// Extract writes the archive read from r under root: the leading name
// strip becomes rename (dropped when strip is ""), and the copied tree is
// root/rename. It is CopyFrom's extraction, for archives already at hand.
func Extract(r io.Reader, root, strip, rename string, o Options) error {
	top := rename
	if top == "" {
		top = "."
	}
	x := extractor{opts: o, root: root, strip: strip, rename: rename, top: top}
	return x.finish(root, x.extract(r))
}

type extractor struct {
	opts                     Options
	root, strip, rename, top string
	files                    int
	bytes                    int64
	written                  map[string]fs.FileInfo // regular files this copy wrote (archive names, mapped), as written
	dirs                     []dirTime              // directories made, their times set at the end
	links                    []string               // symbolic links made (host paths), checked at the end
	refused                  []string
}

// finish turns the extraction's outcome into the copy's error.
func (x *extractor) finish(dst string, err error) error {
	x.checkLinks()
	if err != nil {
		return fmt.Errorf("the copy stopped after %d file(s) (%d bytes), which stay in %s: %w", x.files, x.bytes, dst, err)
	}
	if len(x.refused) > 0 {
		return &LinksRefusedError{Dst: dst, Refused: x.refused}
	}
	return nil
}

// name maps an archive name to its place under root ("" = skip it).
func (x *extractor) name(h string) (string, error) {
	name := path.Clean(strings.TrimPrefix(h, "./"))
	if x.strip != "" {
		rest, ok := strings.CutPrefix(name, x.strip)
		if !ok || (rest != "" && rest[0] != '/') {
			return "", fmt.Errorf("archive entry %q is outside %s", h, x.strip)
		}
		name = x.rename + rest
		if x.rename == "" {
			name = path.Clean("." + rest)
		}
	}
	if name == "." {
		return "", nil
	}
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return "", fmt.Errorf("archive entry %q would be written outside %s", h, x.root)
	}
	return name, nil
}

// inside says whether archive-relative path p is within the copied tree.
func (x *extractor) inside(p string) bool {
	if x.top == "." {
		return p != ".." && !strings.HasPrefix(p, "../") && !path.IsAbs(p)
	}
	return p == x.top || strings.HasPrefix(p, x.top+"/")
}

func (x *extractor) extract(r io.Reader) error {
	x.written = map[string]fs.FileInfo{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// Last, deepest first: what went into a directory changed its time.
			for _, d := range slices.Backward(x.dirs) {
				_ = os.Chtimes(d.path, d.t, d.t)
			}
			return nil
		}
		if err != nil {
			return err
		}
		name, err := x.name(h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		p := filepath.Join(x.root, filepath.FromSlash(name))
		if err := noSymlinkBetween(x.root, filepath.Dir(p)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { // an archive may leave out directories
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			_ = os.Chmod(p, fs.FileMode(h.Mode)&fs.ModePerm|0o700)
			x.dirs = append(x.dirs, dirTime{p, h.ModTime})
		case tar.TypeReg:
			if x.opts.MaxBytes > 0 && x.bytes+h.Size > x.opts.MaxBytes {
				return fmt.Errorf("%w: %s would bring it past %d bytes", ErrTooLarge, name, x.opts.MaxBytes)
			}
			if err := x.file(p, h, tr); err != nil {
				return err
			}
			if st, err := os.Lstat(p); err == nil {
				x.written[name] = st
			}
		case tar.TypeSymlink:
			delete(x.written, name) // a later hard link to this name would be to the link
			target := path.Join(path.Dir(name), h.Linkname)
			if path.IsAbs(h.Linkname) || !x.inside(path.Clean(target)) {
				x.refused = append(x.refused, name+" -> "+h.Linkname)
				continue
			}
			if err := removeNonDir(p); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
			x.links = append(x.links, p)
		case tar.TypeLink:
			to, err := x.name(h.Linkname)
			if err != nil || to == "" || !x.holds(to) {
				x.refused = append(x.refused, name+" => "+h.Linkname+" (hard link to what is not a regular file this copy wrote)")
				continue
			}
			if err := removeNonDir(p); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(x.root, filepath.FromSlash(to)), p); err != nil {
				return err
			}
			if st, err := os.Lstat(p); err == nil {
				x.written[name] = st
			}
			x.files++
		default:
			x.refused = append(x.refused, fmt.Sprintf("%s (%s)", name, kind(h.Typeflag)))
		}
	}
}

// holds says whether the archive name to is still the regular file this
// copy wrote there: not replaced since by a link, a directory or anything
// else (a hard link to a symlink would make the symlink's target, read
// from the hard link's directory, reachable from inside the copy).
func (x *extractor) holds(to string) bool {
	was, ok := x.written[to]
	if !ok {
		return false
	}
	st, err := os.Lstat(filepath.Join(x.root, filepath.FromSlash(to)))
	return err == nil && st.Mode().IsRegular() && os.SameFile(st, was)
}

func kind(t byte) string {
	switch t {
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar type %q", t)
}

// removeNonDir clears p for a link: a file or link there goes, a
// directory stays (and the link fails).
func removeNonDir(p string) error {
	if st, err := os.Lstat(p); err == nil && !st.IsDir() {
		return os.Remove(p)
	}
	return nil
}

// file writes one regular file, never through a link at its name, with
// runs of zeros left as holes.
func (x *extractor) file(p string, h *tar.Header, r io.Reader) error {
	if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file", p)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noFollow, fs.FileMode(h.Mode)&fs.ModePerm)
	if err != nil {
		return err
	}
	n, err := writeSparse(f, r)
	x.bytes += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The file just made at p (no link at its name, none between):
		// its time as the sandbox had it, as the engine's cp keeps it
		// (where the file system takes it).
		_ = os.Chtimes(p, h.ModTime, h.ModTime)
	}
	if err != nil {
		return err
	}
	x.files++
	return nil
}

type dirTime struct {
	path string
	t    time.Time
}

// holeBlock is the unit writeSparse checks for zeros.
const holeBlock = 64 << 10

// writeSparse copies r to f, seeking over whole blocks of zeros so the
// file system keeps them as holes, and sets the size at the end.
func writeSparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, holeBlock)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if allZero(buf[:n]) {
				if _, serr := f.Seek(int64(n), io.SeekCurrent); serr != nil {
					return off, serr
				}
			} else if _, werr := f.Write(buf[:n]); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return off, f.Truncate(off)
		}
		if err != nil {
			return off, err
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkLinks removes a link that resolves outside the copied tree on the
// host after all (through other links the archive made), and reports it.
func (x *extractor) checkLinks() {
	if len(x.links) == 0 {
		return
	}
	top, err := filepath.EvalSymlinks(filepath.Join(x.root, filepath.FromSlash(x.top)))
	if err != nil {
		return
	}
	for _, l := range x.links {
		to, err := filepath.EvalSymlinks(l)
		if err != nil {
			continue // dangling: it points at nothing on the host
		}
		if to != top && !strings.HasPrefix(to, top+string(filepath.Separator)) {
			_ = os.Remove(l)
			rel, _ := filepath.Rel(x.root, l)
			t, _ := os.Readlink(l)
			x.refused = append(x.refused, filepath.ToSlash(rel)+" -> "+t+" (resolves outside through other links)")
		}
	}
}

// noSymlinkBetween refuses to write under dir when a directory between
// root and dir is a symlink (an archive could otherwise lead a file out).
func noSymlinkBetween(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return err
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("refusing to write through symlink %s", p)
		}
	}
	return nil
}
