package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/sandbox"
)

// SnapshotCmd saves sandboxes' files and makes sandboxes from them.
type SnapshotCmd struct {
	Save     SnapshotSaveCmd     `cmd:"" help:"Save the task's sandbox's files as snapshot NAME of the profile: its image layer, /workspace, /root and its memory-backed paths (not its processes)."`
	Ls       SnapshotLsCmd       `cmd:"" help:"List the profile's snapshots."`
	Rm       SnapshotRmCmd       `cmd:"" help:"Remove snapshots (not while sandboxes made from them stand on them)."`
	Rollback SnapshotRollbackCmd `cmd:"" help:"Replace the task's sandbox by one made from snapshot NAME: what was made since is gone. Refused while a command runs in it."`
	Fork     SnapshotForkCmd     `cmd:"" help:"Make new sandboxes from snapshot NAME, at once: one for each --to task, or --count numbered ones."`
}

// SnapshotSaveCmd is `snapshot save`.
type SnapshotSaveCmd struct {
	taskFlag
	Name string `arg:"" help:"The snapshot's name: letters, digits, '.', '_' and '-' (not first), at most 128." placeholder:"NAME"`
}

func (c *SnapshotSaveCmd) settingFlags() []config.Flag { return c.flags() }

// Run implements the command: the snapshot on stdout (--json: its object).
func (c *SnapshotSaveCmd) Run(ctx context.Context, app *App) error {
	if err := sandbox.ValidSnapshotName(c.Name); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	return (&fileFlags{taskFlag: c.taskFlag}).withSandbox(ctx, app, func(sb *sandbox.Sandbox) error {
		si, err := sb.Snapshots().Take(ctx, c.Name)
		if err != nil {
			return err
		}
		return writeSnapshots(app, []sandbox.SnapshotInfo{si}, true)
	})
}

// SnapshotLsCmd is `snapshot ls`.
type SnapshotLsCmd struct {
	Task nameFlag `predictor:"task" help:"Only the snapshots taken of this task." placeholder:"ID"`
}

// Run implements the command (--json: an array).
func (c *SnapshotLsCmd) Run(ctx context.Context, app *App) error {
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	list, err := cl.Manager().Snapshots(ctx, app.Cfg.Scope())
	if err != nil {
		return err
	}
	if c.Task.Set {
		kept := list[:0]
		for _, s := range list {
			if s.Task == c.Task.Value {
				kept = append(kept, s)
			}
		}
		list = kept
	}
	return writeSnapshots(app, list, false)
}

// SnapshotRmCmd is `snapshot rm`.
type SnapshotRmCmd struct {
	Names []string `arg:"" help:"The snapshots to remove." placeholder:"NAME"`
}

// Run implements the command: each one removed, or why not; exit 1 when
// any was not.
func (c *SnapshotRmCmd) Run(ctx context.Context, app *App) error {
	for _, n := range c.Names {
		if err := sandbox.ValidSnapshotName(n); err != nil {
			return &exitError{code: ExitUsage, err: err}
		}
	}
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	removed := []string{}
	var errs []error
	for _, n := range c.Names {
		if err := cl.Manager().RemoveSnapshot(ctx, app.Cfg.Scope(), n); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n)
		if !app.G.JSON {
			fmt.Fprintf(app.Env.Stdout, "removed snapshot %s\n", n)
		}
	}
	if app.G.JSON && (len(errs) == 0 || len(removed) > 0) {
		b, _ := json.Marshal(map[string]any{"removed": removed})
		fmt.Fprintln(app.Env.Stdout, string(b))
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// SnapshotRollbackCmd is `snapshot rollback`.
type SnapshotRollbackCmd struct {
	taskFlag
	Name string `arg:"" help:"The snapshot to go back to (any of the profile's)." placeholder:"NAME"`
}

// Run implements the command: the new sandbox as `up` prints it.
func (c *SnapshotRollbackCmd) Run(ctx context.Context, app *App) error {
	if err := sandbox.ValidSnapshotName(c.Name); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	res, err := sb.Snapshots().Rollback(ctx, c.Name)
	if err != nil {
		return err
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(res)
	}
	_, err = fmt.Fprintln(app.Env.Stdout, res.ID)
	return err
}

func (c *SnapshotRollbackCmd) settingFlags() []config.Flag { return c.flags() }

// SnapshotForkCmd is `snapshot fork`.
type SnapshotForkCmd struct {
	To     []string `help:"A task to make from the snapshot (repeatable); it must have no sandbox." placeholder:"TASK"`
	Count  int      `help:"Make N tasks, named PREFIX-1 ... PREFIX-N." placeholder:"N"`
	Prefix string   `help:"The numbered tasks' prefix (default: the snapshot's name)." placeholder:"PREFIX"`
	Name   string   `arg:"" help:"The snapshot to fork." placeholder:"NAME"`
}

// Run implements the command: the sandboxes made, in parallel; those
// that failed are said and the exit status is 1 (the others are kept).
func (c *SnapshotForkCmd) Run(ctx context.Context, app *App) error {
	if err := sandbox.ValidSnapshotName(c.Name); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	tasks, err := c.tasks()
	if err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	cl, err := app.open(ctx)
	if err != nil {
		return err
	}
	app.Env.awaitReady()
	// The snapshot once, before anything is made.
	si, err := cl.Manager().FindSnapshot(ctx, app.Cfg.Scope(), c.Name)
	if err != nil {
		return err
	}
	results := make([]sandbox.Result, len(tasks))
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, task := range tasks {
		sb := cl.Sandbox(task)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = sb.Snapshots().ForkFrom(ctx, si)
		}()
	}
	wg.Wait()
	var failed []error
	type forked struct {
		Task string `json:"task"`
		Name string `json:"name"`
		ID   string `json:"id"`
	}
	out := []forked{}
	for i, task := range tasks {
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("task %s: %w", task, errs[i]))
			continue
		}
		r := results[i]
		if app.G.JSON {
			out = append(out, forked{task, r.Name, r.ID})
		} else {
			fmt.Fprintf(app.Env.Stdout, "%s\t%s\t%.12s\n", safe(task), safe(r.Name), r.ID)
		}
	}
	if app.G.JSON && len(out) > 0 {
		b, _ := json.Marshal(out)
		fmt.Fprintln(app.Env.Stdout, string(b))
	}
	if len(failed) == 1 {
		return failed[0]
	}
	return errors.Join(failed...)
}

// tasks are the forks' tasks, checked: given or numbered, no repeats.
func (c *SnapshotForkCmd) tasks() ([]string, error) {
	switch {
	case c.Count < 0 || c.Count > 1000:
		return nil, fmt.Errorf("--count %d: want 1 to 1000", c.Count)
	case c.Count > 0 && len(c.To) > 0:
		return nil, errors.New("give --to tasks or --count, not both")
	case c.Count == 0 && len(c.To) == 0:
		return nil, errors.New("give the tasks to make: --to TASK (repeatable) or --count N")
	case c.Prefix != "" && c.Count == 0:
		return nil, errors.New("--prefix names the tasks of --count")
	}
	tasks := c.To
	if c.Count > 0 {
		prefix := c.Prefix
		if prefix == "" {
			prefix = c.Name
		}
		for i := 1; i <= c.Count; i++ {
			tasks = append(tasks, prefix+"-"+strconv.Itoa(i))
		}
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		if t == "" || seen[t] {
			return nil, fmt.Errorf("task %q is empty or given twice", t)
		}
		seen[t] = true
	}
	return tasks, nil
}

// writeSnapshots prints snapshots: a table, or --json (one object when
// one is true, else an array).
func writeSnapshots(app *App, list []sandbox.SnapshotInfo, one bool) error {
	if app.G.JSON {
		var v any = list
		if one {
			v = list[0]
		} else if list == nil {
			v = []sandbox.SnapshotInfo{}
		}
		b, _ := json.Marshal(v)
		fmt.Fprintln(app.Env.Stdout, string(b))
		return nil
	}
	writeSnapshotTable(app.Env.Stdout, list)
	return nil
}

func writeSnapshotTable(w io.Writer, list []sandbox.SnapshotInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTASK\tCREATED\tSIZE\tIMAGE\tPATHS")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(s.Name), safe(s.Task), s.Created.Local().Format("2006-01-02 15:04:05"),
			humanBytes(s.Size), safe(s.SourceImage), safe(strings.Join(s.Paths, ",")))
	}
	_ = tw.Flush()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
