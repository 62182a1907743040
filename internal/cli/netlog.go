package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/sandbox"
)

// NetlogCmd shows the network log of a sandbox whose network is allow.
type NetlogCmd struct {
	taskFlag
	Follow bool `short:"f" help:"Keep printing decisions as they are made, until interrupted."`
	Last   int  `help:"Show only the last N decisions (0: all)." placeholder:"N" default:"0"`
}

func (c *NetlogCmd) settingFlags() []config.Flag { return c.flags() }

// Run implements the command. It reads this host's log for the task's key
// (the relay's decisions: time, destination, allowed or refused and by
// which rule, bytes each way); no engine call.
func (c *NetlogCmd) Run(ctx context.Context, app *App) error {
	if c.Last < 0 {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--last %d: want N >= 0", c.Last)}
	}
	path := sandbox.EgressLogFile(app.stateDir(), app.Cfg.Key())
	recs, err := egress.ReadLog(path)
	if err != nil {
		return err
	}
	if c.Last > 0 && len(recs) > c.Last {
		recs = recs[len(recs)-c.Last:]
	}
	return showLog(ctx, app, recs, c.Follow, func() ([]egress.Record, error) { return egress.ReadLog(path) }, writeNetlog)
}

// writeNetlog is netlog's table. Host names come from the sandbox's
// requests: every column is escaped.
func writeNetlog(w io.Writer, recs []egress.Record, header bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "TIME\tDECISION\tMETHOD\tDESTINATION\tRULE OR REASON\tOUT\tIN")
	}
	for _, r := range recs {
		decision, why := "refused", r.Reason
		if r.Allowed {
			decision, why = "allowed", r.Rule
			if r.Error != "" {
				decision, why = "failed", r.Error
			}
			if len(r.Secrets) > 0 && r.Error == "" {
				decision = "brokered" // a secret's value went in (docs/secrets.md)
				why += " (secrets: " + strings.Join(r.Secrets, ", ") + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Time.Local().Format("2006-01-02 15:04:05"), decision, safe(r.Method),
			safe(net.JoinHostPort(r.Host, strconv.Itoa(r.Port))), safe(why), r.BytesOut, r.BytesIn)
	}
	_ = tw.Flush()
}
