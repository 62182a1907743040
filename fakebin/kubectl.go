package fakebin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kubectl is the fake kubectl program (for testscript.Main): Pods kept in
// the same state file as the fake engines' containers, with kubectl
// v1.34's output shapes, messages and exit statuses for the calls hsbx's
// kubectl runtime makes (checked against testdata/kube by
// fidelity_test.go). It runs a command the way the real Pod runs hsbx's
// exec wrapper: the environment from the first bytes of stdin, the
// working directory, then the command in the fake's shell.
func Kubectl() { os.Exit(Run("kubectl", os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)) }

// KubectlVersion is the version the fake claims (the captured one).
const KubectlVersion = "v1.34.4"

var errAlreadyExists = errors.New("already exists")

// kubectl runs one fake kubectl command.
func (f *fake) kubectl(args []string) int {
	ns := "default"
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "--namespace" || a == "-n") && i+1 < len(args):
			i++
			ns = args[i]
		case strings.HasPrefix(a, "--namespace="):
			ns = strings.TrimPrefix(a, "--namespace=")
		case a == "--context" && i+1 < len(args):
			i++
			if args[i] != "hsbx-kube" {
				fmt.Fprintf(f.stderr, "error: context %q does not exist\n", args[i])
				return 1
			}
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return f.kusage("you must specify the type of resource")
	}
	f.sub = rest[0]
	if code, done := f.faults(); done {
		return code
	}
	if rest[0] == "--version" {
		fmt.Fprintln(f.stderr, "error: unknown flag: --version\nSee 'kubectl --help' for usage.")
		return 1
	}
	if f.env["FAKEENGINE_DOWN"] == "1" && !slices.Contains(rest, "--client") {
		for range 5 {
			fmt.Fprintln(f.stderr, `E1122 15:50:51.378964   29957 memcache.go:265] "Unhandled Error" err="couldn't get current server API group list: Get \"https://127.0.0.1:6443/api?timeout=32s\": dial tcp 127.0.0.1:6443: connect: connection refused"`)
		}
		fmt.Fprintln(f.stderr, "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?")
		return 1
	}
	switch rest[0] {
	case "version":
		return f.kversion(slices.Contains(rest, "--client"))
	case "get":
		return f.kget(ns, rest[1:])
	case "create":
		return f.kcreate(ns)
	case "delete":
		return f.kdelete(ns, rest[1:])
	case "exec":
		return f.kexec(ns, rest[1:])
	case "config":
		fmt.Fprintf(f.stdout, `{"kind":"Config","apiVersion":"v1","current-context":"hsbx-kube","contexts":[{"name":"hsbx-kube","context":{"cluster":"hsbx-kube","user":"hsbx-admin","namespace":"default"}}]}`+"\n")
		return 0
	case "auth":
		if f.env["FAKEKUBE_FORBID"] != "" && strings.Contains(strings.Join(rest, " "), f.env["FAKEKUBE_FORBID"]) {
			fmt.Fprintln(f.stdout, "no")
			return 1
		}
		fmt.Fprintln(f.stdout, "yes")
		return 0
	}
	return f.kusage(fmt.Sprintf("unknown command %q for \"kubectl\"", rest[0]))
}

func (f *fake) kusage(msg string) int {
	fmt.Fprintf(f.stderr, "error: %s\nSee 'kubectl --help' for usage.\n", msg)
	return 1
}

func (f *fake) kversion(client bool) int {
	v := map[string]any{"clientVersion": map[string]string{"major": "1", "minor": "34", "gitVersion": KubectlVersion, "platform": "linux/amd64"}}
	if !client {
		v["serverVersion"] = map[string]string{"major": "1", "minor": "34", "gitVersion": KubectlVersion, "platform": "linux/amd64"}
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(f.stdout, string(b))
	return 0
}

// podUID is a container's id as a Pod uid (8-4-4-4-12 hex).
func podUID(id string) string {
	if len(id) < 32 {
		return id
	}
	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32]
}

// pod renders a container as kubectl prints a Pod.
func (f *fake) pod(c *Container) map[string]any {
	meta := map[string]any{"name": c.Name, "namespace": c.Namespace, "uid": podUID(c.ID),
		"resourceVersion": strconv.Itoa(c.RV), "creationTimestamp": c.Created.Format(time.RFC3339), "labels": c.Labels}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	phase, state := "Running", map[string]any{"running": map[string]string{"startedAt": c.StartedAt.Format(time.RFC3339)}}
	var conditions []map[string]any
	switch {
	case c.State == "created" && c.Unschedulable != "":
		phase, state = "Pending", nil
		conditions = []map[string]any{{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": c.Unschedulable}}
	case c.State == "created":
		phase = "Pending"
		state = map[string]any{"waiting": map[string]string{"reason": "ErrImageNeverPull", "message": fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)}}
	case c.State == "exited":
		phase = "Succeeded"
		if c.ExitCode != 0 {
			phase = "Failed"
		}
		state = map[string]any{"terminated": map[string]any{"exitCode": c.ExitCode, "startedAt": c.StartedAt.Format(time.RFC3339), "finishedAt": c.FinishedAt.Format(time.RFC3339)}}
	}
	status := map[string]any{"phase": phase}
	if phase == "Running" {
		status["hostIP"] = f.hostIP()
	}
	if state != nil {
		status["containerStatuses"] = []map[string]any{{"name": "sandbox", "state": state}}
	}
	if conditions != nil {
		status["conditions"] = conditions
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec":   podSpec(c),
		"status": status}
}

// selects reports whether a label selector ("k", "k=v", "k in (a,b)",
// comma-separated) matches.
func selects(sel string, labels map[string]string) bool {
	for sel = strings.TrimSpace(sel); sel != ""; sel = strings.TrimSpace(strings.TrimPrefix(sel, ",")) {
		var term string
		if i := strings.Index(sel, " in ("); i >= 0 && !strings.Contains(sel[:i], ",") {
			end := strings.Index(sel, ")")
			term, sel = sel[:end+1], sel[end+1:]
			k := sel0(term[:i])
			v, ok := labels[k]
			if !ok || !slices.Contains(strings.Split(term[i+5:len(term)-1], ","), v) {
				return false
			}
			continue
		}
		term, sel, _ = strings.Cut(sel, ",")
		sel = "," + sel
		if k, v, ok := strings.Cut(term, "="); ok {
			if labels[k] != v {
				return false
			}
		} else if _, ok := labels[term]; !ok {
			return false
		}
	}
	return true
}

func sel0(s string) string { return strings.TrimSpace(s) }

// podSpec is the part of a Pod's spec hsbx reads back.
func podSpec(c *Container) map[string]any {
	spec := map[string]any{"containers": []map[string]any{{"name": "sandbox", "image": c.Image}}}
	if c.RuntimeClass != "" {
		spec["runtimeClassName"] = c.RuntimeClass
	}
	return spec
}

// kgetRuntimeClasses lists the cluster's RuntimeClasses (FAKEENGINE_RUNTIMES).
func (f *fake) kgetRuntimeClasses() int {
	items := []map[string]any{}
	for _, r := range f.runtimes()[1:] { // runc is the nodes' default, no class
		items = append(items, map[string]any{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": r,
			"metadata": map[string]any{"name": r}})
	}
	b, _ := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
	fmt.Fprintln(f.stdout, string(b))
	return 0
}

func (f *fake) kget(ns string, args []string) int {
	var names []string
	sel, ignore, kind := "", false, "pods"
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "pods" || a == "pod":
		case a == "persistentvolumeclaims" || a == "pvc" || a == "storageclasses" || a == "runtimeclasses" || a == "networkpolicies":
			kind = a
		case a == "-o" && i+1 < len(args):
			i++
		case a == "-l" && i+1 < len(args):
			i++
			sel = args[i]
		case a == "--ignore-not-found":
			ignore = true
		default:
			names = append(names, a)
		}
	}
	switch kind {
	case "runtimeclasses":
		return f.kgetRuntimeClasses()
	case "storageclasses":
		return f.kgetClasses(names, ignore)
	case "persistentvolumeclaims", "pvc":
		return f.kgetClaims(ns, names, ignore)
	case "networkpolicies":
		return f.kgetNetworkPolicies(ns)
	}
	var items []map[string]any
	var missing []string
	err := f.st.view(func(st *State) error {
		for _, c := range st.sorted() {
			if c.Namespace == ns && (len(names) > 0 && slices.Contains(names, c.Name) || len(names) == 0 && selects(sel, c.Labels)) {
				items = append(items, f.pod(c))
			}
		}
		for _, n := range names {
			if !slices.ContainsFunc(st.Containers, func(c *Container) bool { return c.Namespace == ns && c.Name == n }) {
				missing = append(missing, n)
			}
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	if len(names) == 1 && len(items) == 1 {
		b, _ := json.MarshalIndent(items[0], "", "    ")
		fmt.Fprintln(f.stdout, string(b))
		return 0
	}
	if len(names) > 0 && len(items) == 0 && ignore {
		return 0
	}
	if items == nil {
		items = []map[string]any{}
	}
	b, _ := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
	fmt.Fprintln(f.stdout, string(b))
	if len(missing) > 0 && !ignore {
		for _, n := range missing {
			fmt.Fprintf(f.stderr, "Error from server (NotFound): pods %q not found\n", n)
		}
		return 1
	}
	return 0
}

// kcreate makes a Pod from the manifest on stdin: running when its image
// is there and its command keeps running, finished when it exits at once,
// Pending (ErrImageNeverPull) when the image is missing.
func (f *fake) kcreate(ns string) int {
	b, err := io.ReadAll(f.stdin)
	if err != nil {
		return f.fail(err)
	}
	var head struct{ Kind string }
	if json.Unmarshal(b, &head) == nil && head.Kind == "PersistentVolumeClaim" {
		return f.kcreateClaim(ns, b)
	}
	if head.Kind == "NetworkPolicy" {
		return f.kcreateNetworkPolicy(ns, b)
	}
	var m struct {
		Metadata struct {
			Name        string            `json:"name"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			RuntimeClassName string `json:"runtimeClassName"`
			Containers       []struct {
				Image      string   `json:"image"`
				Command    []string `json:"command"`
				WorkingDir string   `json:"workingDir"`
				Env        []struct{ Name, Value string }
			} `json:"containers"`
			Volumes []struct {
				PersistentVolumeClaim *struct {
					ClaimName string `json:"claimName"`
				} `json:"persistentVolumeClaim"`
			} `json:"volumes"`
		} `json:"spec"`
	}
	err = json.Unmarshal(b, &m)
	if err != nil || m.Metadata.Name == "" || len(m.Spec.Containers) != 1 {
		fmt.Fprintf(f.stderr, "error: error validating \"STDIN\": %v\n", err)
		return 1
	}
	if rc := m.Spec.RuntimeClassName; rc != "" && !slices.Contains(f.runtimes()[1:], rc) {
		// The RuntimeClass admission plugin refuses it; nothing is made.
		fmt.Fprintf(f.stderr, "Error from server (Forbidden): error when creating \"STDIN\": pods %q is forbidden: pod rejected: RuntimeClass %q not found\n", m.Metadata.Name, rc)
		return 1
	}
	spec := m.Spec.Containers[0]
	c := &Container{RuntimeClass: m.Spec.RuntimeClassName, Name: m.Metadata.Name, Namespace: ns, Image: spec.Image, Labels: m.Metadata.Labels, Annotations: m.Metadata.Annotations,
		Cmd: spec.Command, WorkDir: spec.WorkingDir, Created: f.now, State: "created", RV: 1}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if c.WorkDir == "" {
		c.WorkDir = "/"
	}
	for _, e := range spec.Env {
		c.Env = append(c.Env, e.Name+"="+e.Value)
	}
	for _, v := range m.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			c.Claims = append(c.Claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	var missingClaim string
	if err := f.st.view(func(st *State) error {
		for _, n := range c.Claims {
			if !slices.ContainsFunc(st.Claims, func(x *Claim) bool { return x.Namespace == ns && x.Name == n && x.Deleting.IsZero() }) {
				missingClaim = n
			}
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	switch {
	case missingClaim != "":
		// The scheduler holds it: Pending, PodScheduled False.
		c.Unschedulable = fmt.Sprintf("0/1 nodes are available: persistentvolumeclaim %q not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.", missingClaim)
	case f.haveImage(spec.Image):
		c.StartedAt = f.now
		if longRunning(c.Cmd) {
			c.State = "running"
		} else {
			c.State, c.FinishedAt, c.ExitCode = "exited", f.now, quickExit(c.Cmd)
		}
	}
	err = f.st.update(func(st *State) error {
		if slices.ContainsFunc(st.Containers, func(x *Container) bool { return x.Namespace == ns && x.Name == c.Name }) {
			return errAlreadyExists
		}
		c.ID = st.newID(c.Name, f.now)
		st.Containers = append(st.Containers, c)
		return nil
	})
	if errors.Is(err, errAlreadyExists) {
		fmt.Fprintf(f.stderr, "Error from server (AlreadyExists): error when creating \"STDIN\": pods %q already exists\n", c.Name)
		return 1
	}
	if err != nil {
		return f.fail(err)
	}
	// kubectl prints the Pod as the API server took it: Pending, before
	// the kubelet has seen it; the state above is what a get shows next.
	p := f.pod(c)
	p["status"] = map[string]any{"phase": "Pending", "qosClass": "Burstable"}
	out, _ := json.MarshalIndent(p, "", "    ")
	fmt.Fprintln(f.stdout, string(out))
	return 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
