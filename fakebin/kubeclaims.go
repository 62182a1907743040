package fakebin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The fake kubectl's PersistentVolumeClaims and storage classes, with
// kubectl v1.34's shapes and words (testdata/kube claim_*, class_*). The
// storage classes are FAKEKUBE_STORAGE_CLASSES (comma-separated; default
// hsbx-local, the class scripts/kube.sh makes). A claim is Bound at once.

func (f *fake) storageClasses() []string {
	v, ok := f.env["FAKEKUBE_STORAGE_CLASSES"]
	if !ok {
		v = "hsbx-local"
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
}

// kgetClasses is `get storageclasses -o name [--ignore-not-found] NAME...`.
func (f *fake) kgetClasses(names []string, ignore bool) int {
	code := 0
	for _, n := range names {
		switch {
		case slices.Contains(f.storageClasses(), n):
			fmt.Fprintf(f.stdout, "storageclass.storage.k8s.io/%s\n", n)
		case !ignore:
			fmt.Fprintf(f.stderr, "Error from server (NotFound): storageclasses.storage.k8s.io %q not found\n", n)
			code = 1
		}
	}
	return code
}

func (f *fake) claimJSON(c *Claim) map[string]any {
	meta := map[string]any{"name": c.Name, "namespace": c.Namespace, "uid": c.UID,
		"creationTimestamp": c.Created.Format(time.RFC3339), "finalizers": []string{"kubernetes.io/pvc-protection"}}
	if len(c.Labels) > 0 {
		meta["labels"] = c.Labels
	}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	if !c.Deleting.IsZero() {
		meta["deletionTimestamp"] = c.Deleting.Format(time.RFC3339)
	}
	return map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
		"spec": map[string]any{"accessModes": []string{"ReadWriteOnce"}, "storageClassName": c.Class,
			"resources": map[string]any{"requests": map[string]string{"storage": c.Size}}},
		"status": map[string]any{"phase": "Bound"}}
}

// gcClaims drops claims deleted while in use once no Pod uses them.
func (st *State) gcClaims() {
	st.Claims = slices.DeleteFunc(st.Claims, func(c *Claim) bool {
		return !c.Deleting.IsZero() && !slices.ContainsFunc(st.Containers, func(p *Container) bool {
			return p.Namespace == c.Namespace && slices.Contains(p.Claims, c.Name)
		})
	})
}

// kgetClaims is `get persistentvolumeclaims -o json [--ignore-not-found] [NAME]`.
func (f *fake) kgetClaims(ns string, names []string, ignore bool) int {
	if fb := f.env["FAKEKUBE_FORBID"]; fb != "" && strings.Contains("get persistentvolumeclaims", fb) {
		fmt.Fprintf(f.stderr, "Error from server (Forbidden): persistentvolumeclaims is forbidden: User \"hsbx-user\" cannot list resource \"persistentvolumeclaims\" in API group \"\" in the namespace %q\n", ns)
		return 1
	}
	var items []map[string]any
	err := f.st.update(func(st *State) error {
		st.gcClaims()
		for _, c := range st.Claims {
			if c.Namespace == ns && (len(names) == 0 || slices.Contains(names, c.Name)) {
				items = append(items, f.claimJSON(c))
			}
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	switch {
	case len(names) == 1 && len(items) == 1:
		b, _ := json.MarshalIndent(items[0], "", "    ")
		fmt.Fprintln(f.stdout, string(b))
	case len(names) == 1 && ignore:
	case len(names) == 1:
		fmt.Fprintf(f.stderr, "Error from server (NotFound): persistentvolumeclaims %q not found\n", names[0])
		return 1
	default:
		if items == nil {
			items = []map[string]any{}
		}
		b, _ := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
		fmt.Fprintln(f.stdout, string(b))
	}
	return 0
}

// kcreateClaim makes a claim from its manifest.
func (f *fake) kcreateClaim(ns string, b []byte) int {
	var m struct {
		Metadata struct {
			Name        string            `json:"name"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			StorageClassName string `json:"storageClassName"`
			Resources        struct {
				Requests map[string]string `json:"requests"`
			} `json:"resources"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Metadata.Name == "" {
		fmt.Fprintf(f.stderr, "error: error validating \"STDIN\": %v\n", err)
		return 1
	}
	c := &Claim{Namespace: ns, Name: m.Metadata.Name, Labels: m.Metadata.Labels, Annotations: m.Metadata.Annotations,
		Class: m.Spec.StorageClassName, Size: m.Spec.Resources.Requests["storage"], Created: f.now}
	exists := false
	err := f.st.update(func(st *State) error {
		st.gcClaims()
		if slices.ContainsFunc(st.Claims, func(x *Claim) bool { return x.Namespace == ns && x.Name == c.Name }) {
			exists = true
			return nil
		}
		c.UID = podUID(st.newID(c.Name, f.now))
		st.Claims = append(st.Claims, c)
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	if exists {
		fmt.Fprintf(f.stderr, "Error from server (AlreadyExists): error when creating \"STDIN\": persistentvolumeclaims %q already exists\n", c.Name)
		return 1
	}
	out, _ := json.MarshalIndent(f.claimJSON(c), "", "    ")
	fmt.Fprintln(f.stdout, string(out))
	return 0
}

// kdeleteClaimRaw is `delete --raw .../persistentvolumeclaims/NAME -f -`
// with a uid precondition: a claim a Pod uses stays, Terminating, until the
// Pod is gone.
func (f *fake) kdeleteClaimRaw(ns, name string) int {
	opts := f.deleteOptions()
	var msg string
	var gone map[string]any
	err := f.st.update(func(st *State) error {
		st.gcClaims()
		i := slices.IndexFunc(st.Claims, func(c *Claim) bool { return c.Namespace == ns && c.Name == name })
		if i < 0 {
			msg = fmt.Sprintf("Error from server (NotFound): persistentvolumeclaims %q not found", name)
			return nil
		}
		c := st.Claims[i]
		if opts.Preconditions.UID != "" && opts.Preconditions.UID != c.UID {
			msg = fmt.Sprintf("Error from server (Conflict): Operation cannot be fulfilled on PersistentVolumeClaim %q: the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", name, opts.Preconditions.UID, c.UID)
			return nil
		}
		if c.Deleting.IsZero() {
			c.Deleting = f.now
		}
		gone = f.claimJSON(c)
		st.gcClaims()
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	if msg != "" {
		fmt.Fprintln(f.stderr, msg)
		return 1
	}
	b, _ := json.Marshal(gone)
	fmt.Fprintln(f.stdout, string(b))
	return 0
}
