package hsbx_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// Storage.Purge never removes the files of a sandbox that exists: a
// sandbox of the key (made meanwhile by another process) keeps them.
func TestPurgeRefusesUnderASandbox(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			state := itStateDir(t, tg)
			if state == "" {
				state = dir
			}
			sbx := filepath.Join(state, "sbx-"+filepath.Base(dir))
			if err := os.MkdirAll(sbx, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sbx) })
			env := append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "HOME="+dir, "XDG_STATE_HOME="+state,
				"TERMINAL_DOCKER_IMAGE="+tg.Image, "TERMINAL_DOCKER_NETWORK=false", "HSBX_PROFILE=hsbx-purge",
				"TERMINAL_DOCKER_ORPHAN_REAPER=false", "TERMINAL_SANDBOX_DIR="+sbx)
			xdg := dir
			if tg.Rootless {
				xdg = "" // the rootless engine's wrapper reads them too
			}
			env = append(env, "XDG_CONFIG_HOME="+xdg, "XDG_CACHE_HOME="+xdg)
			c, err := hsbx.Open(ctx, hsbx.Options{Environ: env, NoAutoSweep: true})
			if err != nil {
				t.Fatal(err)
			}
			sb := c.Sandbox("purge-" + filepath.Base(dir))
			t.Cleanup(func() { _, _ = sb.Down(context.Background()) })
			if _, err := sb.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			// Files the sandbox made (as its user) go too. (Not rootless here:
			// hsbx runs as root and made the dirs, which the engine's other
			// user cannot write; a real rootless user owns both.)
			if !tg.Fake && !tg.Rootless {
				if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo x >/workspace/f; mkdir -p /workspace/d/e; echo y >/root/g"}}); err != nil || code != 0 {
					t.Fatalf("writing into the sandbox's dirs: %d %v", code, err)
				}
			}
			dirs := sb.Storage().HostDirs()
			if len(dirs) != 2 {
				t.Fatalf("host dirs of a persistent sandbox: %q", dirs)
			}
			if _, err := sb.Storage().Purge(ctx); !errors.Is(err, sandbox.ErrSandboxExists) {
				t.Fatalf("purge under a live sandbox: %v, want ErrSandboxExists", err)
			}
			for _, d := range dirs {
				if _, err := os.Stat(d); err != nil {
					t.Fatalf("%s went: %v", d, err)
				}
			}
			if _, err := sb.Down(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := sb.Storage().Purge(ctx); err != nil || len(got.Dirs) != 2 || len(sb.Storage().HostDirs()) != 0 {
				t.Fatalf("purge after down: %q %v; left %q", got.Dirs, err, sb.Storage().HostDirs())
			}
		})
	}
}
