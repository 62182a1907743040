package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hsbx/hsbx/internal/config"
	"github.com/hsbx/hsbx/reaper"
	"github.com/hsbx/hsbx/sandbox"
)

// ReapCmd removes sandboxes that crashed or abandoned processes left behind.
type ReapCmd struct {
	MaxAge      time.Duration `help:"Remove exited, never-started and dead sandboxes older than this (default: 2 x reaper.lifetime, at least 120s)." placeholder:"DUR"`
	Idle        string        `help:"Also remove running sandboxes unused through hsbx for this long, with no command running in them on any host (reaper.idle_after; 0 = never)." placeholder:"DUR"`
	AllProfiles bool          `help:"Sweep every profile, not only the current one."`
	DryRun      bool          `help:"Report the verdicts; remove nothing."`
}

func (c *ReapCmd) settingFlags() []config.Flag {
	return given(config.Flag{Key: "reaper.idle_after", Value: c.Idle, Name: "--idle"})
}

// Run implements the command: a constant number of engine calls.
func (c *ReapCmd) Run(ctx context.Context, app *App) error {
	m, err := app.manager(ctx)
	if err != nil {
		return err
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = reaper.MaxAge(app.Cfg.Reaper.Lifetime.Value)
	}
	rep, err := app.sweeper(m).Sweep(ctx, reaper.Options{
		Profile: app.profile(), Shared: app.Cfg.Sandbox.SharedContainerKey.Value, AllProfiles: c.AllProfiles, MaxAge: maxAge,
		Idle: app.Cfg.Reaper.IdleAfter.Value, Now: time.Now(),
	}, c.DryRun)
	if err != nil {
		return err
	}
	if app.G.JSON {
		if err := json.NewEncoder(app.Env.Stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		verb := "removed"
		if c.DryRun {
			verb = "would remove"
		}
		for _, r := range rep.Removed {
			fmt.Fprintf(app.Env.Stdout, "%s %.12s %s task=%s profile=%s: %s, %s old\n", verb, safe(r.ID), safe(r.Name), safe(r.Task), safe(r.Profile), r.Reason, time.Duration(r.AgeSeconds)*time.Second)
		}
		for _, e := range rep.Errors {
			fmt.Fprintf(app.Env.Stderr, "hsbx: could not reap %.12s: %s\n", safe(e.ID), safe(e.Error))
		}
		fmt.Fprintln(app.Env.Stdout, rep.Summary(c.DryRun))
	}
	if len(rep.Errors) > 0 {
		return &exitError{code: ExitError}
	}
	return nil
}

func (a *App) sweeper(m *sandbox.Manager) *reaper.Sweeper {
	return &reaper.Sweeper{RT: m.Runtime(), StateDir: a.stateDir(), Log: a.Log, StopGrace: 10 * time.Second}
}

// autoSweep is the sweep `up` and `exec` run when they had to create or
// start a sandbox: at most once per process and per reaper.lifetime window
// per profile on this host, disabled by reaper.orphan_reaper = false. Its
// failures are logged, never the command's.
func (a *App) autoSweep(m *sandbox.Manager) func(context.Context) {
	return func(ctx context.Context) {
		if !a.Cfg.Reaper.OrphanReaper.Value {
			return
		}
		lifetime := a.Cfg.Reaper.Lifetime.Value
		ran, err := a.gate.Maybe(ctx, a.profile(), func(ctx context.Context) error {
			rep, err := a.sweeper(m).Sweep(ctx, reaper.Options{
				Profile: a.profile(), Shared: a.Cfg.Sandbox.SharedContainerKey.Value, MaxAge: reaper.MaxAge(lifetime), Idle: a.Cfg.Reaper.IdleAfter.Value, Now: time.Now(),
			}, false)
			for _, r := range rep.Removed {
				a.Log.Info("reaped orphan sandbox", "id", r.ID, "task", r.Task, "reason", r.Reason, "age_seconds", r.AgeSeconds)
			}
			return err
		})
		if err != nil {
			a.Log.Debug("orphan sweep failed (ignored)", "error", err)
		} else if ran {
			a.Log.Debug("orphan sweep ran", "profile", a.profile())
		}
	}
}
