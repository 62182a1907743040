package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hsbx/hsbx/sandbox"
)

// StopCmd stops a sandbox and keeps its filesystem.
type StopCmd struct {
	taskFlag
}

// Run implements the command. No sandbox is not an error.
func (c *StopCmd) Run(ctx context.Context, app *App) error {
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	res, err := sb.Stop(ctx)
	if err != nil {
		return err
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(map[string]any{"name": sb.Name(), "task": app.Cfg.Task.Value, "profile": app.profile(),
			"stopped": res != sandbox.NoSandbox, "already_stopped": res == sandbox.AlreadyStopped})
	}
	switch res {
	case sandbox.NoSandbox:
		noSandbox(ctx, app, sb)
		return nil
	case sandbox.AlreadyStopped:
		_, err = fmt.Fprintf(app.Env.Stdout, "%s was already stopped\n", sb.Name())
		return err
	}
	_, err = fmt.Fprintf(app.Env.Stdout, "stopped %s\n", sb.Name())
	return err
}

// DownCmd stops and removes a sandbox, whatever the mode.
type DownCmd struct {
	taskFlag
	Purge bool `help:"Also remove the key's host directories (the persistent sandbox's /workspace and /root; down keeps them for the key's next sandbox). Refused while a sandbox of the key exists. Snapshots taken of the task are the profile's and are kept (it names them; hsbx snapshot rm removes them)."`
}

// Run implements the command. No sandbox is not an error.
func (c *DownCmd) Run(ctx context.Context, app *App) error {
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	removed, err := sb.Down(ctx)
	if err != nil {
		return err
	}
	var purged sandbox.Purged
	var kept, keptVols, snaps []string
	if c.Purge {
		if purged, err = sb.Storage().Purge(ctx); err != nil {
			return err
		}
		snaps = taskSnapshots(ctx, app, sb.Key())
	} else {
		kept = sb.Storage().HostDirs()
		if keptVols, err = sb.Storage().Volumes(ctx); err != nil {
			app.warn(err.Error())
		}
	}
	if app.G.JSON {
		ids := []string{}
		for _, r := range removed.Containers {
			ids = append(ids, r.ID)
		}
		out := map[string]any{"task": app.Cfg.Task.Value, "profile": app.profile(), "removed": ids,
			"removed_dirs": nonNil(purged.Dirs), "kept_dirs": nonNil(kept),
			"removed_volumes": nonNil(purged.Volumes), "kept_volumes": nonNil(keptVols)}
		if c.Purge {
			out["kept_snapshots"] = nonNil(snaps)
		}
		if len(removed.Claims) > 0 {
			out["removed_claims"] = removed.Claims
		}
		return json.NewEncoder(app.Env.Stdout).Encode(out)
	}
	if len(removed.Containers) == 0 && len(removed.Claims) == 0 {
		noSandbox(ctx, app, sb)
	}
	for _, r := range removed.Containers {
		fmt.Fprintf(app.Env.Stdout, "removed %s (%.12s)\n", safe(r.Name), r.ID)
	}
	for _, c := range removed.Claims {
		fmt.Fprintf(app.Env.Stdout, "removed persistent volume claim %s (/workspace and /root)\n", safe(c))
	}
	for _, d := range purged.Dirs {
		fmt.Fprintf(app.Env.Stdout, "removed %s\n", safe(d))
	}
	for _, v := range purged.Volumes {
		fmt.Fprintf(app.Env.Stdout, "removed volume %s\n", safe(v))
	}
	if len(kept) > 0 {
		fmt.Fprintf(app.Env.Stdout, "kept the key's files for its next sandbox: %s (down --purge removes them)\n", safe(strings.Join(kept, ", ")))
	}
	if len(keptVols) > 0 {
		fmt.Fprintf(app.Env.Stdout, "kept the key's volumes for its next sandbox: %s (down --purge removes them)\n", safe(strings.Join(keptVols, ", ")))
	}
	if len(snaps) > 0 {
		fmt.Fprintf(app.Env.Stdout, "kept the snapshots taken of the task (they are the profile's): %s (hsbx snapshot rm removes them)\n", safe(strings.Join(snaps, ", ")))
	}
	return nil
}

// taskSnapshots names the profile's snapshots taken of k's task, which
// down --purge keeps; none where the engine has no snapshots.
func taskSnapshots(ctx context.Context, app *App, k sandbox.Key) []string {
	cl, err := app.open(ctx)
	if err != nil {
		return nil
	}
	list, err := cl.Manager().Snapshots(ctx, k.Scope())
	if err != nil {
		if !errors.Is(err, sandbox.ErrSnapshotUnsupported) {
			app.warn(fmt.Sprintf("could not list the task's snapshots: %v", err))
		}
		return nil
	}
	var names []string
	for _, s := range list {
		if s.Task == k.Task {
			names = append(names, s.Name)
		}
	}
	return names
}

// nonNil is s, or an empty list (JSON [] rather than null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// noSandbox says there is nothing to tear down, and names a container that
// squats on the sandbox's name (left alone).
func noSandbox(ctx context.Context, app *App, sb *sandbox.Sandbox) {
	task := sb.Key().Task
	app.notice(fmt.Sprintf("no sandbox for task %q in profile %q", safe(task), safe(app.profile())))
	if c, ok := sb.Squatter(ctx); ok {
		app.warn(fmt.Sprintf("container %s (%.12s) holds this sandbox's name but is not an hsbx sandbox (no hsbx.key=%s label); it was left alone", safe(c.Name), c.ID, sb.Key().Hash()))
	}
}
