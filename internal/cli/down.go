package cli

import (
	"encoding/json"
	"fmt"
)

// StopCmd stops a sandbox and keeps its filesystem.
type StopCmd struct {
	taskFlag
}

// Run implements the command. No sandbox is not an error.
func (c *StopCmd) Run(app *App) error {
	sb, err := app.sandbox(c.Task)
	if err != nil {
		return err
	}
	found, err := sb.Stop(app.Ctx)
	if err != nil {
		return err
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(map[string]any{"name": sb.Name(), "task": c.Task, "profile": app.profile(), "stopped": found})
	}
	if !found {
		fmt.Fprintf(app.Env.Stderr, "hsbx: no sandbox for task %q in profile %q\n", c.Task, app.profile())
		return nil
	}
	_, err = fmt.Fprintf(app.Env.Stdout, "stopped %s\n", sb.Name())
	return err
}

// DownCmd stops and removes a sandbox, whatever the mode.
type DownCmd struct {
	taskFlag
}

// Run implements the command. No sandbox is not an error.
func (c *DownCmd) Run(app *App) error {
	sb, err := app.sandbox(c.Task)
	if err != nil {
		return err
	}
	removed, err := sb.Down(app.Ctx)
	if err != nil {
		return err
	}
	if app.G.JSON {
		ids := []string{}
		for _, r := range removed {
			ids = append(ids, r.ID)
		}
		return json.NewEncoder(app.Env.Stdout).Encode(map[string]any{"task": c.Task, "profile": app.profile(), "removed": ids})
	}
	if len(removed) == 0 {
		fmt.Fprintf(app.Env.Stderr, "hsbx: no sandbox for task %q in profile %q\n", c.Task, app.profile())
		return nil
	}
	for _, r := range removed {
		fmt.Fprintf(app.Env.Stdout, "removed %s (%.12s)\n", r.Name, r.ID)
	}
	return nil
}
