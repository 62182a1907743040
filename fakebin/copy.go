package fakebin

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// cp supports the four forms hsbx uses, on a running or stopped
// container: `cp - REF:DIR` (a tar archive on stdin extracted into DIR),
// `cp REF:SRC -` (a tar archive of SRC on stdout), and `cp [--] HOST
// REF:DST` / `cp [--] REF:SRC HOST` with the engines' semantics (into DST
// when it is a directory; "SRC/." copies a directory's contents). The
// container's files live in the fake's state (files/<id>/...), the image's
// directories (imageDirs) besides. A destination's parent must exist, as
// in the engines. Exec of such a file runs it for real (the exec channel's
// agent).
func (f *fake) cp(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) != 2 {
		return f.usage(fmt.Sprintf("\"%s cp\" requires exactly 2 arguments", f.name))
	}
	srcRef, srcPath, srcIn := containerSide(args[0])
	dstRef, dstPath, dstIn := containerSide(args[1])
	if srcIn == dstIn {
		return f.usage("copying between containers is not supported")
	}
	ref := srcRef
	if dstIn {
		ref = dstRef
	}
	var id string
	ownKernel := false
	if err := f.st.view(func(st *State) error {
		if c := st.find(ref); c != nil {
			id = c.ID
			ownKernel = c.State == "running" && runtimeOf(c) != "runc"
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	if id == "" {
		f.notFound(ref)
		return f.notFoundCode()
	}
	if dstIn && ownKernel {
		// The fake's runtimes but runc behave as gVisor did under the real
		// engines (measured): the engine writes the host's view of the
		// sandbox's files, which its processes do not see. docker's cp
		// succeeds and nothing shows inside; podman's fails.
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: 2 errors occurred:\n\t* copying to container: copier: put: error creating %q: copier: put: error opening file %q for writing: open %s: read-only file system\n\t* io: read/write on closed pipe\n", dstPath, dstPath, dstPath)
			return 125
		}
		if args[0] == "-" {
			_, _ = io.Copy(io.Discard, f.stdin)
		}
		return 0
	}
	if f.env["FAKEENGINE_CP_FAIL"] != "" {
		fmt.Fprintf(f.stderr, "Error: %s\n", f.env["FAKEENGINE_CP_FAIL"])
		return 1
	}
	switch {
	case args[0] == "-":
		if !f.containerDir(id, dstPath) {
			if f.dialect == "podman" {
				fmt.Fprintln(f.stderr, "Error: destination must be a directory when copying from stdin")
				return 125
			}
			fmt.Fprintf(f.stderr, "destination %q must be a directory\n", args[1])
			return 1
		}
		return f.extract(id, dstPath)
	case args[1] == "-":
		src := f.containerFile(id, srcPath)
		if _, err := os.Lstat(src); err != nil {
			return f.noSuchPath(srcPath, ref)
		}
		tw := tar.NewWriter(f.stdout)
		name := path.Base(path.Clean("/" + srcPath))
		if strings.HasSuffix(srcPath, "/.") {
			// Contents: docker names them "./x" (with a "./" entry),
			// podman "x" (measured on docker 20.10 and podman 4.3).
			name = "."
			if f.dialect == "podman" {
				name = ""
			}
		}
		if err := tarTree(tw, src, name); err != nil {
			return f.fail(err)
		}
		if err := tw.Close(); err != nil {
			return f.fail(err)
		}
		return 0
	case dstIn:
		if _, err := os.Lstat(args[0]); err != nil {
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: %q could not be found on the host: no such file or directory\n", args[0])
				return 125
			}
			fmt.Fprintf(f.stderr, "lstat %s: no such file or directory\n", args[0])
			return 1
		}
		if parent := path.Dir(path.Clean("/" + dstPath)); !f.containerDir(id, dstPath) && !f.containerDir(id, parent) {
			if f.dialect == "podman" {
				return f.noSuchPath(dstPath, ref)
			}
			return f.noSuchPath(parent, ref)
		}
		return f.copyTree(args[0], f.containerFile(id, dstPath), f.containerDir(id, dstPath), dstPath)
	default:
		src := f.containerFile(id, srcPath)
		if _, err := os.Lstat(src); err != nil {
			return f.noSuchPath(srcPath, ref)
		}
		if strings.HasSuffix(srcPath, "/.") {
			src += "/."
		}
		st, err := os.Stat(args[1])
		return f.copyTree(src, args[1], err == nil && st.IsDir(), args[1])
	}
}

// imageDirs are the directories every fake container has.
var imageDirs = map[string]bool{"/": true, "/bin": true, "/dev": true, "/etc": true, "/home": true, "/proc": true,
	"/root": true, "/run": true, "/sys": true, "/tmp": true, "/usr": true, "/var": true, "/var/tmp": true, "/workspace": true}

// containerDir reports whether p is a directory in container id.
func (f *fake) containerDir(id, p string) bool {
	if imageDirs[path.Clean("/"+p)] {
		return true
	}
	st, err := os.Stat(f.containerFile(id, p))
	return err == nil && st.IsDir()
}

// containerSide splits "REF:PATH"; a host path has no colon before its
// first slash.
func containerSide(arg string) (ref, p string, ok bool) {
	ref, p, ok = strings.Cut(arg, ":")
	if !ok || ref == "" || strings.Contains(ref, "/") {
		return "", "", false
	}
	return ref, p, true
}

func (f *fake) noSuchPath(p, ref string) int {
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: %q could not be found on container %s: no such file or directory\n", p, ref)
		return 125
	}
	fmt.Fprintf(f.stderr, "Error response from daemon: Could not find the file %s in container %s\n", p, ref)
	return 1
}

// extract unpacks the tar archive on stdin into dir of container id.
func (f *fake) extract(id, dir string) int {
	tr := tar.NewReader(f.stdin)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(f.stderr, "Error: reading the archive: %v\n", err)
			return 1
		}
		dst := f.containerFile(id, path.Join(dir, h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return f.fail(err)
			}
			continue
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return f.fail(err)
		}
		// As docker's archive.Unpack: what is there goes first, so a file
		// is a new one, written while no one can run it, never rewritten
		// in place (a running binary's would fail with "text file busy").
		_ = os.Remove(dst)
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode).Perm())
		if err != nil {
			return f.fail(err)
		}
		_, err = io.Copy(out, tr)
		out.Close()
		if err != nil {
			return f.fail(err)
		}
	}
}

// copyTree copies src to dst with cp's rules: into dst when dst is an
// existing directory, a directory's contents when src ends in "/.".
func (f *fake) copyTree(src, dst string, dstDir bool, shown string) int {
	contents := strings.HasSuffix(src, "/.")
	st, err := os.Stat(dst)
	switch {
	case dstDir && !contents:
		dst = filepath.Join(dst, filepath.Base(filepath.Clean(src)))
	case err == nil && !st.IsDir():
		if sst, serr := os.Stat(src); serr == nil && sst.IsDir() {
			return f.usage(fmt.Sprintf("cannot copy a directory to a file: %s", shown))
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return f.fail(err)
	}
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case info.Mode().IsRegular():
			return copyFile(p, to, info.Mode().Perm())
		case info.Mode()&os.ModeSymlink != 0:
			// docker cp keeps a link as it is, wherever it points.
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			_ = os.Remove(to)
			return os.Symlink(link, to)
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	return 0
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// tarTree writes src (a file or a directory tree) to tw under name.
func tarTree(tw *tar.Writer, src, name string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		link := ""
		if info.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		switch name {
		case ".":
			h.Name = "./" + filepath.ToSlash(rel)
			if rel == "." {
				h.Name = "./"
			}
		case "":
			if rel == "." {
				return nil // podman sends no entry for the directory itself
			}
			h.Name = filepath.ToSlash(rel)
		default:
			h.Name = path.Join(name, filepath.ToSlash(rel))
		}
		if d.IsDir() && !strings.HasSuffix(h.Name, "/") {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			_, err = io.Copy(tw, in)
			return err
		}
		return nil
	})
}

// containerFile is where the fake keeps file p of container id.
func (f *fake) containerFile(id, p string) string {
	return f.st.path(filepath.Join("files", id, filepath.FromSlash(path.Clean("/"+p))))
}

// execCopied replaces the exec child with a file copied into the
// container, if cmd names one: argv[0] becomes "hsbx", so a copied test
// binary dispatches to hsbx's main as the real one would. ok false: no
// such file.
func (f *fake) execCopied(c *Container, cmd []string, wd string, env []string) (code int, ok bool) {
	if len(cmd) == 0 || !strings.HasPrefix(cmd[0], "/") {
		return 0, false
	}
	file := f.containerFile(c.ID, cmd[0])
	if _, err := os.Stat(file); err != nil {
		return 0, false
	}
	if wd != "" && wd != "/" {
		_ = os.Chdir(os.TempDir())
	}
	err := syscall.Exec(file, cmd, env) // argv[0] as the engines give it: the path
	fmt.Fprintf(f.stderr, "fake engine: exec %s: %v\n", cmd[0], err)
	return 126, true
}
