package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/sandbox"
)

// DefaultSession is the session `run` uses without --session when
// persistent_shell is on.
const DefaultSession = "default"

// RunCmd runs shell text in a session.
type RunCmd struct {
	taskFlag
	Session     string   `short:"s" help:"Session (a named, long-lived shell in the sandbox) to run in; default \"default\", or a fresh shell each run when persistent_shell is false (env TERMINAL_PERSISTENT_SHELL)." placeholder:"NAME"`
	Timeout     string   `help:"Stop the script after this long (as Ctrl-C would; the session lives on) and exit 124: a duration like 30s, or seconds (sandbox.timeout; env TERMINAL_TIMEOUT; 0 = none)." placeholder:"DUR"`
	User        string   `short:"u" help:"Run the session as this user of the sandbox (NAME, UID, NAME:GROUP or UID:GID); each user's sessions are their own." placeholder:"USER"`
	Interactive bool     `short:"i" help:"Give the script your stdin (else it reads end of file at once)."`
	MaxOutput   string   `help:"With --json: keep at most this much of each of stdout and stderr in the result (bytes, or like 64k, 4m; default 1m); the rest is counted, not kept." placeholder:"SIZE"`
	Text        []string `arg:"" passthrough:"partial" help:"The shell text to run (after --; several arguments are joined with spaces)." placeholder:"TEXT"`
}

func (c *RunCmd) settingFlags() []config.Flag {
	return append(c.flags(), given(config.Flag{Key: "sandbox.timeout", Value: c.Timeout, Name: "--timeout"})...)
}

// Run implements the command: the text runs in the session's shell, whose
// cd, export and functions carry over from run to run; exits with the
// text's $?.
func (c *RunCmd) Run(ctx context.Context, app *App) error {
	text := c.Text
	if len(text) > 0 && text[0] == "--" {
		text = text[1:]
	}
	if len(text) == 0 {
		return &exitError{code: ExitUsage, err: errors.New("run: no text given (hsbx run [flags] -- 'TEXT')")}
	}
	name, fresh := c.Session, false
	if name == "" {
		name = DefaultSession
		if !app.Cfg.PersistentShell.Value {
			name, fresh = "run-"+randomName(), true
		}
	}
	if !sandbox.ValidSessionName(name) {
		return &exitError{code: ExitUsage, err: fmt.Errorf("run: --session %q: %w", name, sandbox.ErrBadSessionName)}
	}
	var j *jsonRun
	if app.G.JSON {
		limit, err := parseMaxOutput(c.MaxOutput)
		if err != nil {
			return err
		}
		j = newJSONRun(limit)
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	sc := sandbox.Script{Text: strings.Join(text, " "), Stdout: app.Env.Stdout, Stderr: app.Env.Stderr, User: c.User,
		Timeout: app.Cfg.Sandbox.Timeout.Value, IdleLimit: app.Cfg.SessionIdle.Value}
	if j != nil {
		sc.Stdout, sc.Stderr = &j.out, &j.err
	}
	if c.Interactive {
		sc.Stdin = app.Env.Stdin
	}
	res, err := sb.RunScript(ctx, name, sc)
	if fresh {
		_ = sb.Session(name, c.User).Close(context.WithoutCancel(ctx))
	}
	if cerr := sb.Close(ctx); cerr != nil {
		app.warn(fmt.Sprintf("removing the per-process sandbox: %v", cerr))
	}
	if j != nil {
		r := j.result(res.Code)
		if err != nil && !interrupted(ctx, &r, err) {
			return err
		}
		r.Session = &SessionResult{Name: name, ShellID: res.ShellID, New: res.New, Reset: res.Reset, Ended: res.Ended, Fresh: fresh}
		return app.printResult(r)
	}
	if !fresh {
		switch {
		case res.Reset != "" && res.New:
			fmt.Fprintf(app.Env.Stderr, "hsbx: session %s was reset: %s; this ran in a new shell (its cd, variables and functions start afresh)\n", name, res.Reset)
		case res.Reset != "":
			fmt.Fprintf(app.Env.Stderr, "hsbx: session %s was reset: %s; this ran in that one (its cd and variables are its own)\n", name, res.Reset)
		}
		if res.Ended != "" {
			fmt.Fprintf(app.Env.Stderr, "hsbx: session %s ended: %s; the next run starts a new shell\n", name, res.Ended)
		}
	}
	var ie *sandbox.InterruptedError
	var we *sandbox.WriterError
	switch {
	case errors.As(err, &ie) && errors.As(ie.Cause, &we):
		return &exitError{code: ExitBrokenPipe}
	case errors.As(err, &ie) && errors.Is(ie.Cause, sandbox.ErrCommandTimeout):
		fmt.Fprintf(app.Env.Stderr, "hsbx: script timed out after %s; stopped it (%d process(es) killed); session %s lives on\n", sc.Timeout, ie.Killed, name)
		return &exitError{code: ExitTimeout}
	case errors.As(err, &ie):
		fmt.Fprintf(app.Env.Stderr, "hsbx: %v; stopped the script (%d process(es) killed)\n", ie.Cause, ie.Killed)
		return &exitError{code: exitCode(ctx, ie.Cause)}
	case err != nil:
		return err
	}
	if res.Code != 0 {
		return &exitError{code: res.Code}
	}
	return nil
}

func randomName() string {
	return fmt.Sprintf("%x", time.Now().UnixNano())
}

// SessionCmd lists and closes sessions.
type SessionCmd struct {
	Ls    SessionLsCmd    `cmd:"" help:"List the task's sandbox's live sessions."`
	Close SessionCloseCmd `cmd:"" help:"End a session's shell and every process it started, however detached; the next run of that name starts afresh."`
}

// SessionLsCmd lists sessions.
type SessionLsCmd struct {
	taskFlag
	User string `short:"u" help:"List this sandbox user's sessions (those run -u USER made)." placeholder:"USER"`
}

func (c *SessionLsCmd) settingFlags() []config.Flag { return c.flags() }

// Run implements the command (nothing when the sandbox is not running).
func (c *SessionLsCmd) Run(ctx context.Context, app *App) error {
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	infos, err := sb.Sessions(ctx, c.User)
	if err != nil {
		return err
	}
	if app.G.JSON {
		if infos == nil {
			infos = []sandbox.SessionInfo{}
		}
		b, _ := json.Marshal(infos)
		fmt.Fprintln(app.Env.Stdout, string(b))
		return nil
	}
	return writeSessions(app.Env.Stdout, infos, time.Now())
}

// writeSessions is session ls's table. Every column is the sandbox's word
// (its session server answers): each is escaped, so none can colour the terminal,
// set its title or forge a row.
func writeSessions(w io.Writer, infos []sandbox.SessionInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSHELL\tBUSY\tIDLE\tCWD")
	for _, in := range infos {
		idle := now.Sub(time.UnixMilli(in.LastUsed)).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", safe(in.Name), safe(in.Shell), in.Busy, idle, safe(in.Cwd))
	}
	return tw.Flush()
}

// SessionCloseCmd closes a session.
type SessionCloseCmd struct {
	taskFlag
	User string `short:"u" help:"Close this sandbox user's session (one run -u USER made)." placeholder:"USER"`
	Name string `arg:"" help:"The session to close." placeholder:"NAME"`
}

func (c *SessionCloseCmd) settingFlags() []config.Flag { return c.flags() }

// Run implements the command; exit 1 when there was no such session.
func (c *SessionCloseCmd) Run(ctx context.Context, app *App) error {
	if !sandbox.ValidSessionName(c.Name) {
		return &exitError{code: ExitUsage, err: fmt.Errorf("session close %q: %w", c.Name, sandbox.ErrBadSessionName)}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	if err := sb.Session(c.Name, c.User).Close(ctx); err != nil {
		if errors.Is(err, sandbox.ErrNoSession) {
			return &exitError{code: 1, err: err}
		}
		return err
	}
	return nil
}
