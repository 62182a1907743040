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
	MaxAge      string `help:"Remove exited, never-started and dead sandboxes older than this; 0 removes them whatever their age (default: 2 x reaper.lifetime, at least 120s: a young never-started one may be another process's up in progress)." placeholder:"DUR"`
	Idle        string `help:"Also remove running sandboxes unused through hsbx for this long, with no command running in them on any host (reaper.idle_after; 0 = never)." placeholder:"DUR"`
	AllProfiles bool   `help:"Sweep every profile, not only the current one."`
	DryRun      bool   `help:"Report the verdicts; remove nothing."`
}

func (c *ReapCmd) settingFlags() []config.Flag {
	return given(config.Flag{Key: "reaper.idle_after", Value: c.Idle, Name: "--idle"})
}

// Run implements the command: a constant number of engine calls.
func (c *ReapCmd) Run(ctx context.Context, app *App) error {
	maxAge := time.Duration(-1) // checked before any engine call
	if c.MaxAge != "" {
		d, err := config.ParseDuration(c.MaxAge)
		if err != nil {
			return &usageError{fmt.Errorf("--max-age %q: %w", c.MaxAge, err), "give a duration like 10m, or 0 for any age"}
		}
		maxAge = d
	}
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	o := cl.ReapOptions()
	o.AllProfiles = c.AllProfiles
	if maxAge >= 0 {
		o.MaxAge = maxAge // 0 too: every age is old enough
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
			fmt.Fprintf(app.Env.Stdout, "%s %.12s %s task=%s profile=%s: %s, %s old\n", verb, safe(r.ID), safe(r.Name), safe(r.Task), safe(r.Profile), safe(r.Reason), time.Duration(r.AgeSeconds)*time.Second)
		}
		for _, v := range rep.Snapshots {
			if v.Removed {
				fmt.Fprintf(app.Env.Stdout, "%s snapshot %s task=%s profile=%s: %s, %s old\n", verb, safe(v.Name), safe(v.Task), safe(v.Profile), safe(v.Reason), time.Duration(v.AgeSeconds)*time.Second)
			} else {
				fmt.Fprintf(app.Env.Stdout, "kept snapshot %s task=%s profile=%s: %s\n", safe(v.Name), safe(v.Task), safe(v.Profile), safe(v.Reason))
			}
		}
		for _, e := range rep.Errors {
			app.notice(fmt.Sprintf("could not reap %.12s: %s", safe(e.ID), safe(e.Error)))
		}
		fmt.Fprintln(app.Env.Stdout, rep.Summary(c.DryRun))
	}
	if len(rep.Errors) > 0 {
		return &exitError{code: ExitError}
	}
	return nil
}
