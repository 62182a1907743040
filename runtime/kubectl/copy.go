package kubectl

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// copyInScript puts a tar stream where docker cp would put SRC for DST:
// $1 the destination, $2 "contents" (SRC ended in "/.": its contents into
// DST, made if missing) or "entry" (into DST when it is a directory, else
// as DST, its parent existing), $3 the archive's top-level name.
const copyInScript = `dst=$1; mode=$2; base=$3
if [ "$mode" = contents ]; then mkdir -p "$dst" && exec tar -x -f - -C "$dst"; fi
if [ -d "$dst" ]; then exec tar -x -f - -C "$dst"; fi
p=$(dirname "$dst")
if [ ! -d "$p" ]; then echo "hsbx: $p: No such file or directory" >&2; exit 2; fi
t=$(mktemp -d "$p/.hsbx-cp-XXXXXX") || exit 1
tar -x -f - -C "$t" && mv -f "$t/$base" "$dst"; r=$?
rm -rf "$t"
exit $r`

// CopyTo implements runtime.Runtime: hsbx tars the host path (files owned
// by root in the archive, as docker cp makes them) and `tar -x` in the Pod
// places it with docker cp's rules: into DST when it is a directory, as
// DST otherwise, SRC's contents when SRC ends in "/.".
func (r *Runtime) CopyTo(ctx context.Context, id, src, dst string) error {
	contents := strings.HasSuffix(src, "/.") || src == "."
	root := filepath.Clean(src)
	if _, err := os.Lstat(root); err != nil {
		return fmt.Errorf("%w: %v", runtime.ErrNoSuchPath, err)
	}
	base := filepath.Base(root)
	mode := "entry"
	if contents {
		mode, base = "contents", "."
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, root, base)) }()
	err := r.tar(ctx, id, []string{"/bin/sh", "-c", copyInScript, "hsbx-cp", path.Clean(dst), mode, base}, pr, nil)
	_ = pr.CloseWithError(errors.New("copy ended"))
	return err
}

// writeTar writes root (a file or a tree) as entries under name.
func writeTar(w io.Writer, root, name string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = path.Join(name, filepath.ToSlash(rel))
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// CopyFrom implements runtime.Runtime: `tar -c` in the Pod, extracted on
// the host with docker cp's rules (into DST when it is a directory, as DST
// otherwise, SRC's contents when SRC ends in "/."). Extraction never
// writes outside DST: absolute names, ".." and paths through a symlink are
// refused.
func (r *Runtime) CopyFrom(ctx context.Context, id, src, dst string) error {
	contents := strings.HasSuffix(src, "/.")
	dir, base := splitPath(path.Clean(src))
	target, strip := dst, ""
	switch st, err := os.Stat(dst); {
	case contents:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		strip = base
	case err == nil && st.IsDir():
		target = dst // the entry lands in it under its own name
	default:
		if _, err := os.Stat(filepath.Dir(dst)); err != nil {
			return fmt.Errorf("%w: %v", runtime.ErrNoSuchPath, err)
		}
		target, strip = filepath.Dir(dst), base
		base = filepath.Base(dst)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := extract(pr, target, strip, base, contents)
		_ = pr.CloseWithError(err)
		done <- err
	}()
	err := r.tar(ctx, id, []string{"tar", "-c", "-f", "-", "-C", dir, path.Base(path.Clean(src))}, nil, pw)
	_ = pw.CloseWithError(err)
	if xerr := <-done; err == nil {
		err = xerr
	}
	return err
}

// extract writes the archive under root. When strip is set, the leading
// name strip is replaced by rename (or dropped when contents).
func extract(r io.Reader, root, strip, rename string, contents bool) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if strip != "" {
			rest, ok := strings.CutPrefix(name, strip)
			if !ok || (rest != "" && rest[0] != '/') {
				return fmt.Errorf("archive entry %q is outside %s", h.Name, strip)
			}
			if contents {
				name = path.Clean("." + rest)
			} else {
				name = rename + rest
			}
		}
		if name == "." && h.Typeflag == tar.TypeDir {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || name == "." {
			return fmt.Errorf("archive entry %q would be written outside %s", h.Name, root)
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := noSymlinkBetween(root, filepath.Dir(p)); err != nil {
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
		case tar.TypeReg:
			if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() {
				return fmt.Errorf("%s exists and is not a regular file", p)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode)&fs.ModePerm)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
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
