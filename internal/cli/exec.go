package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/sandbox"
)

// ExecCmd runs a command in a sandbox.
type ExecCmd struct {
	taskFlag
	Workdir     string   `short:"w" help:"Working directory in the sandbox; relative to the sandbox's working directory (the cwd setting)." placeholder:"DIR"`
	Env         []string `short:"e" sep:"none" help:"Set K=V (taken verbatim: commas and = are part of V), or pass K from your environment; repeatable. Values never appear on any command line; names the engine client reads (PATH, HOME, DOCKER_*, LD_*, ...) reach the command and never the client (through the exec channel, or an env file read from a pipe)." placeholder:"K[=V]"`
	Timeout     string   `help:"Kill the command (in the sandbox) after this long and exit 124: a duration like 30s, or seconds (sandbox.timeout; env TERMINAL_TIMEOUT; 0 = none)." placeholder:"DUR"`
	User        string   `short:"u" help:"Run as this user of the sandbox: NAME, UID, NAME:GROUP or UID:GID, looked up in the sandbox's /etc/passwd and /etc/group as the engine's exec --user does (one it lacks: exit 126, kind no_such_user)." placeholder:"USER"`
	Interactive bool     `short:"i" help:"Keep stdin open."`
	TTY         bool     `short:"t" help:"Allocate a terminal."`
	MaxOutput   string   `help:"With --json: keep at most this much of each of stdout and stderr in the result (bytes, or like 64k, 4m; default 1m; 0 keeps none); the rest is counted, not kept." placeholder:"SIZE"`
	Cmd         []string `arg:"" passthrough:"partial" help:"The command and its arguments (after --; everything before -- is hsbx's)." placeholder:"CMD"`
}

func (c *ExecCmd) settingFlags() []config.Flag {
	return append(c.flags(), given(config.Flag{Key: "sandbox.timeout", Value: c.Timeout, Name: "--timeout"})...)
}

// Run implements the command: one engine call when the sandbox is up.
func (c *ExecCmd) Run(ctx context.Context, app *App) error {
	argv := c.Cmd
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return &exitError{code: ExitUsage, err: errors.New("exec: no command given (hsbx exec [flags] -- CMD [ARG...])")}
	}
	env, err := c.envValues(app)
	if err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	cmd := sandbox.Command{
		Argv: argv, WorkDir: c.Workdir, Env: env, Interactive: c.Interactive, TTY: c.TTY,
		Timeout: app.Cfg.Sandbox.Timeout.Value, User: c.User,
	}
	if app.G.JSON {
		return execJSON(ctx, app, cmd, c.MaxOutput)
	}
	return runInSandbox(ctx, app, cmd)
}

// execJSON runs cmd with its output kept for one Result on stdout.
func execJSON(ctx context.Context, app *App, cmd sandbox.Command, maxOutput string) error {
	limit, err := parseMaxOutput(maxOutput)
	if err != nil {
		return err
	}
	if cmd.TTY {
		return &usageError{errors.New("--json and -t: a terminal's output cannot be kept apart as stdout and stderr"), "drop -t (or --json)"}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	j := newJSONRun(limit)
	cmd.Stdout, cmd.Stderr = &j.out, &j.err
	if cmd.Interactive {
		cmd.Stdin = app.Env.Stdin
	}
	code, err := sb.Exec(ctx, cmd)
	if cerr := sb.Close(ctx); cerr != nil {
		app.warn(fmt.Sprintf("removing the per-process sandbox: %v", cerr))
	}
	r := j.result(code)
	if err != nil && !interrupted(ctx, &r, err) {
		return err
	}
	return app.printResult(r)
}

// envValues turns -e K=V and -e K into values (K from the caller's env).
func (c *ExecCmd) envValues(app *App) (map[string]string, error) { return envValues(app, c.Env) }

// envValues reads -e's K=V and K (from the caller's environment).
func envValues(app *App, list []string) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range list {
		k, v, hasValue := strings.Cut(e, "=")
		if k == "" {
			return nil, fmt.Errorf("-e %q: want K=V or K", e)
		}
		if !hasValue {
			var ok bool
			if v, ok = app.lookupEnv(k); !ok {
				continue // as docker does: an unset name is not passed
			}
		}
		env[k] = v
	}
	return env, nil
}

// runInSandbox runs cmd with the process's stdio, then ends the sandbox
// handle (removing a per-process sandbox) and maps the outcome to an exit.
func runInSandbox(ctx context.Context, app *App, cmd sandbox.Command) error {
	sb, err := app.execSandbox(ctx)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = app.Env.Stdin, app.Env.Stdout, app.Env.Stderr
	if !cmd.Interactive {
		cmd.Stdin = nil // as `docker exec` without -i: the command gets no input
	}
	code, err := sb.Exec(ctx, cmd)
	if cerr := sb.Close(ctx); cerr != nil {
		fmt.Fprintf(app.Env.Stderr, "hsbx: removing the per-process sandbox: %v\n", cerr)
	}
	var ie *sandbox.InterruptedError
	var we *sandbox.WriterError
	switch {
	case errors.As(err, &ie) && errors.As(ie.Cause, &we):
		// The reader went away (| head): the command was stopped in the
		// sandbox; exit as a process killed by SIGPIPE would, quietly.
		app.Log.Info("output closed; command stopped", "error", we, "killed", killedNote(ie))
		if ie.KillErr != nil {
			fmt.Fprintf(app.Env.Stderr, "hsbx: %v; %s\n", we, killedNote(ie))
		}
		return &exitError{code: ExitBrokenPipe}
	case errors.As(err, &ie) && errors.Is(ie.Cause, sandbox.ErrCommandTimeout):
		fmt.Fprintf(app.Env.Stderr, "hsbx: command timed out after %s; %s\n", cmd.Timeout, killedNote(ie))
		return &exitError{code: ExitTimeout}
	case errors.As(err, &ie):
		fmt.Fprintf(app.Env.Stderr, "hsbx: %v; %s\n", ie.Cause, killedNote(ie))
		return &exitError{code: exitCode(ctx, ie.Cause)}
	case err != nil:
		return err
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

func killedNote(ie *sandbox.InterruptedError) string {
	if ie.KillErr != nil {
		return fmt.Sprintf("its processes in the sandbox could not be killed: %v", ie.KillErr)
	}
	return fmt.Sprintf("killed its %d process(es) in the sandbox", ie.Killed)
}

// ShellCmd opens an interactive login shell.
type ShellCmd struct {
	taskFlag
	Workdir string `short:"w" help:"Working directory in the sandbox; relative to the sandbox's working directory (the cwd setting)." placeholder:"DIR"`
}

// Run implements the command: bash if the image has it, else sh; a TTY
// when stdin and stdout are terminals.
func (c *ShellCmd) Run(ctx context.Context, app *App) error {
	tty := isTerminal(app.Env.Stdin) && isTerminal(app.Env.Stdout)
	return runInSandbox(ctx, app, sandbox.Command{
		Argv:    []string{"sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`},
		WorkDir: c.Workdir, Interactive: true, TTY: tty,
	})
}

// isTerminal reports whether v is a terminal (isatty: /dev/null is a
// character device but not a terminal).
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
