package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/record"
	"github.com/hsbx/hsbx/sandbox"
)

// HistoryCmd shows the record of what ran.
type HistoryCmd struct {
	taskFlag
	AllProfiles bool `help:"Show every profile's commands, not only the current profile's."`
	Follow      bool `short:"f" help:"Keep printing commands as they end, until interrupted."`
	Last        int  `help:"Show only the last N commands (0: all)." placeholder:"N" default:"0"`
}

func (c *HistoryCmd) settingFlags() []config.Flag { return c.flags() }

// Help is shown under the usage line.
func (c *HistoryCmd) Help() string {
	return `Every command hsbx runs in a sandbox (exec, run, the file commands) adds
one record as it ends: when, how long, who (host, uid, pid), what (the argv,
a script's first line, a file's path; -e names, never their values), the
sandbox user, the route (channel or engine), the exit status, whether it
timed out or was killed, and the bytes in, out and on stderr (-1: the engine
client wrote them itself). The record is this user's alone, in the state
dir (ran.jsonl, rotated at 8 MiB). The profile's commands, or the task's
when one is named (--task or HSBX_TASK). No engine call.`
}

// Run implements the command.
func (c *HistoryCmd) Run(ctx context.Context, app *App) error {
	if c.Last < 0 {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--last %d: want N >= 0", c.Last)}
	}
	path := sandbox.RecordFile(app.stateDir())
	profile, task := app.profile(), ""
	if c.AllProfiles {
		profile = ""
	}
	if app.Cfg.Task.Explicit() {
		task = app.Cfg.Task.Value
	}
	read := func() ([]record.Record, error) {
		all, err := record.Read(path)
		var out []record.Record
		for _, r := range all {
			if (profile == "" || r.Profile == profile) && (task == "" || r.Task == task) {
				out = append(out, r)
			}
		}
		return out, err
	}
	recs, err := read()
	if err != nil {
		return err
	}
	if c.Last > 0 && len(recs) > c.Last {
		recs = recs[len(recs)-c.Last:]
	}
	return showLog(ctx, app, recs, c.Follow, read, writeHistory)
}

// showLog prints recs (--json: one array; with follow, one object a
// line), then with follow what read finds added every half second until
// ctx ends: netlog's and history's way with their logs.
func showLog[T any](ctx context.Context, app *App, recs []T, follow bool, read func() ([]T, error), table func(io.Writer, []T, bool)) error {
	w := app.Env.Stdout
	if app.G.JSON && !follow {
		if recs == nil {
			recs = []T{}
		}
		b, _ := json.Marshal(recs)
		fmt.Fprintln(w, string(b))
		return nil
	}
	show := func(rs []T, header bool) {
		if app.G.JSON { // --follow --json: one object a line
			for _, r := range rs {
				b, _ := json.Marshal(r)
				fmt.Fprintln(w, string(b))
			}
			return
		}
		table(w, rs, header)
	}
	show(recs, true)
	if !follow {
		return nil
	}
	all, err := read()
	if err != nil {
		return err
	}
	seen := len(all)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		all, err := read()
		if err != nil {
			return err
		}
		if len(all) < seen {
			seen = 0 // rotated twice since: start from what is there
		}
		if len(all) > seen {
			show(all[seen:], false)
			seen = len(all)
		}
	}
}

// writeHistory is history's table; every column that comes from outside
// hsbx (argv, paths, names) is escaped.
func writeHistory(w io.Writer, recs []record.Record, header bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "TIME\tTASK\tKIND\tUSER\tEXIT\tDURATION\tVIA\tOUT\tERR\tWHAT")
	}
	for _, r := range recs {
		what := strings.Join(r.Argv, " ")
		switch {
		case r.Script != "":
			what = r.Script
		case r.Path != "":
			what = r.Path
		}
		exit := strconv.Itoa(r.ExitCode)
		switch {
		case r.TimedOut:
			exit = "timeout"
		case r.Killed:
			exit = "killed"
		case r.Error != "":
			exit = "error"
		}
		user := r.User
		if user == "" {
			user = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Local().Format("2006-01-02 15:04:05"), safe(r.Task), r.Kind,
			safe(user), exit, (time.Duration(r.Duration) * time.Millisecond).String(), r.Via, count(r.BytesOut), count(r.BytesErr),
			safe(record.ClipString(what, 120)))
	}
	_ = tw.Flush()
}

func count(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}
