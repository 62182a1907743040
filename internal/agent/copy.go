package agent

// Copies through the exec channel, for paths the engine's cp cannot reach
// (memory-backed mounts): the agent binary run as a command of the channel
// (`/proc/self/exe tar-out SRC`, `/proc/self/exe tar-in DST`) writes
// (cparchive.Archive) or reads a tar stream with the shapes and placement
// of `docker cp`.

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
)

// TarIn extracts the archive read from r at dst with `docker cp SRC
// ID:DST`'s placement. The archive's top entry is the source's base name
// (or "./" entries for "SRC/."): into dst when dst is a directory, else
// as dst itself (its parent must exist). Nothing is written outside the
// directory it extracts into (os.Root); links are made as they are, and
// an entry's missing parents as directories (as the engines' cp does).
// Entries it does not make — fifos, devices, sparse files — are passed
// over and named, after the rest is copied, in a *NotCopiedError.
func TarIn(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	root, contents, top, rename, err := placement(first, dst)
	if err != nil {
		return &PlacementError{err}
	}
	defer root.Close()
	var dirs []*tar.Header // their times are set last: what goes in them changes them
	var skipped []string
	for h := first; ; {
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		if !contents {
			name = rename + strings.TrimPrefix(name, top)
			if h.Typeflag == tar.TypeLink {
				h.Linkname = rename + strings.TrimPrefix(strings.TrimPrefix(path.Clean(h.Linkname), "./"), top)
			}
		}
		what := notCopied(h)
		switch {
		case name == "." || name == "":
		case what != "":
			skipped = append(skipped, fmt.Sprintf("%s (%s)", h.Name, what))
		default:
			if dir := path.Dir(name); dir != "." {
				if err := root.MkdirAll(dir, 0o755); err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
			}
			if err := place(root, tr, h, name); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if h.Typeflag == tar.TypeDir {
				h.Name = name
				dirs = append(dirs, h)
			}
		}
		if h, err = tr.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
	}
	for _, h := range slices.Backward(dirs) {
		if err := root.Chtimes(h.Name, h.ModTime, h.ModTime); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	if len(skipped) > 0 {
		return &NotCopiedError{Entries: skipped}
	}
	return nil
}

// NotCopiedError names the entries of an archive TarIn did not make (the
// rest was copied).
type NotCopiedError struct{ Entries []string }

func (e *NotCopiedError) Error() string {
	const shown = 10
	list := strings.Join(e.Entries[:min(len(e.Entries), shown)], ", ")
	if len(e.Entries) > shown {
		list += fmt.Sprintf(" and %d more", len(e.Entries)-shown)
	}
	return "not copied (the rest was): " + list + "; hsbx makes only files, directories and links"
}

// notCopied says what kind of entry h is when TarIn does not make it.
func notCopied(h *tar.Header) string {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeXHeader, tar.TypeXGlobalHeader:
		return ""
	case tar.TypeFifo:
		return "a fifo"
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeGNUSparse:
		return "a sparse file"
	}
	return fmt.Sprintf("an entry of type %q", h.Typeflag)
}

// PlacementError is a TarIn that wrote nothing: where the archive would
// go does not take it (no such directory, a directory onto a file), or
// cannot be opened.
type PlacementError struct{ Err error }

func (e *PlacementError) Error() string { return e.Err.Error() }
func (e *PlacementError) Unwrap() error { return e.Err }

// placement opens the directory TarIn extracts into for an archive whose
// first entry is first: with `contents` (SRC/.) its entries go in as they
// are named; else its top name, top, becomes rename.
func placement(first *tar.Header, dst string) (root *os.Root, contents bool, top, rename string, err error) {
	top, _, _ = strings.Cut(strings.TrimPrefix(path.Clean(first.Name), "./"), "/")
	contents = top == "." || strings.HasPrefix(first.Name, "./")
	fi, statErr := os.Stat(dst)
	var into string // extract into dir `into`; the top name becomes `rename`
	switch {
	case contents:
		if statErr != nil {
			if err := os.Mkdir(dst, 0o755); err != nil {
				return nil, false, "", "", err
			}
		} else if !fi.IsDir() {
			return nil, false, "", "", fmt.Errorf("cannot copy a directory's contents to %s: not a directory", dst)
		}
		into = dst
	case statErr == nil && fi.IsDir():
		// Into it, every entry under its own name (an archive streamed
		// in by the user may have several at the top).
		into, contents = dst, true
	case statErr == nil:
		if first.Typeflag == tar.TypeDir {
			return nil, false, "", "", fmt.Errorf("cannot copy a directory to %s: it is a file", dst)
		}
		into, rename = filepath.Dir(dst), filepath.Base(dst)
	case strings.HasSuffix(dst, "/"):
		return nil, false, "", "", fmt.Errorf("%s: no such directory", dst)
	default:
		parent := filepath.Dir(filepath.Clean(dst))
		if pfi, err := os.Stat(parent); err != nil || !pfi.IsDir() {
			return nil, false, "", "", fmt.Errorf("%s: no such directory", parent)
		}
		into, rename = parent, filepath.Base(filepath.Clean(dst))
	}
	root, err = os.OpenRoot(into)
	return root, contents, top, rename, err
}

// place makes one entry under root (which refuses names that would leave
// it, through ".." or a link).
func place(root *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	mode := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return root.Chmod(name, mode)
	case tar.TypeReg:
		_ = root.Remove(name) // a link in the way is replaced, never followed
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if err == nil {
			err = f.Chmod(mode) // exactly the archive's: the umask took bits off
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = root.Chtimes(name, h.ModTime, h.ModTime)
		}
		return err
	case tar.TypeSymlink:
		_ = root.Remove(name)
		if err := root.Symlink(h.Linkname, name); err != nil {
			return err
		}
		return linkTimes(root, name, h.ModTime)
	case tar.TypeLink:
		_ = root.Remove(name)
		return root.Link(strings.TrimPrefix(path.Clean(h.Linkname), "./"), name)
	}
	return nil // notCopied keeps every other kind from here
}
