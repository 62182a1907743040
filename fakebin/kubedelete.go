package fakebin

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The fake kubectl's delete: of Pods, by name or selector, with
// preconditions and grace as the API server takes them.

// kdelete handles `delete --raw /api/v1/namespaces/NS/pods/NAME -f -`
// (DeleteOptions with preconditions on stdin) and `delete pods -l SEL
// --field-selector status.phase!=...` (finished Pods only).
func (f *fake) kdelete(ns string, args []string) int {
	if len(args) >= 2 && args[0] == "--raw" {
		parts := strings.Split(args[1], "/")
		if len(parts) == 7 && parts[3] == "namespaces" && parts[5] == "persistentvolumeclaims" {
			return f.kdeleteClaimRaw(parts[4], parts[6])
		}
		if len(parts) != 7 || parts[3] != "namespaces" || parts[5] != "pods" {
			fmt.Fprintf(f.stderr, "Error from server (NotFound): the server could not find the requested resource\n")
			return 1
		}
		ns, name := parts[4], parts[6]
		opts := f.deleteOptions()
		var msg string
		var gone *Container
		err := f.st.update(func(st *State) error {
			for _, c := range st.Containers {
				if c.Namespace != ns || c.Name != name {
					continue
				}
				switch {
				case opts.Preconditions.UID != "" && opts.Preconditions.UID != podUID(c.ID):
					msg = fmt.Sprintf("Error from server (Conflict): Operation cannot be fulfilled on Pod %q: the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", name, opts.Preconditions.UID, podUID(c.ID))
				case opts.Preconditions.ResourceVersion != "" && opts.Preconditions.ResourceVersion != strconv.Itoa(c.RV):
					msg = fmt.Sprintf("Error from server (Conflict): Operation cannot be fulfilled on Pod %q: the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%d). The object might have been modified", name, opts.Preconditions.ResourceVersion, c.RV)
				default:
					cp := *c
					gone = &cp
					killExecs(c, "")
					st.remove(c)
				}
				return nil
			}
			msg = fmt.Sprintf("Error from server (NotFound): pods %q not found", name)
			return nil
		})
		if err != nil {
			return f.fail(err)
		}
		if msg != "" {
			fmt.Fprintln(f.stderr, msg)
			return 1
		}
		b, _ := json.Marshal(f.pod(gone))
		fmt.Fprintln(f.stdout, string(b))
		return 0
	}
	if len(args) > 1 && (args[0] == "pod" || args[0] == "pods") && !strings.HasPrefix(args[1], "-") {
		return f.kdeleteNames(ns, args[1:])
	}
	sel, finishedOnly := "", false
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-l" && i+1 < len(args):
			i++
			sel = args[i]
		case args[i] == "--field-selector" && i+1 < len(args):
			i++
			finishedOnly = strings.Contains(args[i], "status.phase!=Running")
		}
	}
	var deleted []string
	err := f.st.update(func(st *State) error {
		for _, c := range slices.Clone(st.Containers) {
			if c.Namespace == ns && selects(sel, c.Labels) && (!finishedOnly || c.State == "exited") {
				deleted = append(deleted, c.Name)
				killExecs(c, "")
				st.remove(c)
			}
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	if len(deleted) == 0 {
		fmt.Fprintf(f.stdout, "No resources found\n")
	}
	for _, n := range deleted {
		fmt.Fprintf(f.stdout, "pod %q force deleted\n", n)
	}
	return 0
}

// deleteOptions reads the DeleteOptions `delete --raw -f -` sends.
func (f *fake) deleteOptions() (opts struct {
	Preconditions struct {
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"preconditions"`
}) {
	if b, err := io.ReadAll(f.stdin); err == nil {
		_ = json.Unmarshal(b, &opts)
	}
	return opts
}

// kdeleteNames is `delete pod NAME... [--wait=false]`: no preconditions.
func (f *fake) kdeleteNames(ns string, args []string) int {
	code := 0
	for _, n := range args {
		if strings.HasPrefix(n, "-") {
			continue
		}
		found := false
		if err := f.st.update(func(st *State) error {
			for _, c := range st.Containers {
				if c.Namespace == ns && c.Name == n {
					found = true
					killExecs(c, "")
					st.remove(c)
					return nil
				}
			}
			return nil
		}); err != nil {
			return f.fail(err)
		}
		if found {
			fmt.Fprintf(f.stdout, "pod %q deleted from %s namespace\n", n, ns)
		} else {
			fmt.Fprintf(f.stderr, "Error from server (NotFound): pods %q not found\n", n)
			code = 1
		}
	}
	return code
}
