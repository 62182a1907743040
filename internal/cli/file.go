package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/iocount"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/files"
)

// FileCmd reads, writes, lists, removes and watches files in a sandbox.
type FileCmd struct {
	Read  FileReadCmd  `cmd:"" help:"Write a file of the sandbox to stdout, byte for byte."`
	Write FileWriteCmd `cmd:"" help:"Write stdin to a file in the sandbox, whole or not at all; missing parent directories are made."`
	Ls    FileLsCmd    `cmd:"" help:"List a directory of the sandbox: name, type, size, mode, modification time."`
	Rm    FileRmCmd    `cmd:"" help:"Remove a file, link or empty directory of the sandbox (-r: a directory and everything in it)."`
	Watch FileWatchCmd `cmd:"" help:"Print each change under a directory of the sandbox (created, written, removed), a line each, until interrupted."`
}

// fileFlags are every file command's.
type fileFlags struct {
	taskFlag
	User string `short:"u" help:"Do it as this user of the sandbox (NAME, UID, NAME:GROUP or UID:GID), whose permissions then apply." placeholder:"USER"`
	Path string `arg:"" help:"The path in the sandbox; a relative one is taken from the sandbox's working directory." placeholder:"PATH"`
}

func (f *fileFlags) settingFlags() []config.Flag { return f.flags() }

// withSandbox runs do on the task's sandbox and ends a per-process one.
func (f *fileFlags) withSandbox(ctx context.Context, app *App, do func(*sandbox.Sandbox) error) error {
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	err = do(sb)
	if cerr := sb.Close(ctx); cerr != nil {
		app.warn(fmt.Sprintf("removing the per-process sandbox: %v", cerr))
	}
	return err
}

// FileReadCmd is `file read`.
type FileReadCmd struct {
	fileFlags
}

// Run implements the command.
func (c *FileReadCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		return files.Of(sb).Read(ctx, c.Path, app.Env.Stdout, files.Options{User: c.User})
	})
}

// FileWriteCmd is `file write`.
type FileWriteCmd struct {
	fileFlags
	Mode string `help:"The file's mode, in octal (default: an existing file's, else 0644)." placeholder:"MODE"`
}

// Run implements the command; --json prints {"path","bytes"}.
func (c *FileWriteCmd) Run(ctx context.Context, app *App) error {
	o := files.Options{User: c.User}
	if c.Mode != "" {
		m, err := strconv.ParseUint(c.Mode, 8, 32)
		if err != nil || m == 0 || m > 0o7777 {
			return &usageError{fmt.Errorf("--mode %q is not a file mode", c.Mode), "give it in octal, like 0644 or 755"}
		}
		o.Mode = files.FileModeOf(uint32(m))
	}
	in := &iocount.Reader{R: app.Env.Stdin}
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		if err := files.Of(sb).Write(ctx, c.Path, in, o); err != nil {
			return err
		}
		if app.G.JSON {
			b, _ := json.Marshal(struct {
				Path  string `json:"path"`
				Bytes int64  `json:"bytes"`
			}{files.Of(sb).Path(c.Path), in.N})
			fmt.Fprintln(app.Env.Stdout, string(b))
		}
		return nil
	})
}

// FileLsCmd is `file ls`.
type FileLsCmd struct {
	fileFlags
}

// fileJSON is an entry under --json.
type fileJSON struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"`
}

// Run implements the command.
func (c *FileLsCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		ents, err := files.Of(sb).List(ctx, c.Path, files.Options{User: c.User})
		if err != nil {
			return err
		}
		if app.G.JSON {
			out := make([]fileJSON, 0, len(ents))
			for _, e := range ents {
				out = append(out, fileJSON{Name: e.Name, Type: e.Type, Size: e.Size, Mode: fmt.Sprintf("%04o", files.UnixMode(e.Mode)),
					MTime: e.ModTime.UTC().Format(time.RFC3339Nano), Target: e.Target})
			}
			b, _ := json.Marshal(out)
			fmt.Fprintln(app.Env.Stdout, string(b))
			return nil
		}
		tw := tabwriter.NewWriter(app.Env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTYPE\tSIZE\tMODE\tMODIFIED")
		for _, e := range ents {
			name := safe(e.Name)
			if e.Target != "" {
				name += " -> " + safe(e.Target)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%04o\t%s\n", name, e.Type, e.Size, files.UnixMode(e.Mode), e.ModTime.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	})
}

// FileRmCmd is `file rm`.
type FileRmCmd struct {
	fileFlags
	Recursive bool `short:"r" help:"Remove a directory and everything in it."`
}

// Run implements the command.
func (c *FileRmCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		return files.Of(sb).Remove(ctx, c.Path, files.Options{User: c.User, Recursive: c.Recursive})
	})
}

// FileWatchCmd is `file watch`.
type FileWatchCmd struct {
	fileFlags
	Recursive bool `short:"r" help:"Watch subdirectories too (new ones as they appear)."`
}

// Run implements the command: text lines "EVENT PATH", or JSON lines
// {"event","path","dir"}; the first is "watching" (the watch is in place).
// It ends on a signal (exit 0... as interrupted) or when the directory goes.
func (c *FileWatchCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		err := files.Of(sb).Watch(ctx, c.Path, files.Options{User: c.User, Recursive: c.Recursive}, func(ev files.Event) {
			if app.G.JSON {
				b, _ := json.Marshal(ev)
				fmt.Fprintln(app.Env.Stdout, string(b))
				return
			}
			suffix := ""
			if ev.IsDir {
				suffix = "/"
			}
			fmt.Fprintf(app.Env.Stdout, "%s %s%s\n", ev.Op, safe(ev.Path), suffix)
		})
		if err == nil && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	})
}
