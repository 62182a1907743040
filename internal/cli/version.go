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

// BuildVersion is what `hsbx version` prints: the release's Version when
// one was set; else the version Go recorded for the module — a tag, `go
// install …@vX`, or a pseudo-version from the commit with "+dirty" for
// uncommitted changes (Go 1.24+, when the build ran in a git checkout);
// else the commit alone; else "(devel)", Go's word for a build that
// carries no version. Never a made-up number.
func BuildVersion() string { return version() }

func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
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
				dirty = "+dirty"
			}
		}
	}
	if len(rev) >= 12 {
		return "(devel)+" + rev[:12] + dirty
	}
	return "(devel)"
}
