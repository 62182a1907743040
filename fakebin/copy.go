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

// cp supports what hsbx uses: `cp - REF:DIR`, a tar archive on stdin
// extracted into the container (running or stopped). Files land in the
// fake's state (files/<id>/...); exec of such a file runs it for real
// (the exec channel's agent).
func (f *fake) cp(args []string) int {
	if len(args) != 2 || args[0] != "-" {
		return f.usage("fake engine: only `cp - CONTAINER:DIR` is supported")
	}
	ref, dir, ok := strings.Cut(args[1], ":")
	if !ok || !strings.HasPrefix(dir, "/") {
		return f.usage(fmt.Sprintf("fake engine: want CONTAINER:/DIR, got %q", args[1]))
	}
	var id string
	if err := f.st.view(func(st *State) error {
		if c := st.find(ref); c != nil {
			id = c.ID
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	if id == "" {
		f.notFound(ref)
		return f.notFoundCode()
	}
	if f.env["FAKEENGINE_CP_FAIL"] != "" {
		fmt.Fprintf(f.stderr, "Error: %s\n", f.env["FAKEENGINE_CP_FAIL"])
		return 1
	}
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
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := f.containerFile(id, path.Join(dir, h.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return f.fail(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
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
	err := syscall.Exec(file, append([]string{"hsbx"}, cmd[1:]...), env)
	fmt.Fprintf(f.stderr, "fake engine: exec %s: %v\n", cmd[0], err)
	return 126, true
}
