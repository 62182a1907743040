package hsbx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// storage = volume: /workspace and /root live in two volumes of the
// engine, labelled with the key, and nothing of the host is bound (the
// engine's own record says so); down keeps them, the next sandbox of the
// key sees the same files, a fork of a snapshot carries them into its
// own volumes, and down --purge removes them once no sandbox of the key
// exists.
func TestStorageInVolumes(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Dialect() == runtime.Kubectl {
			continue // a claim, not a volume: kube_persist
		}
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			state := itStateDir(t, tg)
			if state == "" {
				state = dir
			}
			env := append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "HOME="+dir, "XDG_STATE_HOME="+state,
				"TERMINAL_DOCKER_IMAGE="+tg.Image, "TERMINAL_DOCKER_NETWORK=false", "HSBX_PROFILE=hsbx-volume",
				"TERMINAL_DOCKER_ORPHAN_REAPER=false", "HSBX_STORAGE=volume", "HSBX_EXEC_CHANNEL=false")
			xdg := dir
			if tg.Rootless {
				xdg = ""
			}
			env = append(env, "XDG_CONFIG_HOME="+xdg, "XDG_CACHE_HOME="+xdg)
			c, err := hsbx.Open(ctx, hsbx.Options{Environ: env, NoAutoSweep: true})
			if err != nil {
				t.Fatal(err)
			}
			task := fmt.Sprintf("vol-%d-%s", os.Getpid(), filepath.Base(dir))
			sb := c.Sandbox(task)
			fork := c.Sandbox(task + "-fork")
			t.Cleanup(func() {
				for _, s := range []*sandbox.Sandbox{sb, fork} {
					_, _ = s.Down(context.Background())
					_, _ = s.Storage().Purge(context.Background())
				}
				_ = c.Manager().RemoveSnapshot(context.Background(), sb.Key().Scope(), task) // after the fork made from it
			})
			res, err := sb.Ensure(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !tg.Fake {
				var mounts []struct{ Type, Name, Destination string }
				raw := engineOut(t, tg.Bin, env, "inspect", "--format", "{{json .Mounts}}", res.ID)
				if err := json.Unmarshal([]byte(raw), &mounts); err != nil {
					t.Fatalf("inspect's mounts: %v: %s", err, raw)
				}
				var vols []string
				for _, m := range mounts {
					if m.Type == "bind" {
						t.Errorf("a host bind mount under storage = volume: %+v", m)
					}
					if m.Type == "volume" {
						vols = append(vols, m.Destination+"="+m.Name)
					}
				}
				slices.Sort(vols)
				if len(vols) != 2 || !strings.HasPrefix(vols[0], "/root=hsbx-") || !strings.HasPrefix(vols[1], "/workspace=hsbx-") {
					t.Errorf("volume mounts: %q", vols)
				}
				if out, err := sb.Output(ctx, "sh", "-c", "echo kept >/workspace/f; echo home >/root/g; cat /workspace/f /root/g"); err != nil || string(out) != "kept\nhome\n" {
					t.Fatalf("writing the volumes: %q %v", out, err)
				}
			}
			if _, err := sb.Down(ctx); err != nil {
				t.Fatal(err)
			}
			vols, err := sb.Storage().Volumes(ctx)
			if err != nil || len(vols) != 2 {
				t.Fatalf("the key's volumes after down: %q %v", vols, err)
			}
			if _, err := sb.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			if !tg.Fake {
				if out, err := sb.Output(ctx, "cat", "/workspace/f", "/root/g"); err != nil || string(out) != "kept\nhome\n" {
					t.Fatalf("the next sandbox of the key reads %q %v, want its files", out, err)
				}
				// A fork of a snapshot gets the files, in volumes of its own.
				if _, err := sb.Snapshots().Take(ctx, task); err != nil {
					t.Fatal(err)
				}
				if _, err := fork.Snapshots().Fork(ctx, task); err != nil {
					t.Fatal(err)
				}
				if out, err := fork.Output(ctx, "sh", "-c", "cat /workspace/f /root/g; echo fork >/workspace/f"); err != nil || string(out) != "kept\nhome\n" {
					t.Fatalf("the fork reads %q %v", out, err)
				}
				if out, err := sb.Output(ctx, "cat", "/workspace/f"); err != nil || string(out) != "kept\n" {
					t.Fatalf("a write in the fork reached the snapshot's sandbox: %q %v", out, err)
				}
				if fv, err := fork.Storage().Volumes(ctx); err != nil || len(fv) != 2 || slices.Equal(fv, vols) {
					t.Fatalf("the fork's volumes: %q %v (the source's: %q)", fv, err, vols)
				}
			}
			if _, err := sb.Down(ctx); err != nil {
				t.Fatal(err)
			}
			p, err := sb.Storage().Purge(ctx)
			if err != nil || !slices.Equal(p.Volumes, vols) {
				t.Fatalf("purge: %+v %v, want %q", p, err, vols)
			}
			if left := engineOut(t, tg.Bin, env, "volume", "ls", "-q", "--filter", "label=hsbx.key="+sb.Key().Hash()); strings.TrimSpace(left) != "" {
				t.Fatalf("volumes left after purge: %q", left)
			}
		})
	}
}

// engineOut runs the engine CLI bin with env and returns its stdout.
func engineOut(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v: %s", bin, args, err, stderr.String())
	}
	return string(out)
}
