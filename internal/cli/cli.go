// Package cli is hsbx's command line: the kong grammar, one file per
// command, output in text or JSON, and the mapping of errors to exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	"golang.org/x/term"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
)

// Version is hsbx's version when a release build sets it with
// -ldflags "-X github.com/hsbx/hsbx/internal/cli.Version=v1.2.3"; empty
// otherwise, and BuildVersion reads the build's own record.
var Version = ""

// Exit codes. `hsbx exec` passes its command's own status through.
const (
	ExitOK         = 0
	ExitError      = 1   // an error not covered below
	ExitUsage      = 2   // bad flags, arguments or configuration; nothing was done
	ExitTimeout    = 124 // exec --timeout fired; the command's processes were killed
	ExitCannotRun  = 126 // exec --user named a user the sandbox does not have (the engines' status for it)
	ExitEngine     = 125 // no usable engine, engine unreachable or failing
	ExitBrokenPipe = 141 // exec's output reader went away (128+SIGPIPE); the command was stopped
)

// Globals are the flags every command takes.
//
// Flags that are settings are strings here: the configuration resolves and
// checks them with the environment and the file (flag > env > file >
// default), and `hsbx config` shows them with their source.
type Globals struct {
	Runtime       string           `predictor:"runtime" help:"Engine to drive: docker, podman, kubectl (a Kubernetes cluster; never auto-detected), another name on PATH, or a path (runtime; env HSBX_RUNTIME, HERMES_DOCKER_BINARY; default auto-detect)." placeholder:"NAME|PATH"`
	Profile       nameFlag         `help:"Profile whose sandboxes to act on (profile; env HSBX_PROFILE; default \"default\")." placeholder:"NAME"`
	Config        string           `help:"Configuration file (env HSBX_CONFIG; default $$XDG_CONFIG_HOME/hsbx/config.toml)." placeholder:"FILE"`
	JSON          bool             `help:"Print machine-readable JSON instead of text."`
	LogLevel      string           `predictor:"level" help:"Log to stderr at this level: debug (shows every engine call), info, warn, error (log_level; env HSBX_LOG_LEVEL; default warn)." placeholder:"LEVEL"`
	EngineTimeout string           `help:"Give up on an engine call that has not answered after this long: a duration like 30s, or seconds; run gets 4x, copies 10x; a missing image is pulled first under pull_timeout (env HSBX_PULL_TIMEOUT; default 10m); exec's command has no limit once the engine has answered (engine_timeout; env HSBX_ENGINE_TIMEOUT; default 60s)." placeholder:"DUR"`
	KubeContext   string           `help:"kubectl runtime: the kubeconfig context to use (kubernetes.context; env HSBX_KUBE_CONTEXT; default the current context)." placeholder:"NAME"`
	KubeNamespace string           `help:"kubectl runtime: the namespace sandboxes live in (kubernetes.namespace; env HSBX_KUBE_NAMESPACE; default the context's namespace)." placeholder:"NAME"`
	Version       kong.VersionFlag `help:"Print hsbx's version and exit."`
}

// flags are the settings given on the command line: the global ones and
// those of the selected command.
func (g *Globals) flags() []config.Flag {
	return append(g.Profile.flag("profile", "--profile"), given(config.Flag{Key: "runtime", Value: g.Runtime, Name: "--runtime"},
		config.Flag{Key: "log_level", Value: g.LogLevel, Name: "--log-level"}, config.Flag{Key: "engine_timeout", Value: g.EngineTimeout, Name: "--engine-timeout"},
		config.Flag{Key: "kubernetes.context", Value: g.KubeContext, Name: "--kube-context"}, config.Flag{Key: "kubernetes.namespace", Value: g.KubeNamespace, Name: "--kube-namespace"})...)
}

// nameFlag is a flag naming a task or profile: it knows whether it was
// given, so "--task ”" reaches the configuration (which refuses an empty
// name, as from a file or the environment) instead of reading as absent.
type nameFlag struct {
	Value string
	Set   bool
}

// Decode implements kong.MapperValue: called only when the flag is given.
func (n *nameFlag) Decode(ctx *kong.DecodeContext) error {
	if err := ctx.Scan.PopValueInto("name", &n.Value); err != nil {
		return err
	}
	n.Set = true
	return nil
}

// flag is the setting flag, when given.
func (n nameFlag) flag(key, name string) []config.Flag {
	if !n.Set {
		return nil
	}
	return []config.Flag{{Key: key, Value: n.Value, Name: name}}
}

// given keeps the setting flags that were given on the command line.
func given(fs ...config.Flag) []config.Flag {
	var out []config.Flag
	for _, f := range fs {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}

// grammar is the whole command line.
type grammar struct {
	Globals

	Up         UpCmd         `cmd:"" help:"Bring the task's sandbox up (create, start or attach) and print its id."`
	Exec       ExecCmd       `cmd:"" help:"Run a command in the task's sandbox; exits with the command's status."`
	Run        RunCmd        `cmd:"" help:"Run shell text in a session of the task's sandbox: cd, export and functions carry over from run to run; exits with the text's status."`
	Session    SessionCmd    `cmd:"" help:"List or close the task's sandbox's sessions."`
	Shell      ShellCmd      `cmd:"" help:"Open an interactive login shell in the task's sandbox."`
	Stop       StopCmd       `cmd:"" help:"Stop the task's sandbox, keeping its filesystem."`
	Down       DownCmd       `cmd:"" help:"Stop and remove the task's sandbox."`
	Cp         CpCmd         `cmd:"" help:"Copy files between the host and the task's sandbox (:PATH names the sandbox side)."`
	File       FileCmd       `cmd:"" help:"Read, write, list, remove or watch files in the task's sandbox, through hsbx's agent."`
	Forward    ForwardCmd    `cmd:"" help:"Forward a local TCP port to a port in the task's sandbox, through hsbx's agent (works with network = off)."`
	Bg         BgCmd         `cmd:"" help:"Start commands in the task's sandbox in the background; list, read, wait on and signal them by id."`
	Snapshot   SnapshotCmd   `cmd:"" help:"Save a sandbox's files as a named snapshot; list and remove snapshots; roll a sandbox back to one, or fork new sandboxes from one."`
	Ls         LsCmd         `cmd:"" help:"List sandboxes."`
	History    HistoryCmd    `cmd:"" help:"Show the record of what ran in the profile's sandboxes (or the task's): who, what, how it ended, the bytes each way."`
	Netlog     NetlogCmd     `cmd:"" help:"Show the network log of the task's sandbox (network = allow): each connection allowed or refused, by which rule, and the bytes each way."`
	Reap       ReapCmd       `cmd:"" help:"Remove sandboxes that crashed or abandoned processes left behind (never running or foreign ones)."`
	ConfigCmd  ConfigCmd     `cmd:"" name:"config" help:"Show the effective configuration and where each value comes from."`
	Doctor     DoctorCmd     `cmd:"" help:"Check which engine hsbx would drive and whether it works."`
	VersionCmd VersionCmd    `cmd:"" name:"version" help:"Print hsbx's version."`
	Completion CompletionCmd `cmd:"" help:"Print the code that turns on tab completion in bash, zsh or fish."`
	Hold       HoldCmd       `cmd:"" hidden:"" help:"Hold the exec channel to one sandbox (started by exec)."`
}

// Env is what the process was started with; Main reads nothing else from
// the outside world.
type Env struct {
	Args    []string // without the program name
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Cwd is the working directory ("" = unknown).
	Cwd string
	// Ready, when not nil, is closed once the process's signal handlers
	// are in place (installing them takes a quarter to half a
	// millisecond). Main reads the command line, the configuration and,
	// for exec and run, the sandbox's state and cached engine facts
	// meanwhile, and waits for it before anything a Ctrl-C must be able to
	// stop and clean up: a command, a container, a holder, any output. A
	// warm exec's command handed to its holder goes first: a holder kills
	// the command of a client that goes away.
	Ready <-chan struct{}
	// SSHStandIn is this binary when its main serves as the ssh stand-in
	// (hsbx.ServeSSHStandIn): ssh_share's connection sharing; "" = none
	// (a test binary that embeds the CLI).
	SSHStandIn string
}

// awaitReady waits for the process's signal handlers (see Ready).
func (e Env) awaitReady() {
	if e.Ready != nil {
		<-e.Ready
	}
}

// App is handed to every command's Run method, with the context (which a
// signal cancels).
type App struct {
	G   *Globals
	Env Env
	Log *slog.Logger
	Cfg *config.Config

	client *hsbx.Client // opened on first use

	sockDir    *privdir.Dir // the exec channel's socket directory, checked and held open
	sockErr    error        // why there is none
	sockWarned bool

	getenv func(string) (string, bool) // Env.Environ as a map (Main makes it)
}

// Getenv reads the process environment given to Main.
func (a *App) Getenv(key string) string {
	v, _ := a.lookupEnv(key)
	return v
}

func (a *App) lookupEnv(key string) (string, bool) {
	if a.getenv == nil { // an App made without Main's
		return environ.Lookup(a.Env.Environ, key)
	}
	return a.getenv(key)
}

func (a *App) cacheDir() string { return hsbx.DefaultCacheDir(a.Env.Environ) }
func (a *App) stateDir() string { return hsbx.DefaultStateDir(a.Env.Environ) }

// profile is the resolved profile.
func (a *App) profile() string { return a.Cfg.Profile.Value }

// options are what the library's Open gets from this invocation: the
// resolved configuration, the process's environment and directory, the
// CLI's warnings and its exec channel holders.
func (a *App) options() hsbx.Options {
	return hsbx.Options{
		Config: a.Cfg, Environ: a.Env.Environ, Cwd: a.Env.Cwd, Logger: a.Log,
		StateDir: a.stateDir(), CacheDir: a.cacheDir(),
		Warn:       a.warn,
		Command:    a.wiring(),
		OnPull:     a.onPull,
		SSHStandIn: a.Env.SSHStandIn,
	}
}

// onPull says that an image must be pulled first; on a terminal the
// engine shows its own progress there, elsewhere one line is all.
func (a *App) onPull(image string) io.Writer {
	a.notice(fmt.Sprintf("image %s is not present locally; pulling it (up to pull_timeout %s)", safe(image), a.Cfg.PullTimeout.Value))
	if f, ok := a.Env.Stderr.(*os.File); ok && !a.G.JSON && term.IsTerminal(int(f.Fd())) {
		return f
	}
	return nil
}

// detectOptions are the engine-finding options this invocation implies.
func (a *App) detectOptions() detect.Options {
	o, _ := hsbx.DetectOptions(a.options()) // the configuration is loaded: no error
	return o
}

// open opens the engine (once per process) as the library does.
func (a *App) open(ctx context.Context) (*hsbx.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	c, err := hsbx.Open(ctx, a.options())
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// sandbox returns the handle for the task setting's sandbox.
func (a *App) sandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	sb, err := a.execSandbox(ctx)
	a.Env.awaitReady() // nothing is started before the signal handlers are in
	return sb, err
}

// execSandbox is sandbox for Sandbox.Exec, which waits for the signal
// handlers itself (sandbox.WithBeforeStart, on the context Main gives):
// a warm exec through a holder reads its state and reaches the holder
// while they are put in.
func (a *App) execSandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	c, err := a.open(ctx)
	if err != nil {
		return nil, err
	}
	return c.Sandbox(""), nil
}

// execGrammar is the command line of exec alone: the same types, a
// third of the model for kong to build. See parse.
type execGrammar struct {
	Globals
	Exec ExecCmd `cmd:"" help:"Run a command in the task's sandbox; exits with the command's status."`
}

func newParser(g any, env Env, exitCode *int) (*kong.Kong, error) {
	return kong.New(g,
		kong.Name("hsbx"),
		kong.Description("Persistent, hardened sandbox containers over the docker, podman or kubectl CLI.\n\nExit codes: 0 ok; 2 usage or configuration error; 124 exec timed out; 125 engine problem; otherwise the command's own status (exec)."),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(code int) { *exitCode = code }),
		kong.Vars{"version": "hsbx " + version()},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Help(helpPrinter),
		kong.TypeMapper(reflect.TypeOf(time.Duration(0)), durationMapper()),
	)
}

// parse reads the command line. Exec is the call a session makes hundreds
// of times, and building kong's model of every command is most of a warm
// exec's own cost, so a command line naming exec is first parsed with
// exec's grammar alone; anything that grammar does not take cleanly (help,
// version, another command, an error to report) is parsed again with the
// whole one, which has the last word.
func parse(env Env, exitCode *int) (*kong.Context, *Globals, error) {
	if mayBeExec(env.Args) {
		var g execGrammar
		quiet := -1
		if p, err := newParser(&g, Env{Stdout: io.Discard, Stderr: io.Discard}, &quiet); err == nil {
			if kctx, err := p.Parse(env.Args); err == nil && quiet < 0 && kctx.Selected() != nil && kctx.Selected().Name == "exec" {
				return kctx, &g.Globals, nil
			}
		}
	}
	var g grammar
	p, err := newParser(&g, env, exitCode)
	if err != nil {
		return nil, nil, &internalError{err}
	}
	kctx, err := p.Parse(env.Args)
	return kctx, &g.Globals, err
}

// internalError is kong refusing hsbx's own grammar: a bug, not a usage error.
type internalError struct{ err error }

func (e *internalError) Error() string { return "internal error: " + e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

// mayBeExec: the arguments name exec and ask for no help or version
// before a "--".
func mayBeExec(args []string) bool {
	exec := false
	for _, a := range args {
		switch a {
		case "--":
			return exec
		case "exec":
			exec = true
		case "-h", "--help", "--version", "help":
			return false
		}
	}
	return exec
}

// Main runs hsbx with the given process environment and returns the exit code.
func Main(ctx context.Context, env Env) int {
	if _, set := environ.Lookup(env.Environ, "COMP_LINE"); set {
		env.awaitReady() // completion may ask the engine for task names
	}
	if code, ok := completeLine(ctx, env); ok {
		return code
	}
	g, command, flags, run, code := parseCommand(env)
	if code >= 0 { // help, version or a usage error, already written
		return code
	}
	app := &App{G: g, Env: env, getenv: environ.Getter(env.Environ)}
	if command == "version" || strings.HasPrefix(command, "completion") { // never fail on a bad configuration
		app.Cfg = &config.Config{Settings: config.Defaults()}
	} else {
		cfg, err := config.Load(config.Options{File: g.Config, Getenv: app.lookupEnv, Flags: flags})
		if err != nil {
			env.awaitReady()
			var ce *config.Error
			hint := ""
			if errors.As(err, &ce) {
				hint = ce.Hint()
			}
			if g.JSON {
				reportJSON(env.Stderr, "config", "configuration: "+err.Error(), hint, ExitUsage)
				return ExitUsage
			}
			fmt.Fprintf(env.Stderr, "hsbx: configuration: %s\n", safe(err.Error()))
			if hint != "" {
				fmt.Fprintf(env.Stderr, "  hint: %s\n", hint)
			}
			return ExitUsage
		}
		app.Cfg = cfg
	}
	logTo := env.Stderr
	if f := app.Getenv("HSBX_LOG_FILE"); f != "" {
		// A log of the user's choosing, appended to.
		if lf, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			defer lf.Close()
			logTo = lf
		}
	}
	app.Log = newLogger(logTo, app.Cfg.LogLevel.Value, g.JSON)
	if command != "exec" && command != "run" {
		env.awaitReady()
	} // the two hot ones read their sandbox's state first: App.sandbox waits
	// Sandbox.Exec waits for them where a command would start.
	ctx = sandbox.WithBeforeStart(ctx, env.awaitReady)
	if err := run(ctx, app); err != nil {
		env.awaitReady() // exec and run may fail before they wait
		return report(ctx, env.Stderr, err, g.JSON)
	}
	return ExitOK
}

// parseCommand reads the command line: the globals, the command's name,
// the setting flags given and how to run it — or an exit code (>= 0) when
// it is done already (help, version, a usage error, reported).
func parseCommand(env Env) (g *Globals, command string, flags []config.Flag, run func(context.Context, *App) error, code int) {
	if flag, bad, ok := nameNotUTF8(env.Args); ok {
		// kong reads arguments as text and turns other bytes into U+FFFD,
		// while exec's fast path kept them: one task name was two keys.
		env.awaitReady()
		msg := fmt.Sprintf("%s %q is not valid UTF-8", flag, bad)
		const hint = "name tasks and profiles in UTF-8 text"
		if wantsJSON(env.Args) {
			reportJSON(env.Stderr, "usage", msg, hint, ExitUsage)
		} else {
			fmt.Fprintf(env.Stderr, "hsbx: %s\n  hint: %s\n", safe(msg), hint)
		}
		return nil, "", nil, nil, ExitUsage
	}
	if fg, fc, ok := fastExec(env.Args); ok {
		return &fg, "exec", append(fg.flags(), fc.settingFlags()...), fc.Run, -1
	}
	if fg, fc, ok := fastRun(env.Args); ok {
		return &fg, "run", append(fg.flags(), fc.settingFlags()...), fc.Run, -1
	}
	env.awaitReady() // kong may write help or an error: SIGPIPE is caught first
	exitCode := -1
	kctx, g, err := parse(env, &exitCode)
	if exitCode >= 0 { // --help or --version ran and asked to exit
		return nil, "", nil, nil, exitCode
	}
	var ie *internalError
	switch {
	case errors.As(err, &ie) && wantsJSON(env.Args):
		reportJSON(env.Stderr, "internal", err.Error(), kindHints["internal"], ExitError)
		return nil, "", nil, nil, ExitError
	case errors.As(err, &ie):
		fmt.Fprintf(env.Stderr, "hsbx: %v\n", err)
		return nil, "", nil, nil, ExitError
	case err != nil && wantsJSON(env.Args):
		reportJSON(env.Stderr, "usage", err.Error(), usageHint, ExitUsage)
		return nil, "", nil, nil, ExitUsage
	case err != nil:
		fmt.Fprintf(env.Stderr, "hsbx: %v\n  hint: %s\n", err, usageHint)
		return nil, "", nil, nil, ExitUsage
	}
	flags = g.flags()
	if s, ok := kctx.Selected().Target.Addr().Interface().(settingFlags); ok {
		flags = append(flags, s.settingFlags()...)
	}
	run = func(ctx context.Context, app *App) error {
		kctx.BindTo(ctx, (*context.Context)(nil))
		return kctx.Run(app)
	}
	return g, kctx.Command(), flags, run, -1
}

// durationMapper decodes duration flags like every other hsbx duration:
// "30s", "5m", or a plain number of seconds.
func durationMapper() kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		t, err := ctx.Scan.PopValue("duration")
		if err != nil {
			return err
		}
		d, err := config.ParseDuration(fmt.Sprint(t.Value))
		if err != nil {
			return err
		}
		target.Set(reflect.ValueOf(d))
		return nil
	}
}

// settingFlags is implemented by commands whose flags are settings
// (`--task`, `up --image`, `exec --timeout`, `reap --idle`).
type settingFlags interface {
	settingFlags() []config.Flag
}

// newLogger logs at level to w: text lines, or JSON objects (one a line)
// under --json, so that a program reading stderr gets JSON only.
func newLogger(w io.Writer, level string, asJSON bool) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// nameNotUTF8 finds a --task or --profile value before "--" that is not
// valid UTF-8: a sandbox's name, which must read back as it was given.
// (Other arguments that are not UTF-8, a command's, arrive with each such
// byte as U+FFFD on every path: the engines' API is JSON.)
func nameNotUTF8(args []string) (flag, value string, bad bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, f := range []string{"--task", "--profile"} {
			v, ok := strings.CutPrefix(a, f+"=")
			if a == f && i+1 < len(args) {
				v, ok = args[i+1], true
			}
			if ok && !utf8.ValidString(v) {
				return f, v, true
			}
		}
	}
	return "", "", false
}
