package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// Runtime is runtime.Runtime over kubectl: a sandbox is a Pod in the
// configured context and namespace. A container ID is "UID/NAME": the uid
// pins the Pod's identity (a Pod made again under the same name has a new
// one) and every call that can say which Pod it means — inspect, delete —
// checks it; the name is what kubectl addresses.
type Runtime struct {
	bin     string
	runner  *proc.Runner
	env     []string
	timeout time.Duration
	target  Target
	// hostIPs are the nodes of the Pods Run has just seen running (id →
	// hostIP), taken once by ReachTargets.
	hostIPs sync.Map
}

var (
	_ runtime.Runtime       = (*Runtime)(nil)
	_ runtime.ClaimRemover  = (*Runtime)(nil)
	_ runtime.PolicyNetwork = (*Runtime)(nil)
)

// Target names where kubectl works: a kubeconfig context and a namespace
// ("": the kubeconfig's current context, and that context's namespace or
// "default").
type Target struct {
	Context   string `json:"context,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// New returns the runtime for the kubectl at bin working in t; o is how
// it runs kubectl (runner, environment, timeout), as for docker and podman.
func New(bin string, o enginecli.Options, t Target) *Runtime {
	o = o.WithDefaults()
	return &Runtime{bin: bin, runner: o.Runner, env: o.Env, timeout: o.Timeout, target: t}
}

// Dialect implements runtime.Runtime.
func (r *Runtime) Dialect() runtime.Dialect { return runtime.Kubectl }

// Binary implements runtime.Runtime.
func (r *Runtime) Binary() string { return r.bin }

// CallTimeout implements runtime.Runtime.
func (r *Runtime) CallTimeout() time.Duration { return r.timeout }

// Capabilities implements runtime.Runtime: a Pod is deleted by stop, keeps
// its files in a claim, gets its image from the kubelet; kubectl's copy
// (tar in the Pod) reaches its memory-backed mounts, and an exec's
// environment values ride on its stdin. What a Pod lacks is in Lacks.
func (r *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{CopyReachesMemoryMounts: true, CopyRunsInside: true, ListsOCIRuntimes: true, ExecEnvInBand: true, Lacks: map[runtime.Feature]string{
		runtime.PidsLimit: "Kubernetes sets the pids limit per node (the kubelet's podPidsLimit), not per Pod",
		runtime.DiskQuota: "the kubectl runtime does not set ephemeral-storage limits yet",
		runtime.RunFlags:  "extra_args are docker/podman run flags, which a Pod does not take",
		runtime.ExecUser:  "kubectl exec has no --user: hsbx's agent runs a command as another user, through the exec channel",
	}}
}

// Endpoint implements runtime.Runtime: the binary, KUBECONFIG, and the
// context and namespace (as configured: "" is the kubeconfig's current
// context, which `kubectl config use-context` may change under it).
func (r *Runtime) Endpoint() string {
	return enginecli.Endpoint(string(runtime.Kubectl), r.bin, r.env, "context="+r.target.Context, "namespace="+r.target.Namespace)
}

// Target is the context and namespace this runtime works in.
func (r *Runtime) Target() Target { return r.target }

// ID is the container ID of a Pod: "UID/NAME".
func ID(uid, name string) string { return uid + "/" + name }

// splitID reads "UID/NAME"; anything without a slash is a Pod name.
func splitID(id string) (uid, name string) {
	if u, n, ok := strings.Cut(id, "/"); ok {
		return u, n
	}
	return "", PodName(id)
}

func (r *Runtime) argv(args ...string) []string {
	argv := []string{r.bin}
	if r.target.Context != "" {
		argv = append(argv, "--context", r.target.Context)
	}
	if r.target.Namespace != "" {
		argv = append(argv, "--namespace", r.target.Namespace)
	}
	return append(argv, args...)
}

// call runs one kubectl command and classifies a non-zero exit.
func (r *Runtime) call(ctx context.Context, args []string, stdin io.Reader, timeout time.Duration) (proc.Result, error) {
	argv := r.argv(args...)
	res, err := r.runner.Run(ctx, proc.Cmd{Argv: argv, Env: r.env, Stdin: stdin, Timeout: timeout})
	if err != nil {
		return res, enginecli.RunError(argv, err)
	}
	if res.ExitCode != 0 {
		return res, &runtime.EngineError{Kind: Classify(res.ExitCode, string(res.Stderr)), Argv: argv,
			ExitCode: res.ExitCode, Stderr: strings.TrimSpace(string(res.Stderr))}
	}
	return res, nil
}

// get reads pods: by label selector when names is empty, else the named
// ones. Several names are one list of the namespace, filtered here: kubectl
// fetches each named Pod with a request of its own, and its client-side
// rate limit (5 a second past a burst) then costs seconds for a dozen.
func (r *Runtime) get(ctx context.Context, selector string, names ...string) ([]pod, error) {
	args := []string{"get", "pods", "-o", "json"}
	switch {
	case len(names) == 1:
		args = append(args, "--ignore-not-found", names[0])
	case len(names) == 0 && selector != "":
		args = append(args, "-l", selector)
	}
	res, err := r.call(ctx, args, nil, r.timeout)
	if err != nil {
		return nil, err
	}
	out := bytes.TrimSpace(res.Stdout)
	if len(out) == 0 {
		return nil, nil // --ignore-not-found and none there
	}
	ps, err := parsePods(out)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", runtime.ErrBadOutput, err)
	}
	if len(names) > 1 {
		ps = slices.DeleteFunc(ps, func(p pod) bool { return !slices.Contains(names, p.Metadata.Name) })
	}
	return ps, nil
}

// List implements runtime.Runtime: one `get pods -l SELECTOR`. A label
// filter's value is matched as its label form by the cluster, then exactly
// (annotations keep exact values) here; status and name filters apply here.
func (r *Runtime) List(ctx context.Context, o runtime.ListOptions) ([]runtime.Container, error) {
	var sel []string
	exact := map[string]string{}
	for _, l := range o.Labels {
		k, v, hasV := strings.Cut(l, "=")
		if !hasV {
			sel = append(sel, k)
			continue
		}
		sel = append(sel, k+"="+LabelValue(v))
		exact[k] = v
	}
	ps, err := r.get(ctx, strings.Join(sel, ","))
	if err != nil {
		return nil, err
	}
	var nameRE *regexp.Regexp
	if o.Name != "" {
		if nameRE, err = regexp.Compile(o.Name); err != nil {
			return nil, fmt.Errorf("name filter %q: %w", o.Name, err)
		}
	}
	var cs []runtime.Container
	for _, p := range ps {
		c, err := p.container()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", runtime.ErrBadOutput, err)
		}
		ok := true
		for k, v := range exact {
			ok = ok && c.Labels[k] == v
		}
		if len(o.Status) > 0 && !slices.Contains(o.Status, c.State) {
			ok = false
		}
		if nameRE != nil && !nameRE.MatchString(c.Name) {
			ok = false
		}
		if ok {
			cs = append(cs, c)
		}
	}
	return cs, nil
}

// SessionsUnknown stands in Inspect's ExecIDs for a running Pod: kubectl
// cannot list a Pod's exec sessions, so a running Pod counts as in use
// until LiveExecs has asked it which commands run.
const SessionsUnknown = "kubectl-exec-sessions-unknown"

// Inspect implements runtime.Runtime: one `get pods NAME...`; an ID's uid
// must match (a Pod of the same name with another uid is not it).
func (r *Runtime) Inspect(ctx context.Context, ids ...string) ([]runtime.Container, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var names []string
	for _, id := range ids {
		if _, n := splitID(id); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, &runtime.MissingError{IDs: ids}
	}
	ps, err := r.get(ctx, "", names...)
	if err != nil {
		return nil, err
	}
	var cs []runtime.Container
	var missing []string
	for _, id := range ids {
		uid, name := splitID(id)
		found := false
		for _, p := range ps {
			if p.Metadata.Name != name || (uid != "" && p.Metadata.UID != uid) {
				continue
			}
			c, err := p.container()
			if err != nil {
				return nil, fmt.Errorf("%w: %v", runtime.ErrBadOutput, err)
			}
			if c.State == runtime.StateRunning {
				c.ExecIDs = []string{SessionsUnknown}
			}
			cs = append(cs, c)
			found = true
			break
		}
		if !found {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return cs, &runtime.MissingError{IDs: missing}
	}
	return cs, nil
}

// Run implements runtime.Runtime: `create -f -` with the Pod manifest on
// stdin, then waiting (bounded by four call timeouts, as docker's run) for
// its container to run. A Pod that cannot start — its image absent with no
// way to pull it, a bad configuration — fails fast with the cluster's
// reason; one that does not run in time or whose wait is interrupted is
// removed by its uid before Run returns.
func (r *Runtime) Run(ctx context.Context, s runtime.RunSpec) (string, error) {
	m, err := Manifest(s)
	if err != nil {
		return "", err
	}
	made, err := r.ensureClaims(ctx, s.Claims)
	// A failure from here removes what this call made: its claims (by
	// uid) and its Pod.
	undoClaims := func(err error) error {
		if rerr := r.removeMade(context.WithoutCancel(ctx), made); rerr != nil {
			err = fmt.Errorf("%w (and removing the persistent volume claim it made failed: %v)", err, rerr)
		}
		return err
	}
	if err != nil {
		return "", undoClaims(err)
	}
	res, err := r.call(ctx, []string{"create", "-f", "-", "-o", "json"}, bytes.NewReader(m), r.timeout)
	if err != nil {
		return "", undoClaims(err)
	}
	ps, err := parsePods(bytes.TrimSpace(res.Stdout))
	if err != nil || len(ps) != 1 {
		return "", fmt.Errorf("%w: kubectl create printed %.200q where a Pod was expected", runtime.ErrBadOutput, res.Stdout)
	}
	id := ID(ps[0].Metadata.UID, ps[0].Metadata.Name)
	err = nil
	if ps[0].Metadata.Labels[NetworkLabel] == "none" {
		err = r.denyNetwork(ctx, m, ps[0].Metadata.UID)
	}
	if err == nil {
		err = r.waitRunning(ctx, id, 4*r.timeout)
	}
	if err != nil {
		// This call made the Pod (its uid says which): remove it rather
		// than leave a Pod that may yet start with no one to use it.
		if rerr := r.remove(context.WithoutCancel(ctx), true, time.Second, []string{id}); rerr != nil {
			err = fmt.Errorf("%w (and removing the Pod failed: %v)", err, rerr)
		}
		return "", undoClaims(err)
	}
	return id, nil
}

// denyNetwork creates the NetworkPolicy that keeps the Pod made from
// podJSON (uid) off the network, owned by it. Whether the cluster enforces
// it is the lifecycle's to prove (ReachTargets).
func (r *Runtime) denyNetwork(ctx context.Context, podJSON []byte, uid string) error {
	m, err := NetworkPolicyManifest(podJSON, uid)
	if err != nil {
		return err
	}
	res, err := r.call(ctx, []string{"create", "-f", "-", "-o", "json"}, bytes.NewReader(m), r.timeout)
	if err != nil {
		return fmt.Errorf("creating the NetworkPolicy that keeps the Pod off the network: %w", err)
	}
	var np struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name            string `json:"name"`
			OwnerReferences []struct {
				UID string `json:"uid"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(res.Stdout), &np); err != nil || np.Kind != "NetworkPolicy" || np.Metadata.Name == "" ||
		len(np.Metadata.OwnerReferences) != 1 || np.Metadata.OwnerReferences[0].UID != uid {
		return fmt.Errorf("%w: kubectl create printed %.200q where the Pod's NetworkPolicy was expected", runtime.ErrBadOutput, res.Stdout)
	}
	return nil
}

// ReachTargets implements runtime.PolicyNetwork: the kubelet of the Pod's
// node (its hostIP, port 10250), which any Pod can connect to unless a
// policy stops it.
func (r *Runtime) ReachTargets(ctx context.Context, id string) ([]string, error) {
	if ip, ok := r.hostIPs.LoadAndDelete(id); ok { // Run has just read it
		return []string{net.JoinHostPort(ip.(string), "10250")}, nil
	}
	uid, name := splitID(id)
	ps, err := r.get(ctx, "", name)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(ps, func(p pod) bool { return p.Metadata.UID == uid })
	if i < 0 {
		return nil, &runtime.EngineError{Kind: runtime.ErrNotFound, Argv: r.argv("get", "pods", name),
			Stderr: fmt.Sprintf("pod %s (uid %s) is gone", name, uid)}
	}
	ip := ps[i].Status.HostIP
	if net.ParseIP(ip) == nil {
		return nil, fmt.Errorf("%w: pod %s has no node address (hostIP %q)", runtime.ErrBadOutput, name, ip)
	}
	return []string{net.JoinHostPort(ip, "10250")}, nil
}

// fatalWaiting are the reasons a Pod's container waits for something that
// will not come by itself.
var fatalWaiting = map[string]error{
	"ErrImageNeverPull":          runtime.ErrImageNotFound,
	"ErrImagePull":               runtime.ErrImageNotFound,
	"ImagePullBackOff":           runtime.ErrImageNotFound,
	"InvalidImageName":           runtime.ErrImageNotFound,
	"CreateContainerConfigError": runtime.ErrEngine,
	"CreateContainerError":       runtime.ErrEngine,
	"RunContainerError":          runtime.ErrEngine,
}

// waitRunning polls the Pod until its container runs.
func (r *Runtime) waitRunning(ctx context.Context, id string, bound time.Duration) error {
	uid, name := splitID(id)
	deadline := time.Now().Add(bound)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		ps, err := r.get(ctx, "", name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ps, func(p pod) bool { return p.Metadata.UID == uid })
		if i < 0 {
			return &runtime.EngineError{Kind: runtime.ErrNotFound, Argv: r.argv("get", "pods", name),
				Stderr: fmt.Sprintf("pod %s (uid %s) is gone", name, uid)}
		}
		p := ps[i]
		switch p.state() {
		case runtime.StateRunning:
			if ip := p.Status.HostIP; net.ParseIP(ip) != nil {
				r.hostIPs.Store(id, ip) // ReachTargets' answer, without asking again
			}
			return nil
		case runtime.StateExited, runtime.StateRemoving:
			return &runtime.EngineError{Kind: runtime.ErrEngine, Argv: r.argv("get", "pods", name),
				Stderr: fmt.Sprintf("pod %s ended before it ran (phase %s)", name, p.Status.Phase)}
		}
		if msg := p.unschedulable(); msg != "" && !waitsForClaim(msg) {
			// No node can take it now. A sandbox is wanted now, not when
			// capacity appears: say why rather than wait out the bound.
			return &runtime.EngineError{Kind: runtime.ErrEngine, Argv: r.argv("get", "pods", name),
				Stderr: fmt.Sprintf("pod %s cannot be scheduled: %s (free capacity, or lower the sandbox's cpu/memory)", name, msg)}
		}
		if reason, msg := p.waiting(); fatalWaiting[reason] != nil {
			return &runtime.EngineError{Kind: fatalWaiting[reason], Argv: r.argv("get", "pods", name),
				Stderr: fmt.Sprintf("pod %s cannot start: %s: %s", name, reason, msg)}
		}
		if time.Now().Add(delay).After(deadline) {
			reason, msg := p.waiting()
			if u := p.unschedulable(); u != "" {
				reason, msg = "unschedulable:", u
			}
			return &runtime.EngineError{Kind: runtime.ErrTimeout, Argv: r.argv("get", "pods", name), ExitCode: -1,
				Stderr: fmt.Sprintf("pod %s still %s after %s %s %s", name, p.Status.Phase, bound, reason, msg)}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s to run: %w", name, context.Cause(ctx))
		case <-time.After(delay):
		}
	}
}

// waitsForClaim reports whether the scheduler holds a Pod back only until
// its claim is bound (provisioning takes a moment): not a reason to give up.
func waitsForClaim(msg string) bool {
	return strings.Contains(msg, "unbound immediate PersistentVolumeClaims")
}

// Start implements runtime.Runtime. A Pod cannot be started again once it
// has finished: Start waits for a Pending Pod, succeeds at once for a
// running one, and fails for a finished one (the caller replaces it).
func (r *Runtime) Start(ctx context.Context, id string) error {
	cs, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	switch cs[0].State {
	case runtime.StateRunning:
		return nil
	case runtime.StateCreated, runtime.StateStarting:
		return r.waitRunning(ctx, id, 4*r.timeout)
	}
	return &runtime.EngineError{Kind: runtime.ErrEngine, Argv: r.argv("get", "pods", cs[0].Name),
		Stderr: fmt.Sprintf("pod %s is %s; a Pod that finished cannot be started again", cs[0].Name, cs[0].State)}
}

// Stop implements runtime.Runtime: a Pod cannot be stopped and kept, so
// stopping deletes it (grace as its termination grace period) and waits
// until it is gone.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	return r.remove(ctx, true, grace, []string{id})
}

// Unpause implements runtime.Runtime: Pods are never paused.
func (r *Runtime) Unpause(_ context.Context, id string) error {
	return fmt.Errorf("%w: pod %s: Kubernetes cannot pause or unpause Pods", runtime.ErrUnsupported, id)
}
