package enginecli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hsbx/hsbx/runtime"
)

// OpVolume is a `volume` subcommand (inspect, create, ls, rm).
const OpVolume Op = "volume"

var _ runtime.Volumes = (*Engine)(nil)

// EnsureVolumes implements runtime.Volumes: one `volume inspect` of them
// all; a `volume create --label ...` for each missing one (at once), and
// then one more inspect, since docker's create of a name that exists
// succeeds and says nothing of the labels it has.
func (e *Engine) EnsureVolumes(ctx context.Context, vs ...runtime.Volume) error {
	if len(vs) == 0 {
		return nil
	}
	have, err := e.inspectVolumes(ctx, names(vs))
	if err != nil {
		return err
	}
	var missing []runtime.Volume
	for _, v := range vs {
		h, ok := have[v.Name]
		if !ok {
			missing = append(missing, v)
			continue
		}
		if err := carries(h, v); err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	for i, v := range missing {
		wg.Go(func() {
			args := []string{"volume", "create"}
			for _, k := range slices.Sorted(maps.Keys(v.Labels)) {
				args = append(args, "--label", k+"="+v.Labels[k])
			}
			_, err := e.call(ctx, OpVolume, append(args, v.Name), e.timeout)
			if errors.Is(err, runtime.ErrVolumeExists) {
				err = nil // another process made it meanwhile: judged below
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("making the sandbox's volumes: %w", err)
	}
	have, err = e.inspectVolumes(ctx, names(missing))
	if err != nil {
		return err
	}
	for _, v := range missing {
		h, ok := have[v.Name]
		if !ok {
			return fmt.Errorf("%w: %s volume create %s succeeded, but the engine does not show it", runtime.ErrBadOutput, e.d.Name(), v.Name)
		}
		if err := carries(h, v); err != nil {
			return err
		}
	}
	return nil
}

// carries checks that volume h has every one of want's labels.
func carries(h, want runtime.Volume) error {
	for k, v := range want.Labels {
		if got, ok := h.Labels[k]; !ok || got != v {
			return fmt.Errorf("%w: volume %s exists without label %s=%s; it was left alone", runtime.ErrForeignVolume, h.Name, k, v)
		}
	}
	return nil
}

func names(vs []runtime.Volume) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// inspectVolumes is the named volumes that exist, by name: both engines
// print those they found and fail naming one that is missing.
func (e *Engine) inspectVolumes(ctx context.Context, ns []string) (map[string]runtime.Volume, error) {
	res, err := e.call(ctx, OpVolume, append([]string{"volume", "inspect"}, ns...), e.timeout)
	if err != nil && !errors.Is(err, runtime.ErrNoSuchVolume) {
		return nil, err
	}
	vs, perr := ParseVolumes(res.Stdout)
	if perr != nil {
		return nil, fmt.Errorf("%w: %s volume inspect: %v", runtime.ErrBadOutput, e.d.Name(), perr)
	}
	out := map[string]runtime.Volume{}
	for _, v := range vs {
		if slices.Contains(ns, v.Name) {
			out[v.Name] = v
		}
	}
	if err == nil && len(out) < len(ns) {
		return nil, fmt.Errorf("%w: %s volume inspect of %d volumes succeeded and showed %d", runtime.ErrBadOutput, e.d.Name(), len(ns), len(out))
	}
	return out, nil
}

// ParseVolumes parses `volume inspect`'s JSON array (docker and podman
// alike: Name, and Labels as an object, null when none). Empty output is
// no volume.
func ParseVolumes(out []byte) ([]runtime.Volume, error) {
	if strings.TrimSpace(string(out)) == "" {
		return nil, nil
	}
	var raw []struct {
		Name   string
		Labels map[string]string
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	vs := make([]runtime.Volume, 0, len(raw))
	for _, r := range raw {
		if r.Name == "" {
			return nil, errors.New("a volume without a name")
		}
		vs = append(vs, runtime.Volume{Name: r.Name, Labels: r.Labels})
	}
	return vs, nil
}

// ListVolumes implements runtime.Volumes: the names `volume ls -q` gives
// for the label filters, then their labels from one inspect (ls's own
// formats differ between the engines; inspect's do not).
func (e *Engine) ListVolumes(ctx context.Context, labels map[string]string) ([]runtime.Volume, error) {
	args := []string{"volume", "ls", "-q"}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		f := "label=" + k
		if labels[k] != "" {
			f += "=" + labels[k]
		}
		args = append(args, "--filter", f)
	}
	res, err := e.call(ctx, OpVolume, args, e.timeout)
	if err != nil {
		return nil, err
	}
	var ns []string
	for _, l := range strings.Split(string(res.Stdout), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ns = append(ns, l)
		}
	}
	if len(ns) == 0 {
		return nil, nil
	}
	have, err := e.inspectVolumes(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []runtime.Volume
	for _, n := range ns {
		if v, ok := have[n]; ok && hasLabels(v, labels) {
			out = append(out, v)
		}
	}
	return out, nil
}

// RemoveVolumes implements runtime.Volumes: one `volume rm`, then an
// inspect that must find none of them.
func (e *Engine) RemoveVolumes(ctx context.Context, ns ...string) error {
	if len(ns) == 0 {
		return nil
	}
	_, rmErr := e.call(ctx, OpVolume, append([]string{"volume", "rm"}, ns...), e.timeout)
	if rmErr != nil && !errors.Is(rmErr, runtime.ErrNoSuchVolume) {
		if errors.Is(rmErr, runtime.ErrVolumeInUse) {
			return fmt.Errorf("removing volumes %s: %w", strings.Join(ns, ", "), rmErr)
		}
		// Some may be gone: the inspect below says which stay.
	}
	left, err := e.inspectVolumes(ctx, ns)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		if rmErr == nil {
			rmErr = fmt.Errorf("%w: %s volume rm succeeded", runtime.ErrEngine, e.d.Name())
		}
		return fmt.Errorf("volumes %s are still there: %w", strings.Join(slices.Sorted(maps.Keys(left)), ", "), rmErr)
	}
	return nil
}

// hasLabels reports whether v carries labels (an empty value: any).
func hasLabels(v runtime.Volume, labels map[string]string) bool {
	for k, want := range labels {
		if got, ok := v.Labels[k]; !ok || want != "" && got != want {
			return false
		}
	}
	return true
}
