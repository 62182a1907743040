package cli

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
)

// VersionCmd prints hsbx's own version; it makes no engine call.
type VersionCmd struct{}

// Run implements the command.
func (c *VersionCmd) Run(ctx context.Context, app *App) error {
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(map[string]string{
			"version": Version, "go": goruntime.Version(), "platform": goruntime.GOOS + "/" + goruntime.GOARCH,
		})
	}
	_, err := fmt.Fprintf(app.Env.Stdout, "hsbx %s (%s, %s/%s)\n", Version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
	return err
}
