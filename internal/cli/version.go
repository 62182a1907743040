package cli

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"runtime/debug"
)

// VersionCmd prints hsbx's own version; it makes no engine call.
type VersionCmd struct{}

// Run implements the command.
func (c *VersionCmd) Run(ctx context.Context, app *App) error {
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(map[string]string{
			"version": version(), "go": goruntime.Version(), "platform": goruntime.GOOS + "/" + goruntime.GOARCH,
		})
	}
	_, err := fmt.Fprintf(app.Env.Stdout, "hsbx %s (%s, %s/%s)\n", version(), goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
	return err
}

// version is hsbx's version: the -X ldflags value when a release build set
// one, else the module version `go install …@vX` recorded, else the
// development version with the commit it was built from.
func version() string {
	if Version != devVersion {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) >= 12 {
		return Version + "+" + rev[:12] + dirty
	}
	return Version
}
