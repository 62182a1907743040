package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/background"
)

// BgCmd starts and handles background processes.
type BgCmd struct {
	Start  BgStartCmd  `cmd:"" help:"Start a command in the background and print its id at once; it outlives hsbx, its output kept in the sandbox."`
	Ls     BgLsCmd     `cmd:"" help:"List the background processes (running, ended, lost) with their exit status."`
	Output BgOutputCmd `cmd:"" help:"Print a background process's output so far (-f: and what follows, until it ends)."`
	Wait   BgWaitCmd   `cmd:"" help:"Wait until a background process ends; exit with its status."`
	Kill   BgKillCmd   `cmd:"" help:"Send a signal (default KILL) to a background process and everything it started."`
}

// bgFlags are every bg command's.
type bgFlags struct {
	taskFlag
	User string `short:"u" help:"The sandbox user the processes belong to (NAME, UID, NAME:GROUP or UID:GID); each user sees its own." placeholder:"USER"`
}

func (f *bgFlags) settingFlags() []config.Flag { return f.flags() }

func (f *bgFlags) withSandbox(ctx context.Context, app *App, do func(*sandbox.Sandbox) error) error {
	return (&fileFlags{taskFlag: f.taskFlag}).withSandbox(ctx, app, do)
}

// BgStartCmd is `bg start`.
type BgStartCmd struct {
	bgFlags
	Workdir string   `short:"w" help:"Working directory in the sandbox; relative to the sandbox's working directory." placeholder:"DIR"`
	Env     []string `short:"e" sep:"none" help:"Set K=V, or pass K from your environment; repeatable (as exec's -e)." placeholder:"K[=V]"`
	Cmd     []string `arg:"" passthrough:"partial" help:"The command and its arguments (after --)." placeholder:"CMD"`
}

// Run implements the command: the id on stdout (--json: {"id"}).
func (c *BgStartCmd) Run(ctx context.Context, app *App) error {
	argv := c.Cmd
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return &exitError{code: ExitUsage, err: errors.New("bg start: no command given (hsbx bg start [flags] -- CMD [ARG...])")}
	}
	env, err := envValues(app, c.Env)
	if err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		p, err := background.Of(sb).Start(ctx, sandbox.Command{Argv: argv, Env: env, WorkDir: c.Workdir, User: c.User})
		var ee *sandbox.ExitError
		if errors.As(err, &ee) {
			_, _ = app.Env.Stderr.Write(ee.Stderr)
			return &exitError{code: ee.Code}
		}
		if err != nil {
			return err
		}
		if app.G.JSON {
			fmt.Fprintf(app.Env.Stdout, "{\"id\":%q}\n", p.ID)
		} else {
			fmt.Fprintln(app.Env.Stdout, p.ID)
		}
		return nil
	})
}

// BgLsCmd is `bg ls`.
type BgLsCmd struct {
	bgFlags
}

// Run implements the command.
func (c *BgLsCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		list, err := background.Of(sb).List(ctx, c.User)
		if err != nil {
			return err
		}
		if app.G.JSON {
			if list == nil {
				list = []background.Info{}
			}
			b, _ := json.Marshal(list)
			fmt.Fprintln(app.Env.Stdout, string(b))
			return nil
		}
		writeProcesses(app.Env.Stdout, list)
		return nil
	})
}

func writeProcesses(w io.Writer, list []background.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPID\tSTATE\tEXIT\tSTARTED\tOUTPUT\tCOMMAND")
	for _, p := range list {
		state, exit := "ended", "-"
		switch {
		case p.Running:
			state = "running"
		case p.Lost:
			state = "lost"
		}
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", safe(p.ID), p.PID, state, exit, p.Started.Local().Format("2006-01-02 15:04:05"),
			p.OutputBytes, safe(strings.Join(p.Argv, " ")))
	}
	_ = tw.Flush()
}

// BgOutputCmd is `bg output`.
type BgOutputCmd struct {
	bgFlags
	Follow bool   `short:"f" help:"Go on printing what it writes until it ends (or until interrupted)."`
	From   int64  `help:"Start at this byte of all it wrote (a previous output's end: bg ls --json's output_bytes)." placeholder:"N" default:"0"`
	ID     string `arg:"" help:"The background process's id." placeholder:"ID"`
}

// Run implements the command: its output's bytes on stdout; when some
// were dropped, one line saying so on stderr.
func (c *BgOutputCmd) Run(ctx context.Context, app *App) error {
	if c.From < 0 {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--from %d: want N >= 0", c.From)}
	}
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		err := background.Of(sb).Get(c.ID, c.User).Output(ctx, app.Env.Stdout, background.OutputOptions{From: c.From, Follow: c.Follow, Dropped: app.Env.Stderr})
		if err == nil && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	})
}

// BgWaitCmd is `bg wait`.
type BgWaitCmd struct {
	bgFlags
	ID string `arg:"" help:"The background process's id." placeholder:"ID"`
}

// Run implements the command: the process's exit status is hsbx's
// (--json: its ProcessInfo on stdout, exit 0); one whose end is not known
// (lost) is an error.
func (c *BgWaitCmd) Run(ctx context.Context, app *App) error {
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		info, err := background.Of(sb).Get(c.ID, c.User).Wait(ctx)
		if err != nil {
			return err
		}
		if app.G.JSON {
			b, _ := json.Marshal(info)
			fmt.Fprintln(app.Env.Stdout, string(b))
			return nil
		}
		if info.ExitCode == nil {
			return fmt.Errorf("background process %s was lost (the sandbox restarted, or its supervisor was killed): how it ended is not known", c.ID)
		}
		if *info.ExitCode != 0 {
			return &exitError{code: *info.ExitCode}
		}
		return nil
	})
}

// BgKillCmd is `bg kill`.
type BgKillCmd struct {
	bgFlags
	Signal string `short:"s" help:"The signal: a name (TERM, INT, HUP, KILL, ...) or a number." default:"KILL" placeholder:"SIG"`
	ID     string `arg:"" help:"The background process's id." placeholder:"ID"`
}

var signalNames = map[string]syscall.Signal{"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": 10, "USR2": 12, "STOP": 19, "CONT": 18}

// Run implements the command (--json: {"reached": N}).
func (c *BgKillCmd) Run(ctx context.Context, app *App) error {
	name := strings.TrimPrefix(strings.ToUpper(c.Signal), "SIG")
	sig, ok := signalNames[name]
	if n, err := strconv.Atoi(c.Signal); err == nil && n > 0 && n <= 64 {
		sig, ok = syscall.Signal(n), true
	}
	if !ok {
		return &usageError{fmt.Errorf("--signal %q is not a signal", c.Signal), "give a name (TERM, INT, HUP, KILL, USR1, ...) or a number"}
	}
	return c.withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		n, err := background.Of(sb).Get(c.ID, c.User).Signal(ctx, sig)
		if err != nil {
			return err
		}
		if app.G.JSON {
			fmt.Fprintf(app.Env.Stdout, "{\"reached\":%d}\n", n)
		}
		return nil
	})
}
