package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/sandbox"
)

// kubeBench measures the kubectl runtime on the cluster scripts/kube.sh
// set up (HSBX_IT_KUBECTL, KUBECONFIG, HSBX_IT_KUBE_IMAGE), in a namespace
// of its own: warm exec and up against the raw kubectl calls they replace,
// and the reaper against deleting Pods one by one.
func kubeBench(ctx context.Context) string {
	bin, image := os.Getenv("HSBX_IT_KUBECTL"), os.Getenv("HSBX_IT_KUBE_IMAGE")
	if bin == "" || image == "" || os.Getenv("KUBECONFIG") == "" {
		fail("no Kubernetes cluster configured: run `make kube` and source /tmp/hsbx-kube/env.sh (HSBX_IT_KUBECTL, KUBECONFIG)")
	}
	ns := fmt.Sprintf("hsbx-bench-%d", time.Now().UnixNano()%1e6)
	must(ctx, os.Environ(), bin, "create", "namespace", ns)
	defer run(ctx, os.Environ(), bin, "delete", "namespace", ns, "--wait=false")
	dir, _ := os.MkdirTemp("", "hsbx-bench-kube-")
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o700); err != nil {
		fail("%v", err)
	}
	e := &engine{name: "kubectl", bin: bin, image: image, profile: fmt.Sprintf("bench%d", time.Now().UnixNano()%1e6)}
	e.env = append(os.Environ(), "HSBX_RUNTIME="+bin, "HSBX_KUBE_NAMESPACE="+ns, "HSBX_PROFILE="+e.profile, "TERMINAL_DOCKER_IMAGE="+image,
		"XDG_STATE_HOME="+filepath.Join(dir, "state"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "HOME="+dir)
	kc := func(args ...string) []string { return append([]string{bin, "--namespace", ns}, args...) }
	var v struct {
		Server struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	_ = json.Unmarshal(must(ctx, os.Environ(), bin, "version", "-o", "json").Stdout, &v)

	var b strings.Builder
	fmt.Fprintf(&b, "## kubectl, Kubernetes %s (`%s`, a single-node cluster from scripts/kube.sh)\n\n", v.Server.GitVersion, bin)
	id := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "warm")...).Stdout))
	_, pod, _ := strings.Cut(id, "/")
	raw := func() time.Duration {
		return must(ctx, os.Environ(), kc("exec", pod, "-c", "sandbox", "--", "true")...).Elapsed
	}
	e.rawExec = "kubectl exec POD -- true"
	e.execIn = func(id string, argv ...string) []string {
		_, p, _ := strings.Cut(id, "/")
		return kc(append([]string{"exec", p, "-c", "sandbox", "--"}, argv...)...)
	}
	lib, libTimes := libraryExec(ctx, e, func(id string) []string {
		_, p, _ := strings.Cut(id, "/")
		return kc("exec", "-i", p, "-c", "sandbox", "--", "sh")
	})
	rows := warmExecRows(ctx, e, raw, libTimes)
	rows = append(rows, lib)
	rows = append(rows, sessionRows(ctx, e, kc("exec", pod, "-c", "sandbox", "--"), "kubectl exec POD --")...)
	var h, base time.Duration
	get := kc("get", "pods", "-o", "json", "-l", strings.Join(sandbox.Key{Profile: e.profile, Task: "warm"}.Filters(), ","))
	h, base = pair(ctx, e, *runs,
		func() time.Duration { return must(ctx, e.env, e.hsbx("up", "--task", "warm")...).Elapsed },
		func() time.Duration { return must(ctx, os.Environ(), get...).Elapsed })
	rows = append(rows, ratioRow("warm `up` vs one `kubectl get pods -l` with the same selector", h, base, 1.1, ""),
		bigOutput(ctx, e, append(kc("exec", pod, "-c", "sandbox", "--"), bigArgv()...)),
		bigInput(ctx, e, append(kc("exec", "-i", pod, "-c", "sandbox", "--"), inputArgv...)))
	rows = append(rows, smallCopies(ctx, e, "kubectl cp", func(src, dst string) []string {
		return kc("cp", "-c", "sandbox", strings.Replace(src, ":", pod+":", 1), strings.Replace(dst, ":", pod+":", 1))
	})...)
	rows = append(rows, forwardRows(ctx, e)...)
	rows = append(rows, egressRows(ctx, e)...)
	rows = append(rows, brokerRow(ctx, e)...)
	rows = append(rows, kubeOffUp(ctx, e))
	b.WriteString("| measurement | hsbx | baseline | ratio | target | |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.what, r.hsbx, r.base, r.ratio, r.target, r.verdict)
	}
	b.WriteString("\n")
	must(ctx, e.env, e.hsbx("down", "--task", "warm")...)
	b.WriteString(sessionScale(ctx, e))
	b.WriteString(kubeReap(ctx, e, kc))
	return b.String()
}

// finishedPods makes n Pods with our labels that exit at once and waits
// until the cluster reports them finished.
func finishedPods(ctx context.Context, e *engine, kc func(...string) []string, n int, tag string) {
	var list bytes.Buffer
	list.WriteString(`{"apiVersion":"v1","kind":"List","items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			list.WriteString(",")
		}
		fmt.Fprintf(&list, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s-%d","labels":{"hermes-agent":"1","hermes-profile":"%s","hermes-task-id":"%s-%d","hsbx.nonce":"%s%d"}},"spec":{"restartPolicy":"Never","automountServiceAccountToken":false,"containers":[{"name":"sandbox","image":"%s","imagePullPolicy":"IfNotPresent","command":["true"],"resources":{"requests":{"cpu":"1m"}}}]}}`,
			tag, i, e.profile, tag, i, tag, i, e.image)
	}
	list.WriteString("]}")
	if res, err := runner.Run(ctx, proc.Cmd{Argv: kc("create", "-f", "-"), Env: os.Environ(), Stdin: &list, Timeout: 2 * time.Minute}); err != nil || res.ExitCode != 0 {
		fail("creating %d pods: %v %s", n, err, res.Stderr)
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		out := string(must(ctx, os.Environ(), kc("get", "pods", "-l", "hermes-profile="+e.profile, "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}")...).Stdout)
		done := 0
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, tag+"-") && strings.Contains(line, "Succeeded") {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			fail("%d of %d pods finished", done, n)
		}
	}
	time.Sleep(1500 * time.Millisecond) // older than the 1s max age used below
}

func kubeReap(ctx context.Context, e *engine, kc func(...string) []string) string {
	var b strings.Builder
	b.WriteString("Reaper on Kubernetes: N finished Pods, swept by `hsbx reap --max-age 1s` and by the per-Pod way (one `kubectl get pods -l`, then `kubectl delete pod NAME` for each); one run each.\n\n")
	b.WriteString("| N | hsbx calls | hsbx time | baseline calls | baseline time | speed-up |\n|---|---|---|---|---|---|\n")
	n := 10
	if s := strings.Split(*scale, ","); len(s) > 0 {
		_, _ = fmt.Sscan(s[0], &n)
	}
	finishedPods(ctx, e, kc, n, "h")
	var debugLog bytes.Buffer
	res, err := runner.Run(ctx, proc.Cmd{Argv: e.hsbx("--log-level", "debug", "reap", "--max-age", "1s"), Env: e.env, Stderr: &debugLog, Timeout: 5 * time.Minute})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), fmt.Sprintf("reaped %d ", n)) {
		fail("hsbx reap: %v (exit %d): %s\n%s", err, res.ExitCode, res.Stdout, debugLog.String())
	}
	hcalls := strings.Count(debugLog.String(), `msg="engine call"`)
	finishedPods(ctx, e, kc, n, "b")
	start := time.Now()
	out := string(must(ctx, os.Environ(), kc("get", "pods", "-l", "hermes-profile="+e.profile, "-o", "name")...).Stdout)
	bcalls := 1
	for _, name := range strings.Fields(out) {
		bcalls++
		must(ctx, os.Environ(), kc("delete", name, "--grace-period=1")...)
	}
	bt := time.Since(start)
	fmt.Fprintf(&b, "| %d | %d | %s | %d | %s | %.1f× |\n\n", n, hcalls, ms(res.Elapsed), bcalls, ms(bt), float64(bt)/float64(res.Elapsed))
	return b.String()
}

// kubeOffUp is what network = off costs a cold `up` on a cluster: the
// Pod's NetworkPolicy, and the test from inside that it is enforced
// (docs/containment.md), against the same `up` with network = on.
func kubeOffUp(ctx context.Context, e *engine) row {
	n := max(*cold, 3)
	up := func(mode string) func() time.Duration {
		return func() time.Duration {
			d := must(ctx, e.env, e.hsbx("up", "--task", "cold-"+mode, "--network", mode)...).Elapsed
			must(ctx, e.env, e.hsbx("down", "--task", "cold-"+mode)...)
			return d
		}
	}
	h, b := pair(ctx, e, n, up("off"), up("on"))
	return row{"cold `up` with network = off (a NetworkPolicy, proved enforced from inside) vs network = on",
		ms(h), ms(b), fmt.Sprintf("%.3f", float64(h)/float64(b)), "—", fmt.Sprintf("+%.2f s", (h - b).Seconds())}
}
