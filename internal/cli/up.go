package cli

import (
	"encoding/json"
	"fmt"
)

// taskFlag is the --task every sandbox command takes.
type taskFlag struct {
	Task string `help:"Task whose sandbox to use (env HSBX_TASK)." env:"HSBX_TASK" default:"default" placeholder:"ID"`
}

// UpCmd brings a sandbox up.
type UpCmd struct {
	taskFlag
	Image string `help:"Image for a new sandbox (sandbox.image; an existing sandbox keeps its image)." placeholder:"REF"`
}

func (c *UpCmd) settingFlags(f map[string][2]string) {
	if c.Image != "" {
		f["sandbox.image"] = [2]string{c.Image, "--image"}
	}
}

// Run implements the command. A running sandbox costs one engine call.
func (c *UpCmd) Run(app *App) error {
	if !app.Cfg.Bool("sandbox.persist_across_processes") {
		return &exitError{code: ExitUsage, err: fmt.Errorf("`hsbx up` with persist_across_processes = false (%s) would make a sandbox that is removed as soon as hsbx exits; use `hsbx exec`, or turn persistence on", app.Cfg.Get("sandbox.persist_across_processes").Source)}
	}
	sb, err := app.sandbox(c.Task)
	if err != nil {
		return err
	}
	res, err := sb.Ensure(app.Ctx)
	if err != nil {
		return err
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(res)
	}
	_, err = fmt.Fprintln(app.Env.Stdout, res.ID)
	app.Log.Info("sandbox up", "action", res.Action, "name", res.Name)
	return err
}
