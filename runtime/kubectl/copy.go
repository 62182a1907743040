package kubectl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hsbx/hsbx/internal/cparchive"
	"github.com/hsbx/hsbx/internal/hostcopy"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
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
	go func() { pw.CloseWithError(cparchive.Archive(pw, src)) }()
	err := r.tar(ctx, id, []string{"/bin/sh", "-c", copyInScript, "hsbx-cp", path.Clean(dst), mode, base}, pr, nil)
	_ = pr.CloseWithError(errors.New("copy ended"))
	return err
}

// CopyFrom implements runtime.Runtime: `tar -c` in the Pod (CopyOut),
// placed on the host by internal/hostcopy (docker cp's rules; nothing
// outside DST, links only inside what was copied).
func (r *Runtime) CopyFrom(ctx context.Context, id, src, dst string) error {
	return hostcopy.CopyFrom(dst, src, func(w io.Writer) error { return r.CopyOut(ctx, id, src, w) }, hostcopy.Options{})
}

// CopyIn implements runtime.Runtime: the archive streams into `tar -x` in
// the Pod (the image needs tar, as for `kubectl cp`).
func (r *Runtime) CopyIn(ctx context.Context, id, dir string, archive io.Reader) error {
	return r.tar(ctx, id, []string{"tar", "-x", "-f", "-", "-C", dir}, archive, nil)
}

// CopyOut implements runtime.Runtime: `tar -c` in the Pod streams out.
func (r *Runtime) CopyOut(ctx context.Context, id, src string, w io.Writer) error {
	dir, base := splitPath(src)
	return r.tar(ctx, id, []string{"tar", "-c", "-f", "-", "-C", dir, base}, nil, w)
}

func splitPath(p string) (dir, base string) {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

func (r *Runtime) tar(ctx context.Context, id string, cmd []string, in io.Reader, out io.Writer) error {
	var errb bytes.Buffer
	if out == nil {
		out = io.Discard
	}
	code, err := r.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: cmd, Stdin: in, Interactive: in != nil, Stdout: out, Stderr: &errb,
		Timeout: enginecli.CopyTimeout * r.timeout})
	if err != nil {
		return err
	}
	if code != 0 {
		kind := runtime.ErrEngine
		if strings.Contains(strings.ToLower(errb.String()), "no such file or directory") {
			kind = runtime.ErrNoSuchPath
		}
		return &runtime.EngineError{Kind: kind, Argv: r.argv(append([]string{"exec", id, "--"}, cmd...)...), ExitCode: code, Stderr: strings.TrimSpace(errb.String())}
	}
	return nil
}
