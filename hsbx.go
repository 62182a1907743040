// Package hsbx is the front door for Go programs that embed hsbx. Open
// does what the hsbx command does before it acts: it loads the
// configuration (file, Hermes TERMINAL_* and HSBX_* environment, defaults;
// see package config), finds the engine, and uses the CLI's state and cache
// directories, so sandboxes a program makes are the ones `hsbx ls`, `hsbx
// exec` and the reaper see, with the same cross-process guarantees. The
// automatic orphan sweep the CLI runs when a sandbox had to be created or
// started runs here too, unless turned off.
//
// The lifecycle itself is package sandbox; Client.Sandbox returns its
// handles.
package hsbx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"time"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/sshshare"
	"github.com/hsbx/hsbx/reaper"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/kubectl"
	"github.com/hsbx/hsbx/sandbox"
)

// Options configure Open. The zero value behaves like the hsbx command run
// in this process's environment and directory.
type Options struct {
	// Config is the configuration; nil loads it as the CLI does (with no
	// flags) from Environ and the file it names (HSBX_CONFIG or
	// $XDG_CONFIG_HOME/hsbx/config.toml).
	Config *config.Config
	// Environ is the environment settings are read from and the engine
	// client runs with; nil means os.Environ().
	Environ []string
	// Cwd is the caller's directory (for mount_cwd_to_workspace); "" means
	// the process's working directory.
	Cwd string
	// Logger receives hsbx's records, among them one debug record per
	// engine call with its argv and duration; nil discards them.
	Logger *slog.Logger
	// Warn receives one line per hardening default the engine cannot
	// apply (nil: logged at warn level).
	Warn func(string)
	// StateDir holds the per-key persistent dirs and the in-use marks every
	// process must agree on; "" means the CLI's ($XDG_STATE_HOME/hsbx or
	// ~/.local/state/hsbx). Change it only to isolate a test.
	StateDir string
	// CacheDir holds cached engine facts; "" means the CLI's
	// ($XDG_CACHE_HOME/hsbx or ~/.cache/hsbx).
	CacheDir string
	// NoAutoSweep turns off the orphan sweep that runs when a sandbox had
	// to be created or started (at most once per process and per
	// reaper.lifetime on this host). reaper.orphan_reaper = false in the
	// configuration turns it off too.
	NoAutoSweep bool
	// OnPull, when set, is told that an image must be pulled before a
	// sandbox can be made, and returns where the engine's progress goes
	// (nil: nowhere). The pull is bounded by pull_timeout.
	OnPull func(image string) io.Writer
	// NoRecord: commands are not appended to the record of what ran.
	NoRecord bool
	// Command is the hsbx command's own wiring; a program embedding the
	// package leaves it nil.
	Command *CommandWiring
	// SSHStandIn is an executable that stands in for ssh (a program that
	// calls ServeSSHStandIn first in main: its os.Executable()), so that
	// the docker client's calls to an engine it reaches over ssh share
	// one connection (ssh_share); "" = a connection per call.
	SSHStandIn string
}

// ServeSSHStandIn runs the program as the ssh stand-in Options.SSHStandIn
// names, when it was started as one, and exits with ssh's status;
// otherwise it returns at once. A program that names itself in
// Options.SSHStandIn calls it first in main.
func ServeSSHStandIn() {
	if sshshare.Invoked(os.Args[0], os.Getenv) {
		os.Exit(sshshare.Main(os.Args[1:]))
	}
}

// CommandWiring is how the hsbx command wires the library for its
// processes: the exec channel in holder processes every one of them
// shares (none: the command takes the plain path; the channel would cost
// one process more than its one command saves) and its own words for
// what a user can do (sandbox.Config's fields of those names).
type CommandWiring struct {
	Holders  channel.Holders
	Remedies func(sandbox.Remedy, sandbox.Key) string
}

// DefaultStateDir is the CLI's state directory for this environment:
// $XDG_STATE_HOME/hsbx, or ~/.local/state/hsbx ("" when neither is set).
func DefaultStateDir(env []string) string { return sandbox.DefaultStateDir(env) }

// DefaultCacheDir is the CLI's cache directory: $XDG_CACHE_HOME/hsbx, or
// ~/.cache/hsbx.
func DefaultCacheDir(env []string) string { return sandbox.DefaultCacheDir(env) }

// LoadConfig loads the configuration as the CLI does with no flags: the
// file, then env (nil: the process environment), over the defaults.
func LoadConfig(env []string) (*config.Config, error) {
	if env == nil {
		env = os.Environ()
	}
	return config.Load(config.Options{Getenv: environ.Getter(env)})
}

// resolved fills in the defaults Open documents.
func (o Options) resolved() (Options, error) {
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Config == nil {
		c, err := LoadConfig(o.Environ)
		if err != nil {
			return o, fmt.Errorf("hsbx configuration: %w", err)
		}
		o.Config = c
	}
	if o.Cwd == "" {
		o.Cwd, _ = os.Getwd()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir(o.Environ)
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir(o.Environ)
	}
	return o, nil
}

// DetectOptions are the engine-finding options the configuration implies:
// the runtime setting with its source, PATH from Environ, the known install
// paths, the cache, and the engine client's environment, timeout and
// logger. Open uses them; `hsbx doctor` asks them afresh.
func DetectOptions(o Options) (detect.Options, error) {
	o, err := o.resolved()
	if err != nil {
		return detect.Options{}, err
	}
	return o.detect(), nil
}

func (o Options) detect() detect.Options {
	path, _ := environ.Lookup(o.Environ, "PATH")
	d := detect.Options{
		LookPath:   func(name string) (string, error) { return proc.LookPathIn(name, path) },
		CacheDir:   o.CacheDir,
		Engine:     enginecli.Options{Logger: o.Logger, Env: o.engineEnv(), Timeout: o.Config.EngineTimeout.Value},
		Kubernetes: kubectl.Target{Context: o.Config.Kubernetes.Context.Value, Namespace: o.Config.Kubernetes.Namespace.Value},
		Known:      o.Config.KnownPaths.Value,
	}
	if rt := o.Config.Runtime; rt.Value != "auto" {
		d.Runtime, d.RuntimeSource = rt.Value, rt.Source
	}
	return d
}

// engineEnv is the engine client's environment: Environ, with the ssh
// stand-in first on PATH when the docker client reaches its engine over
// ssh and ssh_share is on (internal/sshshare; a reason it cannot be is
// logged, and each call makes its own connection).
func (o Options) engineEnv() []string {
	share := o.Config.SSHShare.Value
	if o.SSHStandIn == "" || share <= 0 || goruntime.GOOS == "windows" {
		return o.Environ
	}
	if loc := enginecli.Locate("docker", "", o.Environ, goruntime.GOOS); !sshshare.Applies(loc.Address) {
		return o.Environ
	}
	env, err := sshshare.Env(o.Environ, o.SSHStandIn, o.StateDir, share)
	if err != nil {
		o.Logger.Info("ssh_share: each docker call makes its own ssh connection", "reason", err.Error())
	}
	return env
}

// ErrUnsafeDir says a state or cache directory (or one above it) could be
// changed by another user: hsbx keeps nothing there (the error names the
// directory and has a Hint).
var ErrUnsafeDir = privdir.ErrUnsafe

// checkDirs makes the state and cache directories (0755 when new, as
// the per-key directories a sandbox mounts must be reachable by a
// rootless engine's user) and checks that no other user can change them
// or any directory above them (on what was opened, internal/privdir): the
// verified container id of the warm path and the engine facts hsbx trusts
// are read from there.
func checkDirs(dirs ...string) error {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		pd, err := privdir.Open(d, privdir.Options{Create: true, Mode: 0o755})
		if err != nil {
			return fmt.Errorf("hsbx directory: %w", err)
		}
		pd.Close()
	}
	return nil
}

// Client is an open engine with the configuration it was opened with. It
// is safe for concurrent use.
type Client struct {
	o    Options
	m    *sandbox.Manager
	gate *reaper.Gate
}

// Open loads what Options leave unset, finds the engine (one cached
// detection, no engine call when the cache is warm) and returns a Client.
// Errors are configuration errors (*config.Error) or the engine's
// (runtime.ErrBinaryNotFound, ...; runtime.Hint says what to do).
func Open(ctx context.Context, o Options) (*Client, error) {
	o, err := o.resolved()
	if err != nil {
		return nil, err
	}
	if err := checkDirs(o.StateDir, o.CacheDir); err != nil {
		return nil, err
	}
	rt, _, err := detect.Open(ctx, o.detect())
	if err != nil {
		return nil, err
	}
	c := &Client{o: o, gate: &reaper.Gate{StateDir: o.StateDir, Window: o.Config.Reaper.Lifetime.Value}}
	sc := sandbox.Config{
		Runtime: rt, Logger: o.Logger, StateDir: o.StateDir, CacheDir: o.CacheDir,
		Environ: o.Environ, Cwd: o.Cwd, UID: os.Getuid(), GID: os.Getgid(),
		Warn: o.Warn, OnColdStart: c.autoSweep, PullTimeout: o.Config.PullTimeout.Value, OnPull: o.OnPull,
	}
	sc.CopyMaxBytes, _ = config.SizeBytes(o.Config.CopyMaxSize.Value) // validated with the configuration
	sc.CopyChannelMax, _ = config.SizeBytes(o.Config.CopyChannelMax.Value)
	sc.SnapshotMaxBytes, _ = config.SizeBytes(o.Config.SnapshotMaxSize.Value)
	sc.SharedPaths = o.Config.SharedPaths.Value
	// The in-process channel, with the agent hsbx carries (or the one
	// named); the command's in its holders.
	sc.Channel, sc.Agent, sc.NoRecord = o.Config.ExecChannel.Value, o.Config.ExecChannelAgent.Value, o.NoRecord
	if w := o.Command; w != nil {
		sc.Holders, sc.Remedies = w.Holders, w.Remedies
		sc.Channel = sc.Channel && w.Holders.On()
	}
	c.m = sandbox.New(sc)
	return c, nil
}

// Config is the configuration the client was opened with.
func (c *Client) Config() *config.Config { return c.o.Config }

// Manager is the sandbox manager, for keys and specs of the caller's own.
func (c *Client) Manager() *sandbox.Manager { return c.m }

// Runtime is the engine.
func (c *Client) Runtime() runtime.Runtime { return c.m.Runtime() }

// StateDir is the state directory in use.
func (c *Client) StateDir() string { return c.o.StateDir }

// Sandbox is the handle for task's sandbox ("" = the configured task) in
// the configured profile, made to the configured spec.
func (c *Client) Sandbox(task string) *sandbox.Sandbox {
	key := c.o.Config.Key()
	if task != "" {
		key.Task = task
	}
	return c.m.Sandbox(key, c.o.Config.Spec())
}

// List lists the configured profile's sandboxes (or the shared container
// key's).
func (c *Client) List(ctx context.Context) ([]sandbox.Listing, error) {
	spec := c.o.Config.Spec()
	return c.m.List(ctx, c.o.Config.Scope(), false, &spec)
}

// Sweeper is the reaper's sweep over this client's engine and state dir.
func (c *Client) Sweeper() *reaper.Sweeper {
	return &reaper.Sweeper{RT: c.m.Runtime(), StateDir: c.o.StateDir, Log: c.o.Logger, StopGrace: 10 * time.Second}
}

// ReapOptions is the configured reaper policy for the configured profile
// (reaper.lifetime, reaper.idle_after, the shared container key), as of
// now.
func (c *Client) ReapOptions() reaper.Options {
	r := c.o.Config.Reaper
	return reaper.Options{
		Profile: c.o.Config.Profile.Value, Shared: c.o.Config.Sandbox.SharedContainerKey.Value,
		MaxAge: reaper.MaxAge(r.Lifetime.Value), Idle: r.IdleAfter.Value, SnapshotMaxAge: r.SnapshotMaxAge.Value, Now: time.Now(),
	}
}

// Reap runs the reaper with the configured policy, as `hsbx reap` does:
// it removes what crashed processes left behind, never anything running
// and in use, foreign, or of another profile. dryRun removes nothing.
func (c *Client) Reap(ctx context.Context, dryRun bool) (reaper.Report, error) {
	return c.Sweeper().Sweep(ctx, c.ReapOptions(), dryRun)
}

// autoSweep is the sweep run when a sandbox had to be created or started:
// at most once per process and per reaper.lifetime window per profile on
// this host. Its failures are logged, never the caller's.
func (c *Client) autoSweep(ctx context.Context) {
	if c.o.NoAutoSweep || !c.o.Config.Reaper.OrphanReaper.Value {
		return
	}
	profile, log := c.o.Config.Profile.Value, c.o.Logger
	ran, err := c.gate.Maybe(ctx, profile, func(ctx context.Context) error {
		rep, err := c.Sweeper().Sweep(ctx, c.ReapOptions(), false)
		for _, r := range rep.Removed {
			log.Info("reaped orphan sandbox", "id", r.ID, "task", r.Task, "reason", r.Reason, "age_seconds", r.AgeSeconds)
		}
		return err
	})
	if err != nil {
		log.Debug("orphan sweep failed (ignored)", "error", err)
	} else if ran {
		log.Debug("orphan sweep ran", "profile", profile)
	}
}
