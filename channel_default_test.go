package hsbx_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/sandbox"
)

// A program embedding the package gets the exec channel with no setting
// and no file of its own (the agent hsbx carries for the engine's
// platform), on every engine; and it gets it back when the sandbox is
// restarted or recreated behind its back, as the CLI does.
func TestGoPackageChannelByDefault(t *testing.T) {
	targets := enginetest.Targets(t)
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		targets = append(targets, kt)
	}
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			state := tg.StateDir
			if tg.Rootless { // root's own, reachable by the engine's user
				var err error
				if state, err = os.MkdirTemp("", "hsbx-it-rootless-state-"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(state) })
				_ = os.Chmod(state, 0o755)
			}
			xdg := dir
			if tg.Rootless {
				xdg = "" // the rootless engine's wrapper reads them too
			}
			env := append(append([]string{}, tg.Env...), "HSBX_RUNTIME="+tg.Bin, "HOME="+dir, "XDG_CONFIG_HOME="+xdg,
				"XDG_STATE_HOME="+state, "XDG_CACHE_HOME="+xdg, "TERMINAL_DOCKER_IMAGE="+tg.Image,
				"HSBX_PROFILE=hsbx-chandefault", "TERMINAL_DOCKER_ORPHAN_REAPER=false")
			if tg.Kube.Namespace != "" {
				env = append(env, "HSBX_KUBE_NAMESPACE="+tg.Kube.Namespace) // and the network: no air gap on a cluster yet
			} else {
				env = append(env, "TERMINAL_DOCKER_NETWORK=false")
			}
			c, err := hsbx.Open(ctx, hsbx.Options{Environ: env, NoAutoSweep: true})
			if err != nil {
				t.Fatal(err)
			}
			if !c.Config().ExecChannel.Value || c.Config().ExecChannelAgent.Value != "" {
				t.Fatalf("defaults: exec_channel %v, agent %q", c.Config().ExecChannel.Value, c.Config().ExecChannelAgent.Value)
			}
			sb := c.Sandbox("chan-" + filepath.Base(dir))
			t.Cleanup(func() { _, _ = sb.Down(context.Background()) })
			up := func(what string) string {
				t.Helper()
				res, err := sb.Ensure(ctx)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				var out strings.Builder
				if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || code != 0 || out.String() != "hi\n" {
					t.Fatalf("%s: exec: %d %q %v", what, code, out.String(), err)
				}
				if st := sb.ChannelStatus(res.ID); st != "up" {
					t.Fatalf("%s: channel %q for %s, want up", what, st, res.ID)
				}
				return res.ID
			}
			id := up("first")
			// Names the engine client reads travel to the agent, not to it.
			var out strings.Builder
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `echo "$PATH|$HOME"`}, Stdout: &out,
				Env: map[string]string{"PATH": "/venv/bin:/bin:/usr/bin", "HOME": "/home/agent"}})
			if err != nil || code != 0 || out.String() != "/venv/bin:/bin:/usr/bin|/home/agent\n" {
				t.Fatalf("exec with PATH and HOME: %d %q %v", code, out.String(), err)
			}
			rt := c.Runtime()
			// Restarted behind the program's back: same id, a new agent.
			if err := rt.Stop(ctx, id, time.Second); err != nil {
				t.Fatal(err)
			}
			if tg.Kube.Namespace == "" { // a stopped Pod is a deleted one
				if err := rt.Start(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			up("restarted")
			// Recreated behind its back: a new id.
			cur, _ := sb.Ensure(ctx)
			if err := rt.Remove(ctx, true, cur.ID); err != nil {
				t.Fatal(err)
			}
			if again := up("recreated"); again == cur.ID {
				t.Fatalf("the sandbox was not recreated: %s", again)
			}
		})
	}
}
