package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
)

// ConfigCmd prints the effective configuration.
type ConfigCmd struct {
	Path bool `help:"Print only the path of the configuration file in use."`
}

// Run implements the command; it makes no engine call (the client's
// --version at most, to learn which engine it is).
func (c *ConfigCmd) Run(ctx context.Context, app *App) error {
	if c.Path {
		p := app.Cfg.Path
		if p == "" {
			p = app.G.Config
		}
		if app.G.JSON {
			var path any // null when there is no file
			if p != "" {
				path = p
			}
			return json.NewEncoder(app.Env.Stdout).Encode(map[string]any{"path": path})
		}
		if p == "" {
			app.notice("no configuration file (defaults and environment only)")
			return nil
		}
		_, err := fmt.Fprintln(app.Env.Stdout, p)
		return err
	}
	keys, values := app.Cfg.All()
	for _, w := range config.Warnings(app.lookupEnv) {
		app.warn(w) // under --json a JSON line on stderr
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(values)
	}
	w := tabwriter.NewWriter(app.Env.Stdout, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		v, _ := json.Marshal(values[k].V)
		fmt.Fprintf(w, "%s\t%s\t# %s\n", k, v, values[k].Source)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if found, err := detect.Find(ctx, app.detectOptions()); err == nil {
		rt := detect.New(found, app.detectOptions())
		if l, ok := rt.(runtime.Locator); ok {
			loc := l.Location()
			loc.Shared = append(loc.Shared, app.Cfg.SharedPaths.Value...)
			fmt.Fprintf(app.Env.Stdout, "# engine: %s %s, %s\n", found.Dialect, safe(found.Path), safe(loc.String()))
			fmt.Fprintf(app.Env.Stdout, "# storage: %s\n", storageText(sandbox.StorageAt(app.Cfg.Sandbox.Storage.Value, loc, app.stateDir()), app.Cfg.Sandbox.Storage))
		}
	}
	return nil
}
