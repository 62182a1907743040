// Package cparchive writes the tar archives docker cp reads and writes:
// the one shape every copy of hsbx's own carries, made on the host (a
// copy into a sandbox) and by the agent inside it (a copy out). It is
// linked by both sides and imports nothing of either.
package cparchive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Archive writes src as a tar stream of the shape `docker cp SRC -`
// makes, the one every copy of hsbx's own carries (the host's side of a
// copy into a Pod or through the agent, and the agent's side out of a
// sandbox): one top entry named after src's base, a link archived as a
// link; for "SRC/." the directory's contents, as "./NAME". Owners are
// root's (docker cp makes the files root's); sockets are left out (tar
// has no entry for them).
func Archive(w io.Writer, src string) error {
	tw := tar.NewWriter(w)
	root := filepath.Clean(src)
	name := filepath.Base(root)
	contents := strings.HasSuffix(src, "/.") || src == "."
	if contents {
		name = "."
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	if contents && !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", root)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
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
		if contents && rel != "." {
			h.Name = "./" + h.Name
		}
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
			_, err = io.Copy(tw, io.LimitReader(f, info.Size())) // a file growing meanwhile: what it was
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

// Over reports whether the regular files Archive(src) would carry hold
// more than bound bytes, walking no further than it must to know (their
// sizes, never their contents). A path that cannot be read is an error.
func Over(src string, bound int64) (bool, error) {
	var total int64
	stop := errors.New("over")
	err := filepath.WalkDir(filepath.Clean(src), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if total += info.Size(); total > bound {
			return stop
		}
		return nil
	})
	if errors.Is(err, stop) {
		return true, nil
	}
	return false, err
}
