package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

// LsCmd lists sandboxes.
type LsCmd struct {
	AllProfiles bool `help:"List every profile's sandboxes, not only the current profile's."`
	Volumes     bool `help:"List the engine volumes that keep the profile's tasks' /workspace and /root (storage = volume) instead: down keeps them, down --purge removes them."`
}

// Run implements the command.
func (c *LsCmd) Run(ctx context.Context, app *App) error {
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	if c.Volumes {
		return lsVolumes(ctx, app, cl.Manager(), c.AllProfiles)
	}
	spec := app.Cfg.Spec()
	ls, err := cl.Manager().List(ctx, app.Cfg.Scope(), c.AllProfiles, &spec)
	if err != nil {
		return err
	}
	if app.G.JSON {
		if ls == nil {
			ls = []sandbox.Listing{}
		}
		return json.NewEncoder(app.Env.Stdout).Encode(ls)
	}
	w := tabwriter.NewWriter(app.Env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TASK\tPROFILE\tSTATE\tID\tNAME\tIMAGE\tCREATED\tFINISHED\tSTALE")
	now := time.Now()
	anyStale := false
	for _, l := range ls {
		anyStale = anyStale || len(l.Drift) > 0
		finished := "-"
		if l.Finished != nil {
			finished = ago(now, *l.Finished)
		}
		stale := "-"
		if len(l.Drift) > 0 {
			stale = strings.Join(l.Drift, ",")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.12s\t%s\t%s\t%s\t%s\t%s\n", safe(l.Task), safe(l.Profile), safe(string(l.State)), safe(l.ID), safe(l.Name), safe(l.Image), ago(now, l.Created), finished, stale)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if anyStale {
		app.notice("STALE: made from other settings than these (those named); `hsbx up --recreate [--task T]` replaces a sandbox with one made from these")
	}
	return nil
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		// The engine's clock is ahead of this host's: say so, not "0s ago".
		return t.Sub(now).Round(time.Second).String() + " ahead (clock skew)"
	}
	return d.String() + " ago"
}

// lsVolumes lists the scope's volumes (ls --volumes).
func lsVolumes(ctx context.Context, app *App, m *sandbox.Manager, all bool) error {
	vs, err := m.Volumes(ctx, app.Cfg.Scope(), all)
	if err != nil {
		return err
	}
	if app.G.JSON {
		if vs == nil {
			vs = []sandbox.VolumeListing{}
		}
		return json.NewEncoder(app.Env.Stdout).Encode(vs)
	}
	w := tabwriter.NewWriter(app.Env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TASK\tPROFILE\tHOLDS\tVOLUME")
	for _, v := range vs {
		holds := "/workspace"
		if v.Holds == "home" {
			holds = "/root"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", safe(v.Task), safe(v.Profile), holds, safe(v.Name))
	}
	return w.Flush()
}
