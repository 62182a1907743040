package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// A sandbox's persistent files live in a PersistentVolumeClaim of the
// configured storage class, one per sandbox key, named and labelled for the
// key: the Pod mounts its directories (subPaths) at /workspace and /root.
// Deleting the Pod (stop, the reaper) keeps the claim; `down` removes it.

// claimManifest is the PersistentVolumeClaim hsbx creates.
type claimManifest struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		AccessModes      []string  `json:"accessModes"`
		StorageClassName string    `json:"storageClassName"`
		Resources        resources `json:"resources"`
	} `json:"spec"`
}

// ClaimManifest renders a claim as the PersistentVolumeClaim hsbx
// creates, named PodName(c.Name): ReadWriteOnce (the node of the key's one Pod), its storage
// class, Size as the storage request, labels as for a Pod.
func ClaimManifest(c runtime.Claim) ([]byte, error) {
	name := PodName(c.Name)
	if name == "" {
		return nil, fmt.Errorf("claim %q gives no valid Kubernetes name", c.Name)
	}
	if c.Class == "" {
		return nil, fmt.Errorf("claim %s: no storage class", c.Name)
	}
	size, err := Quantity(c.Size)
	if err != nil || size == "" {
		return nil, fmt.Errorf("claim %s: storage size %q: want a size like 2g", c.Name, c.Size)
	}
	m := claimManifest{APIVersion: "v1", Kind: "PersistentVolumeClaim"}
	if m.Metadata, err = metadata(name, c.Labels); err != nil {
		return nil, err
	}
	m.Spec.AccessModes = []string{"ReadWriteOnce"}
	m.Spec.StorageClassName = c.Class
	m.Spec.Resources.Requests = map[string]string{"storage": size}
	return json.Marshal(m)
}

// claim is the part of a PersistentVolumeClaim hsbx reads.
type claim struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		StorageClassName string `json:"storageClassName"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// owns reports whether the claim carries every one of want's labels with
// exactly its value (annotations keep values a label cannot hold).
func (c claim) owns(want map[string]string) bool {
	for k, v := range want {
		got, ok := c.Metadata.Labels[k]
		if a, ok := c.Metadata.Annotations[k]; ok {
			got = a
		}
		if !ok || got != v {
			return false
		}
	}
	return true
}

// getClaim reads one claim; ok is false when there is none.
func (r *Runtime) getClaim(ctx context.Context, name string) (claim, bool, error) {
	res, err := r.call(ctx, []string{"get", "persistentvolumeclaims", "-o", "json", "--ignore-not-found", name}, nil, r.timeout)
	if err != nil {
		return claim{}, false, err
	}
	out := bytes.TrimSpace(res.Stdout)
	if len(out) == 0 {
		return claim{}, false, nil
	}
	var c claim
	if err := json.Unmarshal(out, &c); err != nil || c.Kind != "PersistentVolumeClaim" || c.Metadata.UID == "" {
		return claim{}, false, fmt.Errorf("%w: kubectl get persistentvolumeclaims printed %.200q", runtime.ErrBadOutput, out)
	}
	return c, true, nil
}

// ensureClaims makes the claims that do not exist yet and checks those
// that do: one get for a claim that exists (every cold start after the
// first), and for a new one a look at its storage class and the create.
// It returns the uids of the claims it made, so a failed start can remove
// exactly those.
func (r *Runtime) ensureClaims(ctx context.Context, cs []runtime.Claim) (made []claim, err error) {
	for _, want := range cs {
		m, err := ClaimManifest(want)
		if err != nil {
			return made, err
		}
		for attempt := 0; ; attempt++ {
			c, ok, err := r.getClaim(ctx, PodName(want.Name))
			if err != nil {
				return made, err
			}
			if ok {
				if err := claimUsable(c, want); err != nil {
					return made, err
				}
				break
			}
			if attempt == 0 {
				if err := r.checkClass(ctx, want.Class); err != nil {
					return made, err
				}
			}
			res, err := r.call(ctx, []string{"create", "-f", "-", "-o", "json"}, bytes.NewReader(m), r.timeout)
			if errors.Is(err, runtime.ErrNameInUse) && attempt == 0 {
				continue // another process made it first: check it
			}
			if err != nil {
				return made, fmt.Errorf("creating persistent volume claim %s: %w", want.Name, err)
			}
			var c2 claim
			if err := json.Unmarshal(bytes.TrimSpace(res.Stdout), &c2); err != nil || c2.Metadata.UID == "" {
				return made, fmt.Errorf("%w: kubectl create printed %.200q where a PersistentVolumeClaim was expected", runtime.ErrBadOutput, res.Stdout)
			}
			made = append(made, c2)
			break
		}
	}
	return made, nil
}

// claimUsable checks an existing claim before a Pod mounts it.
func claimUsable(c claim, want runtime.Claim) error {
	switch {
	case !c.owns(want.Labels):
		return fmt.Errorf("%w: persistent volume claim %s exists without this sandbox's labels, so hsbx will not mount it; remove it, or use another task or namespace",
			runtime.ErrForeignClaim, c.Metadata.Name)
	case c.Metadata.DeletionTimestamp != "":
		return fmt.Errorf("%w: persistent volume claim %s is being deleted (a `down` of this sandbox?); try again when it is gone", runtime.ErrEngine, c.Metadata.Name)
	}
	return nil
}

// checkClass makes sure the storage class exists before a claim of it is
// made: a claim of a missing class waits forever, and its Pod with it. A
// user who may not read storage classes (they are cluster-wide) gets no
// check.
func (r *Runtime) checkClass(ctx context.Context, class string) error {
	res, err := r.call(ctx, []string{"get", "storageclasses", "-o", "name", "--ignore-not-found", class}, nil, r.timeout)
	var ee *runtime.EngineError
	switch {
	case errors.As(err, &ee) && strings.Contains(strings.ToLower(ee.Stderr), "forbidden"):
		return nil
	case err != nil:
		return err
	case len(bytes.TrimSpace(res.Stdout)) == 0:
		return fmt.Errorf("%w: storage class %q does not exist in this cluster; set kubernetes.storage_class to one `kubectl get storageclasses` lists, or \"\" (in the Pod)",
			runtime.ErrEngine, class)
	}
	return nil
}

// RemoveClaims implements runtime.ClaimRemover: for each claim one get, a
// delete through the API with its uid as a precondition (so a claim made
// again meanwhile is not the one deleted), then gets until it is gone.
// Kubernetes keeps a claim while a Pod uses it: remove the Pods first.
func (r *Runtime) RemoveClaims(ctx context.Context, cs ...runtime.Claim) ([]string, error) {
	var removed []string
	var errs []error
	for _, want := range cs {
		c, ok, err := r.getClaim(ctx, PodName(want.Name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if !c.owns(want.Labels) {
			errs = append(errs, fmt.Errorf("%w: persistent volume claim %s holds this sandbox's claim name without its labels (hsbx.key); it was left alone", runtime.ErrForeignClaim, c.Metadata.Name))
			continue
		}
		if err := r.deleteClaim(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.waitClaimGone(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.Metadata.Name)
	}
	return removed, errors.Join(errs...)
}

// deleteClaim deletes one claim with its uid as the precondition.
func (r *Runtime) deleteClaim(ctx context.Context, c claim) error {
	err := r.deleteRaw(ctx, "persistentvolumeclaims", c.Metadata.Namespace, c.Metadata.Name,
		map[string]any{"preconditions": map[string]string{"uid": c.Metadata.UID}})
	if err != nil {
		return fmt.Errorf("removing persistent volume claim %s: %w", c.Metadata.Name, err)
	}
	return nil
}

// waitClaimGone polls until the claim (by uid) is gone, at most the call
// timeout: the cluster holds it until no Pod uses it.
func (r *Runtime) waitClaimGone(ctx context.Context, c claim) error {
	deadline := time.Now().Add(r.timeout)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		now, ok, err := r.getClaim(ctx, c.Metadata.Name)
		if err != nil {
			return fmt.Errorf("waiting for persistent volume claim %s to be gone: %w", c.Metadata.Name, err)
		}
		if !ok || now.Metadata.UID != c.Metadata.UID {
			return nil
		}
		if time.Now().Add(delay).After(deadline) {
			return &runtime.EngineError{Kind: runtime.ErrTimeout, ExitCode: -1, Argv: r.argv("get", "persistentvolumeclaims", c.Metadata.Name),
				Stderr: fmt.Sprintf("persistent volume claim %s is still there %s after its delete (is a Pod still using it?)", c.Metadata.Name, r.timeout)}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(delay):
		}
	}
}

// removeMade removes claims this process made for a Pod that did not
// start, by uid.
func (r *Runtime) removeMade(ctx context.Context, made []claim) error {
	var errs []error
	for _, c := range made {
		errs = append(errs, r.deleteClaim(ctx, c))
	}
	return errors.Join(errs...)
}
