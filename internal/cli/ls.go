package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

// LsCmd lists sandboxes.
type LsCmd struct {
	AllProfiles bool `help:"List every profile's sandboxes, not only the current profile's."`
}

// Run implements the command.
func (c *LsCmd) Run(ctx context.Context, app *App) error {
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	ls, err := cl.Manager().List(ctx, app.Cfg.Scope(), c.AllProfiles)
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
	fmt.Fprintln(w, "TASK\tPROFILE\tSTATE\tID\tNAME\tIMAGE\tCREATED\tFINISHED")
	now := time.Now()
	for _, l := range ls {
		finished := "-"
		if l.Finished != nil {
			finished = ago(now, *l.Finished)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.12s\t%s\t%s\t%s\t%s\n", safe(l.Task), safe(l.Profile), safe(string(l.State)), safe(l.ID), safe(l.Name), safe(l.Image), ago(now, l.Created), finished)
	}
	return w.Flush()
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
