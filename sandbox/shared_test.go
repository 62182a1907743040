package sandbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// sharedBoxes are the sandboxes tests share, by engine (target name) and
// route: each made once, by the first test that asks.
var sharedBoxes struct {
	sync.Mutex
	made map[string]*sharedBox
}

type sharedBox struct {
	once sync.Once
	err  error
}

// shared returns a handle on the target's shared sandbox for a route (the
// exec channel, or the plain path): for a test whose subject is not the
// lifecycle — exec semantics, the environment, output, copies, files,
// users, background processes. One sandbox per engine and route is made
// by the first test that asks, used by the tests side by side, and
// removed when the package's tests end; the handle, its Manager and its
// channel are the test's own (closed when it ends), and its engine calls
// go to the test's argv log. A test on it names its files, processes and
// sessions with e.base, and never stops, removes or changes the sandbox:
// a test of create, stop, down or drift makes its own.
func (e *env) shared(t *testing.T, channel bool) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	lt := enginetest.Lasting(t, e.tg)
	route := map[bool]string{true: "channel", false: "plain"}[channel]
	key := sandbox.Key{Profile: "hsbx-test", Task: fmt.Sprintf("shared-%d-%s", os.Getpid(), route)}
	handle := func(r *proc.Runner) *sandbox.Sandbox {
		c := sandbox.Config{
			Runtime: lt.OpenWith(t, r), StateDir: lt.StateDir, CacheDir: t.TempDir(),
			Environ: lt.Env, UID: 0, GID: 0, StopGrace: 5 * time.Second, Warn: func(string) {}, Channel: channel,
		}
		if channel {
			c.Agent = enginetest.AgentBinary(t)
		}
		sb := sandbox.New(c).Sandbox(key, e.spec())
		t.Cleanup(func() { _ = sb.Close(ctx) })
		return sb
	}

	sharedBoxes.Lock()
	if sharedBoxes.made == nil {
		sharedBoxes.made = map[string]*sharedBox{}
	}
	box := sharedBoxes.made[lt.Name+"/"+route]
	if box == nil {
		box = &sharedBox{}
		sharedBoxes.made[lt.Name+"/"+route] = box
	}
	sharedBoxes.Unlock()
	box.once.Do(func() {
		rt := lt.Open(t)
		enginetest.AtExit(func() {
			cs, _ := rt.List(context.Background(), runtime.ListOptions{Labels: []string{"hsbx.task=" + key.Task}})
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.ID)
			}
			_ = rt.Remove(context.Background(), true, ids...)
		})
		_, box.err = handle(nil).Ensure(ctx)
	})
	if box.err != nil {
		t.Fatalf("the shared sandbox of %s (%s): %v", lt.Name, route, box.err)
	}
	return handle(&proc.Runner{Log: slog.New(e.log)})
}
