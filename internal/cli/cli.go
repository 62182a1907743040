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
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// Version is hsbx's version, set at build time with
// -ldflags "-X github.com/hsbx/hsbx/internal/cli.Version=...".
var Version = "0.1.0-dev"

// Exit codes. A command run with `hsbx exec` passes its own status through.
const (
	ExitOK     = 0
	ExitError  = 1   // an error not covered below
	ExitUsage  = 2   // bad flags, arguments or configuration
	ExitEngine = 125 // no usable engine, engine unreachable or failing
)

// Globals are the flags every command takes.
type Globals struct {
	Runtime       string           `help:"Engine to drive: docker, podman, another name on PATH, or a path (default: auto-detect)." env:"HSBX_RUNTIME" placeholder:"NAME|PATH"`
	Profile       string           `help:"Profile whose sandboxes to act on." env:"HSBX_PROFILE" default:"default"`
	Config        string           `help:"Configuration file (default: $$XDG_CONFIG_HOME/hsbx/config.toml)." env:"HSBX_CONFIG" placeholder:"FILE"`
	JSON          bool             `help:"Print machine-readable JSON instead of text."`
	LogLevel      string           `help:"Log to stderr at this level: debug (shows every engine call), info, warn, error." env:"HSBX_LOG_LEVEL" default:"warn" enum:"debug,info,warn,error"`
	EngineTimeout time.Duration    `help:"Give up on an engine call that has not answered after this long." env:"HSBX_ENGINE_TIMEOUT" default:"60s"`
	Version       kong.VersionFlag `help:"Print hsbx's version and exit."`
}

// grammar is the whole command line.
type grammar struct {
	Globals

	VersionCmd VersionCmd `cmd:"" name:"version" help:"Print hsbx's version."`
	Doctor     DoctorCmd  `cmd:"" help:"Check which engine hsbx would drive and whether it works."`
}

// Env is what the process was started with; Main reads nothing else from
// the outside world.
type Env struct {
	Args    []string // without the program name
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
}

// App is handed to every command's Run method.
type App struct {
	Ctx    context.Context
	G      *Globals
	Env    Env
	Log    *slog.Logger
	Runner *proc.Runner
}

// Getenv reads the process environment given to Main.
func (a *App) Getenv(key string) string {
	v, _ := a.lookupEnv(key)
	return v
}

func (a *App) lookupEnv(key string) (string, bool) {
	for i := len(a.Env.Environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(a.Env.Environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// cacheDir is where hsbx caches what it learned about engine binaries.
func (a *App) cacheDir() string {
	if d := a.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "hsbx")
	}
	if h := a.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "hsbx")
	}
	return ""
}

// detectOptions are the engine-finding options this invocation implies.
func (a *App) detectOptions() detect.Options {
	o := detect.Options{
		Runtime:  a.G.Runtime,
		Getenv:   a.Getenv,
		CacheDir: a.cacheDir(),
		Engine:   enginecli.Options{Runner: a.Runner, Env: a.Env.Environ, Timeout: a.G.EngineTimeout},
	}
	// HSBX_KNOWN_PATHS (colon-separated) replaces the built-in list of
	// install locations tried after PATH, for packagers and for tests that
	// must never reach a real engine.
	if kp, ok := a.lookupEnv("HSBX_KNOWN_PATHS"); ok {
		o.Known = filepath.SplitList(kp)
		if o.Known == nil {
			o.Known = []string{}
		}
	}
	return o
}

// Main runs hsbx with the given process environment and returns the exit code.
func Main(ctx context.Context, env Env) int {
	var g grammar
	exitCode := -1
	parser, err := kong.New(&g,
		kong.Name("hsbx"),
		kong.Description("Persistent, hardened sandbox containers over the docker or podman CLI."),
		kong.UsageOnError(),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(code int) { exitCode = code }),
		kong.Vars{"version": "hsbx " + Version},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hsbx: internal error: %v\n", err)
		return ExitError
	}
	kctx, err := parser.Parse(env.Args)
	if exitCode >= 0 { // --help or --version ran and asked to exit
		return exitCode
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hsbx: %v\n", err)
		var pe *kong.ParseError
		if errors.As(err, &pe) {
			fmt.Fprintf(env.Stderr, "Run 'hsbx --help' for usage.\n")
		}
		return ExitUsage
	}
	if g.Config != "" {
		if _, err := os.Stat(g.Config); err != nil {
			fmt.Fprintf(env.Stderr, "hsbx: config file %s: %v\n  hint: fix --config / HSBX_CONFIG or create the file\n", g.Config, errors.Unwrap(err))
			return ExitUsage
		}
	}
	log := newLogger(env.Stderr, g.LogLevel)
	app := &App{Ctx: ctx, G: &g.Globals, Env: env, Log: log, Runner: &proc.Runner{Log: log}}
	if err := kctx.Run(app); err != nil {
		return report(env.Stderr, err)
	}
	return ExitOK
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// exitError carries an exit code chosen by a command.
type exitError struct {
	code int
	err  error // nil when the command already said everything
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// report prints err with a hint and returns the exit code it maps to.
func report(w io.Writer, err error) int {
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return ee.code
	}
	fmt.Fprintf(w, "hsbx: %v\n", err)
	if h := runtime.Hint(err); h != "" {
		fmt.Fprintf(w, "  hint: %s\n", h)
	}
	return exitCode(err)
}

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	for _, engine := range []error{runtime.ErrBinaryNotFound, runtime.ErrUnsupported, runtime.ErrUnreachable,
		runtime.ErrTimeout, runtime.ErrEngine, runtime.ErrBadOutput, runtime.ErrNotFound, runtime.ErrNameInUse,
		runtime.ErrNotRunning, runtime.ErrPaused, runtime.ErrImageNotFound} {
		if errors.Is(err, engine) {
			return ExitEngine
		}
	}
	return ExitError
}
