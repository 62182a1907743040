// Package kubectl is the kubectl runtime: runtime.Runtime over a
// Kubernetes cluster, driven through the kubectl binary (no client
// library), and the parsing and classification of what kubectl prints,
// read from outputs captured on a real cluster (testdata/kube, by
// scripts/capture-kube.sh, kubectl and Kubernetes v1.34).
//
// A sandbox there is a Pod: its name is the container name made valid
// (PodName), its uid pins its identity (a Pod deleted and made again
// under the same name has a new uid), its labels the labels, with the
// exact values kept in annotations of the same names where a label value
// cannot hold them.
package kubectl

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hsbx/hsbx/internal/startfail"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// pod is the part of a Pod hsbx reads, decoded tolerantly.
type pod struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp string            `json:"creationTimestamp"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		RuntimeClassName string `json:"runtimeClassName"`
		Containers       []struct {
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase             string            `json:"phase"`
		HostIP            string            `json:"hostIP"`
		ContainerStatuses []containerStatus `json:"containerStatuses"`
		Conditions        []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

type containerStatus struct {
	State struct {
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting"`
		Running *struct {
			StartedAt string `json:"startedAt"`
		} `json:"running"`
		Terminated *struct {
			ExitCode   int    `json:"exitCode"`
			StartedAt  string `json:"startedAt"`
			FinishedAt string `json:"finishedAt"`
		} `json:"terminated"`
	} `json:"state"`
}

// ParsePods reads `kubectl get pods -o json` (a List) or `kubectl get pod
// NAME -o json` (one Pod) into containers: ID "UID/NAME" (see Runtime),
// Name the pod's name, State from the phase and the first container's
// state, Labels the labels with annotations of the same names overriding
// them (exact values).
func ParsePods(out []byte) ([]runtime.Container, error) {
	ps, err := parsePods(out)
	if err != nil {
		return nil, err
	}
	cs := make([]runtime.Container, 0, len(ps))
	for _, p := range ps {
		c, err := p.container()
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func parsePods(out []byte) ([]pod, error) {
	var head struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(out, &head); err != nil {
		return nil, fmt.Errorf("kubectl get: %w", err)
	}
	raws := head.Items
	switch head.Kind {
	case "List", "PodList":
	case "Pod":
		raws = []json.RawMessage{out}
	default:
		return nil, fmt.Errorf("kubectl get: kind %q, want List or Pod", head.Kind)
	}
	ps := make([]pod, 0, len(raws))
	for _, raw := range raws {
		var p pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("kubectl get: %w", err)
		}
		if p.Metadata.Name == "" || p.Metadata.UID == "" || strings.Contains(p.Metadata.UID, "/") {
			return nil, errors.New("kubectl get: a pod without name or uid")
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func (p pod) container() (runtime.Container, error) {
	c := runtime.Container{ID: ID(p.Metadata.UID, p.Metadata.Name), Name: p.Metadata.Name, State: p.state(), Labels: map[string]string{}}
	for k, v := range p.Metadata.Labels {
		c.Labels[k] = v
	}
	for k, v := range p.Metadata.Annotations {
		if _, ok := c.Labels[k]; ok {
			c.Labels[k] = v // the exact value a label could not hold
		}
	}
	if len(p.Spec.Containers) > 0 {
		c.Image = p.Spec.Containers[0].Image
	}
	c.OCIRuntime = p.Spec.RuntimeClassName
	if p.Metadata.Labels[NetworkLabel] == "none" {
		c.NetworkMode = "none" // its NetworkPolicy's, proved when it was made
	}
	var err error
	if c.Created, err = timestamp(p.Metadata.CreationTimestamp); err != nil {
		return c, err
	}
	if len(p.Status.ContainerStatuses) > 0 {
		st := p.Status.ContainerStatuses[0].State
		switch {
		case st.Running != nil:
			c.Started, err = timestamp(st.Running.StartedAt)
		case st.Terminated != nil:
			if c.Started, err = timestamp(st.Terminated.StartedAt); err == nil {
				c.Finished, err = timestamp(st.Terminated.FinishedAt)
			}
		}
	}
	return c, err
}

// state maps a pod to hsbx's states. A pod being deleted is removing; one
// whose container runs is running; Succeeded and Failed are exited;
// Pending is starting while the cluster works on it (scheduling, pulling,
// creating) and created when its container waits for what will not come
// (an image it may not pull, a bad configuration); anything else is
// unknown, which callers treat as alive.
func (p pod) state() runtime.State {
	if p.Metadata.DeletionTimestamp != "" {
		return runtime.StateRemoving
	}
	switch p.Status.Phase {
	case "Running":
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running == nil {
			return runtime.StateRestarting // the container is between runs
		}
		return runtime.StateRunning
	case "Succeeded", "Failed":
		return runtime.StateExited
	case "Pending":
		if reason, _ := p.waiting(); fatalWaiting[reason] != nil {
			return runtime.StateCreated // waiting for what will not come: never started
		}
		return runtime.StateStarting // the cluster is still bringing it up
	}
	return runtime.StateUnknown
}

// Waiting is why a pod's container is not running yet ("ErrImageNeverPull",
// "ImagePullBackOff", "ContainerCreating", ...; "" when it is not waiting),
// with the cluster's message.
func Waiting(out []byte) (reason, message string, err error) {
	var p pod
	if err := json.Unmarshal(out, &p); err != nil {
		return "", "", fmt.Errorf("kubectl get: %w", err)
	}
	reason, message = p.waiting()
	return reason, message, nil
}

func (p pod) waiting() (reason, message string) {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
		return "", ""
	}
	w := p.Status.ContainerStatuses[0].State.Waiting
	return w.Reason, w.Message
}

// unschedulable is the scheduler's message when it found no node for the
// Pod ("" when it did, or has not said).
func (p pod) unschedulable() string {
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" && c.Reason == "Unschedulable" {
			return c.Message
		}
	}
	return ""
}

// randomHex is 16 random hex digits, for temporary names.
func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func timestamp(s string) (time.Time, error) {
	t, err := runtime.ParseTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("kubectl get: %w", err)
	}
	return t, nil
}

// ExecStatus reads a finished `kubectl exec`: kubectl exits with the
// command's status and, for a non-zero one, ends stderr with "command
// terminated with exit code N". Only that last line counts (a command can
// print the same words itself). Anything else that is not 0 is kubectl's
// own failure, classified; a missing executable, which kubectl reports as
// an internal error with status 1, is the shell's 127.
func ExecStatus(code int, stderr string) (int, error) {
	if code == 0 {
		return 0, nil
	}
	last := lastLine(stderr)
	// kubectl exec's last stderr line when the command exited non-zero
	// (read without a regexp: compiling one at start-up cost every hsbx
	// command, kubectl or not, 40 µs).
	if digits, ok := strings.CutPrefix(last, terminatedPrefix); ok && digits != "" && strings.Trim(digits, "0123456789") == "" {
		if n, err := strconv.Atoi(digits); err == nil && n == code {
			return n, nil
		}
	}
	if f, ok := startfail.Parse(last); ok {
		return f.Code, nil
	}
	return -1, Classify(code, stderr)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// rules classify kubectl's own errors (v1.34's words, captured).
var rules = []struct {
	fragment string
	kind     error
}{
	{"couldn't get current server api group list", runtime.ErrUnreachable},
	{"unable to connect to the server", runtime.ErrUnreachable},
	{"the connection to the server", runtime.ErrUnreachable},
	{"error from server (notfound)", runtime.ErrNotFound},
	{"error from server (alreadyexists)", runtime.ErrNameInUse},
	{"cannot exec into a container in a completed pod", runtime.ErrNotRunning},
	{"container not found", runtime.ErrNotRunning},
	{"pod rejected: runtimeclass", runtime.ErrNoOCIRuntime}, // the RuntimeClass admission: no such class
	{"error from server (forbidden)", runtime.ErrEngine},
}

// kubectlLine reports whether a line of stderr is kubectl's own error (one
// of rules' words, or kubectl's "error: " prefix).
func kubectlLine(line string) bool {
	low := strings.ToLower(line)
	if strings.HasPrefix(low, "error: ") {
		return true
	}
	for _, r := range rules {
		if strings.Contains(low, r.fragment) {
			return true
		}
	}
	return false
}

// Classify names what a failed kubectl call means (nil code: success).
func Classify(code int, stderr string) error {
	if code == 0 {
		return nil
	}
	low := strings.ToLower(stderr)
	for _, r := range rules {
		if strings.Contains(low, r.fragment) {
			return r.kind
		}
	}
	return runtime.ErrEngine
}

// LabelValue makes s a valid Kubernetes label value: at most 63 of
// [A-Za-z0-9._-], beginning and ending with a letter or digit. Values
// that change are kept exactly in an annotation of the same name.
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !labelChar(c) {
			b[i] = '_'
		}
	}
	out := string(b)
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "._-")
}

func labelChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '-'
}

// ParseRuntimeClasses reads `kubectl get runtimeclasses -o json`: the
// classes a Pod may name (runtimeClassName), sorted.
func ParseRuntimeClasses(out []byte) (runtime.OCIRuntimes, error) {
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return runtime.OCIRuntimes{}, fmt.Errorf("kubectl get runtimeclasses: %w", err)
	}
	if list.Kind != "List" && list.Kind != "RuntimeClassList" {
		return runtime.OCIRuntimes{}, fmt.Errorf("kubectl get runtimeclasses: kind %q, want List", list.Kind)
	}
	o := runtime.OCIRuntimes{Names: []string{}, Complete: true}
	for _, it := range list.Items {
		if it.Metadata.Name != "" {
			o.Names = append(o.Names, it.Metadata.Name)
		}
	}
	slices.Sort(o.Names)
	return o, nil
}
