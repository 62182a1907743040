package hsbx_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// Open's defaults are the CLI's: its state dir, and the orphan sweep when
// a sandbox had to be made, unless NoAutoSweep (or the configuration)
// turns it off.
func TestOpenDefaultsAreTheCLIs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noSweep   bool
		wantSwept bool
	}{{"sweeps", false, true}, {"no-auto-sweep", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			env := append(os.Environ(), "FAKEENGINE_DIR="+filepath.Join(dir, "engine"), "XDG_STATE_HOME="+filepath.Join(dir, "state"),
				"XDG_CACHE_HOME="+filepath.Join(dir, "cache"), "HSBX_PROFILE=sweep")
			docker, err := proc.LookPath("docker")
			if err != nil {
				t.Fatal(err)
			}
			res, err := (&proc.Runner{}).Run(ctx, proc.Cmd{Env: append(env, "FAKEENGINE_NOW=2026-01-01T00:00:00Z"), Argv: []string{docker,
				"create", "--name", "orphan", "--label", "hermes-agent=1", "--label", "hermes-profile=sweep", "busybox", "true"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("making an orphan: %v %s", err, res.Stderr)
			}

			c, err := hsbx.Open(ctx, hsbx.Options{Environ: env, NoAutoSweep: tc.noSweep})
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, "state", "hsbx"); c.StateDir() != want {
				t.Errorf("state dir %s, want the CLI's %s", c.StateDir(), want)
			}
			if _, err := c.Sandbox("a").Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			left, err := c.Runtime().List(ctx, runtime.ListOptions{Name: "orphan"})
			if err != nil {
				t.Fatal(err)
			}
			if swept := len(left) == 0; swept != tc.wantSwept {
				t.Errorf("orphan swept: %v, want %v", swept, tc.wantSwept)
			}
		})
	}
}
