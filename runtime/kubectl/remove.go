package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// Removing Pods: deletes with preconditions (the uid verified), waits
// until they are gone.

// Remove implements runtime.Runtime in a constant number of calls for
// finished Pods: one get, one delete of them all by their nonce labels
// (each names one creation, so a Pod made again under the same name is
// never selected; a finished Pod never runs again; and the cluster only
// deletes those it finds finished), and a get that sees them gone. Any
// other Pod is deleted through the API with its uid as a precondition,
// and without force also its resourceVersion, so a Pod that changed since
// it was seen not running is left alone. It returns when the Pods are
// gone (or after the call timeout).
func (r *Runtime) Remove(ctx context.Context, force bool, ids ...string) error {
	return r.remove(ctx, force, time.Second, ids)
}

func (r *Runtime) remove(ctx context.Context, force bool, grace time.Duration, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	var names []string
	for _, id := range ids {
		if _, n := splitID(id); n != "" {
			names = append(names, n)
		}
	}
	ps, err := r.get(ctx, "", names...)
	if err != nil {
		return err
	}
	var errs []error
	var nonces []string
	var deleted, finished []pod
	for _, id := range ids {
		uid, name := splitID(id)
		i := slices.IndexFunc(ps, func(p pod) bool { return p.Metadata.Name == name && (uid == "" || p.Metadata.UID == uid) })
		if i < 0 {
			continue // gone already, which is what was asked
		}
		p := ps[i]
		if !force && p.state().Alive() {
			errs = append(errs, fmt.Errorf("pod %s is %s: not removed without force", name, p.state()))
			continue
		}
		if n := p.Metadata.Labels[NonceLabel]; n != "" && LabelValue(n) == n && p.finished() && !slices.Contains(nonces, n) {
			nonces = append(nonces, n)
			finished = append(finished, p)
			continue
		}
		if err := r.deletePod(ctx, p, force, grace); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, p)
	}
	if len(finished) == 1 {
		if err := r.deletePod(ctx, finished[0], force, grace); err != nil {
			errs = append(errs, err)
		} else {
			deleted = append(deleted, finished[0])
		}
	} else if len(finished) > 1 {
		// One call for all: finished Pods never run again, and the nonce
		// names one incarnation, so a Pod made again under the same name
		// (with a new nonce) is not selected. With nothing left to stop,
		// they go at once (grace 0), not after the kubelet confirms each.
		sel := NonceLabel + " in (" + strings.Join(nonces, ",") + ")"
		args := []string{"delete", "pods", "-l", sel, "--field-selector", "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown",
			"--grace-period=0", "--force", "--wait=false"}
		if _, err := r.call(ctx, args, nil, r.timeout); err != nil {
			errs = append(errs, err)
		} else {
			deleted = append(deleted, finished...)
		}
	}
	if len(deleted) > 0 {
		if err := r.waitGone(ctx, deleted, grace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NonceLabel is the label hsbx gives each Pod it creates, with a value
// unique to that creation (sandbox.LabelNonce).
const NonceLabel = "hsbx.nonce"

// finished reports whether the Pod has ended for good (restartPolicy
// Never: Succeeded and Failed are final).
func (p pod) finished() bool { return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" }

// deletePod deletes one Pod with preconditions: its uid, and without force
// its resourceVersion.
func (r *Runtime) deletePod(ctx context.Context, p pod, force bool, grace time.Duration) error {
	pre := map[string]string{"uid": p.Metadata.UID}
	if !force {
		pre["resourceVersion"] = p.Metadata.ResourceVersion
	}
	secs := max(int64((grace+time.Second-1)/time.Second), 1)
	err := r.deleteRaw(ctx, "pods", p.Metadata.Namespace, p.Metadata.Name, map[string]any{"preconditions": pre, "gracePeriodSeconds": secs})
	var ee *runtime.EngineError
	if errors.As(err, &ee) && strings.Contains(ee.Stderr, "the ResourceVersion in the precondition") {
		return fmt.Errorf("pod %s changed since it was seen stopped; not removed: %w", p.Metadata.Name, err)
	}
	return err
}

// deleteRaw deletes one object of the namespace through the API (`kubectl
// delete --raw PATH -f -`, the DeleteOptions opts on stdin) so its
// preconditions hold. An object already gone, or one whose uid is not the
// precondition's (ours is gone; a new one of that name is not ours to
// delete), is success.
func (r *Runtime) deleteRaw(ctx context.Context, resource, ns, name string, opts map[string]any) error {
	opts["kind"], opts["apiVersion"] = "DeleteOptions", "v1"
	body, _ := json.Marshal(opts)
	if ns == "" {
		ns = "default"
	}
	path := "/api/v1/namespaces/" + ns + "/" + resource + "/" + name
	_, err := r.call(ctx, []string{"delete", "--raw", path, "-f", "-"}, bytes.NewReader(body), r.timeout)
	var ee *runtime.EngineError
	switch {
	case err == nil, errors.Is(err, runtime.ErrNotFound):
		return nil
	case errors.As(err, &ee) && strings.Contains(ee.Stderr, "the UID in the precondition"):
		return nil
	}
	return err
}

// waitGone waits until the Pods (by uid) are gone, asking the cluster
// with one get per look, at most until the call timeout plus grace: a Pod
// made again under the same name meanwhile does not hold it up.
func (r *Runtime) waitGone(ctx context.Context, pods []pod, grace time.Duration) error {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Metadata.Name
	}
	deadline := time.Now().Add(r.timeout + grace)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		now, err := r.get(ctx, "", names...)
		if err != nil {
			return fmt.Errorf("waiting for pods to be gone: %w", err)
		}
		var left []string
		for _, p := range pods {
			if slices.ContainsFunc(now, func(q pod) bool { return q.Metadata.UID == p.Metadata.UID }) {
				left = append(left, p.Metadata.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().Add(delay).After(deadline) {
			return &runtime.EngineError{Kind: runtime.ErrTimeout, Argv: r.argv("get", "pods"), ExitCode: -1,
				Stderr: fmt.Sprintf("pods %s still there %s after they were deleted", strings.Join(left, ", "), r.timeout+grace)}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pods to be gone: %w", context.Cause(ctx))
		case <-time.After(delay):
		}
	}
}
