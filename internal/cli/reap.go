package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hsbx/hsbx/config"
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
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	o := cl.ReapOptions()
	o.AllProfiles = c.AllProfiles
	if c.MaxAge > 0 {
		o.MaxAge = c.MaxAge
	}
	rep, err := cl.Sweeper().Sweep(ctx, o, c.DryRun)
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
