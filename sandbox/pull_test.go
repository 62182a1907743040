package sandbox_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// An image the engine does not have is pulled before the create, with the
// caller told; when it cannot be pulled (no registry here, as on an
// air-gapped host) the error says so and no container is left behind.
func TestMissingImageIsPulledFirst(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var told []string
		m := sandbox.New(sandbox.Config{
			Runtime: e.openWith(nil), StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(), Environ: e.tg.Env,
			Warn: func(string) {}, OnPull: func(image string) io.Writer { told = append(told, image); return nil },
		})
		spec := e.spec()
		spec.Image = "hsbx-no-such-image:1"
		sb := m.Sandbox(e.key("pull"), spec)
		e.log.reset()
		_, err := sb.Ensure(ctx)
		if e.kube() {
			// The kubelet pulls, not hsbx: the cluster's reason, and no Pod left.
			if !errors.Is(err, runtime.ErrImageNotFound) || len(told) != 0 {
				t.Fatalf("ensure with a missing image on Kubernetes: %v (OnPull told %v)", err, told)
			}
			if cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: e.key("pull").Filters()}); len(cs) != 0 {
				t.Errorf("a failed create left %+v", cs)
			}
			return
		}
		// Not in any registry, or (here: no network) no registry reachable.
		named := errors.Is(err, runtime.ErrImageNotFound) || errors.Is(err, runtime.ErrRegistryUnreachable)
		if !named || !strings.Contains(err.Error(), "is not present locally and pulling it failed") {
			t.Fatalf("ensure with a missing image: %v", err)
		}
		if !slices.Equal(told, []string{"hsbx-no-such-image:1"}) {
			t.Errorf("OnPull was told %v", told)
		}
		calls := e.log.all()
		if !slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, " pull -- hsbx-no-such-image:1") }) ||
			slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, " run ") }) {
			t.Errorf("want a pull and no run:\n%s", strings.Join(calls, "\n"))
		}
		cs, err := e.rt.List(ctx, runtime.ListOptions{Labels: sb.Key().Filters()})
		if err != nil || len(cs) != 0 {
			t.Errorf("left behind: %v %v", cs, err)
		}
	})
}
