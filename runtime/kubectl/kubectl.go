package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
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

// execScript runs a command for Exec: $1 says where its environment comes
// from (0: none; "m" and a value: only hsbx's command marker
// (runtime.ExecMarker), which is no secret; a number: that many bytes of
// stdin; a path: a file to read and delete), $2 is the working directory
// ("": the Pod's), the rest the command. The environment is shell assignments ending in
// HSBX_ENV_OK=1, so one that did not arrive whole is an error (126), not a
// command run without it. With an environment, the command starts from a
// fresh /bin/sh (an absolute path is always exec'd): a shell may run
// builtin applets (busybox's yes, echo...) in its own process, whose
// /proc/PID/environ is what it started with, and hsbx finds a command's
// processes by the marker there.
const execScript = `e=$1; w=$2; shift 2
case $e in
0) HSBX_ENV_OK=1 ;;
m*) export ` + runtime.ExecMarker + `="${e#m}"; HSBX_ENV_OK=1 ;;
/*) . "$e"; rm -f "$e" ;;
*) eval "$(dd bs=1 count="$e" 2>/dev/null)" ;;
esac
if [ "$HSBX_ENV_OK" != 1 ]; then echo "hsbx: the command's environment did not arrive (the image needs sh and dd)" >&2; exit 126; fi
unset HSBX_ENV_OK
if [ -n "$w" ]; then cd "$w" || exit 126; fi
[ "$e" = 0 ] || exec /bin/sh -c 'exec "$@"' hsbx-run "$@"
exec "$@"`

// envScript renders env as shell assignments for execScript.
func envScript(env map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString("export " + k + "='" + strings.ReplaceAll(env[k], "'", `'\''`) + "'\n")
	}
	b.WriteString("HSBX_ENV_OK=1\n")
	return b.Bytes()
}

// Exec implements runtime.Runtime with `kubectl exec` through a small sh
// wrapper (execScript), since kubectl exec has no -e and no -w: the
// working directory is an argument, env values travel on stdin ahead of
// the command's own input (or, with a terminal, in a file written by one
// more exec and deleted before the command starts) — never on a command
// line. The status is kubectl's exit status, which is the command's; the
// "command terminated with exit code N" line kubectl adds to stderr is
// dropped. ExecSpec.User is not applied (Lacks ExecUser): commands run as
// the Pod's user (run_as_host_user sets it in the Pod).
func (r *Runtime) Exec(ctx context.Context, s runtime.ExecSpec) (int, error) {
	if len(s.Cmd) == 0 {
		return -1, errors.New("exec: no command given")
	}
	_, name := splitID(s.ID)
	envSrc := "0"
	stdin := s.Stdin
	interactive := s.Interactive
	marker, markerOnly := s.Env[runtime.ExecMarker]
	markerOnly = markerOnly && len(s.Env) == 1
	switch {
	case markerOnly:
		// The marker alone (most commands) rides on the wrapper's argv:
		// no stdin stream to open, no file for a terminal.
		envSrc = "m" + marker
	case len(s.Env) > 0:
		block := envScript(s.Env)
		if s.TTY {
			path := "/tmp/.hsbx-env-" + randomHex()
			code, err := r.Exec(ctx, runtime.ExecSpec{ID: s.ID, Cmd: []string{"/bin/sh", "-c", `umask 077 && cat > "$1"`, "hsbx-env", path},
				Stdin: bytes.NewReader(block), Interactive: true, Timeout: r.timeout})
			if err != nil || code != 0 {
				return -1, fmt.Errorf("writing the command's environment into pod %s: exit %d: %w", name, code, errors.Join(err, runtime.ErrEngine))
			}
			envSrc = path
		} else {
			envSrc = strconv.Itoa(len(block))
			if stdin == nil || !interactive {
				stdin = bytes.NewReader(block)
			} else {
				stdin = io.MultiReader(bytes.NewReader(block), stdin)
			}
			interactive = true
		}
	}
	args := []string{"exec"}
	if interactive {
		args = append(args, "-i")
	}
	if s.TTY {
		args = append(args, "-t")
	}
	args = append(args, name, "-c", ContainerName, "--", "/bin/sh", "-c", execScript, "hsbx-exec", envSrc, s.WorkDir)
	args = append(args, s.Cmd...)
	argv := r.argv(args...)
	cmd := proc.Cmd{Argv: argv, Env: r.env, Stdout: s.Stdout, Timeout: s.Timeout}
	if interactive {
		cmd.Stdin = stdin
	}
	// Two holds: a first line that is kubectl's own error (the Pod is
	// gone, the server unreachable) until the status says whose it was,
	// and kubectl's closing "command terminated with exit code N".
	var tail *tailHold
	var first *enginecli.HoldWriter
	if s.Stderr != nil {
		tail = &tailHold{dst: s.Stderr}
		first = enginecli.NewHoldWriter(tail, kubectlLine)
		cmd.Stderr = first
	}
	finish := func(engineError bool, code int) (held []byte) {
		if first != nil {
			held = first.Finish(engineError)
			tail.finish(code)
		}
		return held
	}
	res, err := r.runner.Run(ctx, cmd)
	if err != nil {
		finish(false, -1)
		return -1, enginecli.RunError(argv, err)
	}
	code, kerr := ExecStatus(res.ExitCode, string(res.Stderr))
	held := finish(kerr != nil, res.ExitCode)
	if kerr != nil {
		return res.ExitCode, &runtime.EngineError{Kind: kerr, Argv: argv, ExitCode: res.ExitCode, Stderr: strings.TrimSpace(string(res.Stderr)), Held: held}
	}
	return code, nil
}

// liveScript prints the marker of every process in the Pod that carries
// one: the commands hsbx started, from any host.
const liveScript = `for d in /proc/[0-9]*; do tr '\0' '\n' < "$d/environ" 2>/dev/null | grep "^$1=" ; done | sort -u`

// LiveExecs implements runtime.Runtime. kubectl cannot list exec
// sessions, so the Pod is asked (one exec) which processes carry hsbx's
// command marker (runtime.ExecMarker); each distinct marker is a live
// command. Commands started by plain `kubectl exec` carry none and are
// not seen.
func (r *Runtime) LiveExecs(ctx context.Context, c runtime.Container) ([]string, error) {
	if c.State != runtime.StateRunning {
		return nil, nil
	}
	var out, errb bytes.Buffer
	code, err := r.Exec(ctx, runtime.ExecSpec{ID: c.ID, Cmd: []string{"/bin/sh", "-c", liveScript, "hsbx-live", runtime.ExecMarker},
		Stdout: &out, Stderr: &errb, Timeout: r.timeout})
	if err != nil {
		return nil, err
	}
	if code != 0 && code != 1 { // grep finding nothing anywhere is 1
		return nil, fmt.Errorf("asking pod %s for its commands: exit %d: %s", c.Name, code, strings.TrimSpace(errb.String()))
	}
	var live []string
	for line := range strings.Lines(out.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), runtime.ExecMarker+"="); ok && v != "" {
			live = append(live, v)
		}
	}
	return live, nil
}

// InspectImage implements runtime.Runtime: kubectl cannot see the images
// on the cluster's nodes; the kubelet pulls what is missing
// (imagePullPolicy IfNotPresent), so this is never ErrImageNotFound.
func (r *Runtime) InspectImage(_ context.Context, ref string) (runtime.Image, error) {
	return runtime.Image{}, fmt.Errorf("%w: kubectl cannot inspect image %s on the cluster's nodes", runtime.ErrUnsupported, ref)
}

// Pull implements runtime.Runtime: the kubelet pulls images, not kubectl.
func (r *Runtime) Pull(_ context.Context, ref string, _ io.Writer, _ time.Duration) error {
	return fmt.Errorf("%w: kubectl cannot pull image %s; the cluster's nodes pull it when a Pod needs it", runtime.ErrUnsupported, ref)
}

// CopyIn implements runtime.Runtime: the archive streams into `tar -x` in
// the Pod (the image needs tar, as for `kubectl cp`).
func (r *Runtime) CopyIn(ctx context.Context, id, dir string, archive io.Reader) error {
	return r.tar(ctx, id, []string{"tar", "-x", "-f", "-", "-C", dir}, archive, nil)
}

// CopyOut implements runtime.Runtime: `tar -c` in the Pod streams out.
func (r *Runtime) CopyOut(ctx context.Context, id, src string, w io.Writer) error {
	dir, base := splitPath(src)
	return r.tar(ctx, id, []string{"tar", "-c", "-f", "-", "-C", dir, base}, nil, w)
}

func splitPath(p string) (dir, base string) {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

func (r *Runtime) tar(ctx context.Context, id string, cmd []string, in io.Reader, out io.Writer) error {
	var errb bytes.Buffer
	if out == nil {
		out = io.Discard
	}
	code, err := r.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: cmd, Stdin: in, Interactive: in != nil, Stdout: out, Stderr: &errb,
		Timeout: enginecli.CopyTimeout * r.timeout})
	if err != nil {
		return err
	}
	if code != 0 {
		kind := runtime.ErrEngine
		if strings.Contains(strings.ToLower(errb.String()), "no such file or directory") {
			kind = runtime.ErrNoSuchPath
		}
		return &runtime.EngineError{Kind: kind, Argv: r.argv(append([]string{"exec", id, "--"}, cmd...)...), ExitCode: code, Stderr: strings.TrimSpace(errb.String())}
	}
	return nil
}

// Version implements runtime.Runtime: `kubectl version -o json`. When
// the cluster is unreachable the client version is still returned, with
// an error wrapping ErrUnreachable.
func (r *Runtime) Version(ctx context.Context) (runtime.Version, error) {
	res, err := r.call(ctx, []string{"version", "-o", "json"}, nil, r.timeout)
	var v struct {
		Client *struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
		Server *struct {
			GitVersion string `json:"gitVersion"`
			Platform   string `json:"platform"`
		} `json:"serverVersion"`
	}
	if jerr := json.Unmarshal(bytes.TrimSpace(res.Stdout), &v); jerr != nil || v.Client == nil {
		if err != nil {
			return runtime.Version{}, err
		}
		return runtime.Version{}, fmt.Errorf("%w: kubectl version printed %.200q", runtime.ErrBadOutput, res.Stdout)
	}
	out := runtime.Version{Client: strings.TrimPrefix(v.Client.GitVersion, "v")}
	if v.Server != nil {
		// The API server's platform stands for the nodes' (clusters of
		// one architecture are the rule; a Pod on another node's gets the
		// plain path when the agent cannot run there).
		out.Server, out.Platform = strings.TrimPrefix(v.Server.GitVersion, "v"), v.Server.Platform
	}
	if err == nil && out.Server == "" {
		err = &runtime.EngineError{Kind: runtime.ErrUnreachable, Argv: r.argv("version", "-o", "json"), Stderr: "no server version"}
	}
	return out, err
}

// Info implements runtime.Runtime: the server version (one call). The
// rest of Info describes a local engine and stays empty.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return runtime.Info{}, err
	}
	return runtime.Info{ServerVersion: v.Server}, nil
}

// OCIRuntimes implements runtime.Runtime: the cluster's RuntimeClasses
// (one call). A Pod that names none runs under its node's default.
func (r *Runtime) OCIRuntimes(ctx context.Context) (runtime.OCIRuntimes, error) {
	args := []string{"get", "runtimeclasses", "-o", "json"}
	res, err := r.call(ctx, args, nil, r.timeout)
	if err != nil {
		return runtime.OCIRuntimes{}, err
	}
	o, err := ParseRuntimeClasses(res.Stdout)
	if err != nil {
		return o, fmt.Errorf("%w: %v", runtime.ErrBadOutput, err)
	}
	return o, nil
}

// Where reports the context and namespace kubectl works in (one `config
// view --minify`): the configured ones, else the kubeconfig's current
// context and its namespace ("default" when it names none).
func (r *Runtime) Where(ctx context.Context) (kubeContext, namespace string, err error) {
	res, err := r.call(ctx, []string{"config", "view", "--minify", "-o", "json"}, nil, r.timeout)
	if err != nil {
		return "", "", err
	}
	var cfg struct {
		Current  string `json:"current-context"`
		Contexts []struct {
			Name    string `json:"name"`
			Context struct {
				Namespace string `json:"namespace"`
			} `json:"context"`
		} `json:"contexts"`
	}
	if err := json.Unmarshal(res.Stdout, &cfg); err != nil {
		return "", "", fmt.Errorf("%w: kubectl config view: %v", runtime.ErrBadOutput, err)
	}
	kubeContext, namespace = r.target.Context, r.target.Namespace
	if kubeContext == "" {
		kubeContext = cfg.Current
	}
	for _, c := range cfg.Contexts {
		if c.Name == kubeContext && namespace == "" {
			namespace = c.Context.Namespace
		}
	}
	if namespace == "" {
		namespace = "default"
	}
	return kubeContext, namespace, nil
}

// Permissions are the verbs hsbx needs in its namespace, as `kubectl auth
// can-i` words them.
var Permissions = [][]string{
	{"create", "pods"}, {"get", "pods"}, {"delete", "pods"}, {"create", "pods", "--subresource=exec"},
}

// ClaimPermissions are the further verbs a persistent sandbox needs with
// kubernetes.storage_class set.
var ClaimPermissions = [][]string{
	{"create", "persistentvolumeclaims"}, {"get", "persistentvolumeclaims"}, {"delete", "persistentvolumeclaims"},
}

// CanI asks the cluster whether this user may do what args say (`kubectl
// auth can-i ARGS...`): "yes" exits 0, "no" exits 1.
func (r *Runtime) CanI(ctx context.Context, args ...string) (bool, error) {
	res, err := r.call(ctx, append([]string{"auth", "can-i"}, args...), nil, r.timeout)
	answer := strings.TrimSpace(string(res.Stdout))
	switch {
	case answer == "yes" && err == nil:
		return true, nil
	case strings.HasPrefix(answer, "no") && res.ExitCode == 1:
		return false, nil
	case err != nil:
		return false, err
	}
	return false, fmt.Errorf("%w: kubectl auth can-i printed %.100q", runtime.ErrBadOutput, answer)
}
