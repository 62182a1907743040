package cli

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
)

// CpCmd copies files between the host and the task's sandbox.
type CpCmd struct {
	taskFlag
	Src string `arg:"" name:"SRC" help:"What to copy: a host path, or :PATH in the sandbox; - reads a tar archive from stdin."`
	Dst string `arg:"" name:"DST" help:"Where to: a host path, or :PATH in the sandbox; - writes a tar archive to stdout."`
}

// Help is shown under the usage line.
func (c *CpCmd) Help() string {
	return `Exactly one side names the sandbox, with a leading colon, as docker cp does:

  hsbx cp ./input.csv :/workspace/        into the sandbox
  hsbx cp :/workspace/out ./results       out of it (a file or a directory tree)
  tar -c dir | hsbx cp - :/workspace      a tar archive from stdin
  hsbx cp :/workspace/out - | tar -t      a tar archive to stdout

The engine's cp does the work and streams it, on a running or a stopped
sandbox; copying in creates the sandbox when the task has none. With the
sandbox's exec channel up, a copy of at most copy_channel_max (4m) goes
through hsbx's agent instead, with no engine call and the same result.
A relative sandbox path is taken from the sandbox's working directory
(the cwd setting, where exec runs commands). An existing directory as DST
receives SRC inside it; SRC/. copies a directory's contents. Memory-backed paths (/tmp, /var/tmp, /run) the engine cannot
reach on docker go through the agent; in a stopped sandbox, or with the
channel off, they are refused (see docs/copying.md).`
}

// Run implements the command.
func (c *CpCmd) Run(ctx context.Context, app *App) error {
	srcIn, dstIn := strings.HasPrefix(c.Src, ":"), strings.HasPrefix(c.Dst, ":")
	if srcIn == dstIn {
		return &exitError{code: ExitUsage, err: errors.New("cp: name the sandbox side of exactly one argument with a leading colon (hsbx cp ./file :/workspace/ or hsbx cp :/workspace/file .)")}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	switch {
	case dstIn && c.Src == "-":
		err = sb.Copies().InArchive(ctx, c.Dst[1:], app.Env.Stdin)
	case dstIn:
		err = sb.Copies().In(ctx, app.hostPath(c.Src), c.Dst[1:])
	case c.Dst == "-":
		err = sb.Copies().OutArchive(ctx, c.Src[1:], app.Env.Stdout)
	default:
		err = sb.Copies().Out(ctx, c.Src[1:], app.hostPath(c.Dst))
	}
	return err
}

// hostPath is p from the caller's directory (Main's Cwd, not the
// process's).
func (a *App) hostPath(p string) string {
	if filepath.IsAbs(p) || a.Env.Cwd == "" {
		return p
	}
	abs := filepath.Join(a.Env.Cwd, p)
	switch { // keep what cp reads from the spelling
	case strings.HasSuffix(p, "/."):
		abs += "/."
	case strings.HasSuffix(p, "/") && abs != "/":
		abs += "/"
	}
	return abs
}
