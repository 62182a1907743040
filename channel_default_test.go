package hsbx_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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
			state := itStateDir(t, tg)
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
			again := up("recreated")
			if again == cur.ID {
				t.Fatalf("the sandbox was not recreated: %s", again)
			}
			// Restarted right after a command, and the next command sent at
			// once (no Ensure between): the channel's agent may be gone
			// before the command is sent, so it never ran there; it runs
			// once (in-process, through a channel opened anew; the plain
			// path when that cannot be opened), not an error, with its whole
			// input (a try through the old channel may have taken some of
			// it), and the channel comes back.
			if tg.Kube.Namespace == "" {
				for i := range 5 {
					if tg.Fake { // the fakes have no restart
						if err := rt.Stop(ctx, again, 0); err != nil {
							t.Fatal(err)
						}
						if err := rt.Start(ctx, again); err != nil {
							t.Fatal(err)
						}
					} else { // one call, as a user or the engine would
						cmd := exec.Command(tg.Bin, "restart", "-t", "0", again)
						cmd.Env = env // the client environment hsbx gave the engine
						if b, err := cmd.CombinedOutput(); err != nil {
							t.Fatalf("restart: %v: %s", err, b)
						}
					}
					// How many times it ran, counted in the sandbox (the fakes'
					// plain path has no redirections: there, only that it ran).
					argv, want := []string{"echo", "1"}, "1"
					var stdin io.Reader
					if !tg.Fake {
						file := fmt.Sprintf("/tmp/hsbx-runs-%s-%d", filepath.Base(dir), i)
						argv = []string{"sh", "-c", "echo run >>" + file + "; wc -l <" + file + "; wc -c"}
						want, stdin = "1\n300000", strings.NewReader(strings.Repeat("x", 300_000))
					}
					var out strings.Builder
					code, err := sb.Exec(ctx, sandbox.Command{Argv: argv, Stdout: &out, Stdin: stdin})
					if err != nil || code != 0 || strings.Join(strings.Fields(out.String()), "\n") != want {
						t.Fatalf("restart %d: the first command after it: %d %q %v (want it run once, with all its input: %q)", i, code, out.String(), err, want)
					}
					up(fmt.Sprintf("after restart %d", i))
				}
			}
		})
	}
}

// itStateDir is a target's state dir for a test of the package: for the
// rootless engine one that is root's own (hsbx refuses another user's) yet
// reachable by the engine's user; else the target's ("" for the fakes).
func itStateDir(t *testing.T, tg enginetest.Target) string {
	t.Helper()
	if !tg.Rootless {
		return tg.StateDir
	}
	state, err := os.MkdirTemp("", "hsbx-it-rootless-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	_ = os.Chmod(state, 0o755)
	return state
}
