package kubectl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// sayStorage logs, when t failed, the cluster's claims and volumes and
// the log of scripts/kube.sh's provisioner (beside KUBECONFIG): a claim
// left unbound is the provisioner's doing or the cluster's.
func sayStorage(t *testing.T, bin string) {
	if !t.Failed() {
		return
	}
	out, _ := exec.Command(bin, "get", "persistentvolumeclaims,persistentvolumes", "-A", "-o", "wide").CombinedOutput()
	t.Logf("claims and volumes now:\n%s", out)
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Getenv("KUBECONFIG")), "logs", "provisioner.log")); err == nil {
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		t.Logf("the provisioner's log (its end):\n%s", b)
	}
}

// A claim outlives the Pods that mount it: files written through one Pod
// are there in the next; it is removed only with its labels, after its
// Pods; a claim of that name made by someone else is never mounted; a
// missing class and a Pod that cannot start leave nothing behind.
func TestClusterClaimOutlivesPods(t *testing.T) {
	tg, rt, c := open(t)
	if tg.StorageClass == "" {
		t.Skip("no storage class (HSBX_IT_KUBE_STORAGE_CLASS): scripts/kube.sh makes hsbx-local")
	}
	ctx := context.Background()
	t.Cleanup(func() { sayStorage(t, tg.Bin) })
	kube := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(tg.Bin, append([]string{"--namespace", tg.Kube.Namespace}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	labels := map[string]string{"hsbx.key": "k1", "hsbx.task": "t/with,commas=and=equals"}
	claim := runtime.Claim{Name: "keep", Class: tg.StorageClass, Size: "1g", Labels: labels}
	withClaim := func(name string, cl runtime.Claim) runtime.RunSpec {
		s := spec(tg, name)
		s.Claims = []runtime.Claim{cl}
		s.Args = append(s.Args, "--mount", "type=volume,source="+cl.Name+",target=/workspace,volume-subpath=workspace",
			"--mount", "type=volume,source="+cl.Name+",target=/root,volume-subpath=home")
		return s
	}
	sh := func(id, script string) string {
		var out, errb bytes.Buffer
		code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
		if err != nil || code != 0 {
			t.Fatalf("%s: exit %d %v %s", script, code, err, errb.String())
		}
		return out.String()
	}

	c.reset()
	first, err := rt.Run(ctx, withClaim("p1", claim))
	if err != nil {
		t.Fatal(err)
	}
	made := c.reset()
	if n := count(made, "get storageclasses"); n != 1 {
		t.Errorf("first Run: %d storage class lookups, want 1:\n%s", n, strings.Join(made, ""))
	}
	sh(first, "echo kept > /workspace/f && echo home > /root/g")
	if err := rt.Stop(ctx, first, time.Second); err != nil {
		t.Fatal(err)
	}
	second, err := rt.Run(ctx, withClaim("p2", claim))
	if err != nil {
		t.Fatal(err)
	}
	again := c.reset()
	if count(again, "get storageclasses") != 0 || count(again, "get persistentvolumeclaims") != 1 || count(again, "create -f -") != 1 {
		t.Errorf("Run with the claim there: want one claim get, no class lookup, one create:\n%s", strings.Join(again, ""))
	}
	if got := sh(second, "cat /workspace/f /root/g"); got != "kept\nhome\n" {
		t.Errorf("the next Pod reads %q, want the files the first wrote", got)
	}

	// Only with its labels, and only once no Pod uses it.
	if removed, err := rt.RemoveClaims(ctx, runtime.Claim{Name: "keep", Labels: map[string]string{"hsbx.key": "k2"}}); !errors.Is(err, runtime.ErrForeignClaim) || len(removed) != 0 {
		t.Errorf("RemoveClaims with other labels: %v %v", removed, err)
	}
	if err := rt.Stop(ctx, second, time.Second); err != nil {
		t.Fatal(err)
	}
	if removed, err := rt.RemoveClaims(ctx, claim); err != nil || strings.Join(removed, ",") != "keep" {
		t.Fatalf("RemoveClaims: %v %v", removed, err)
	}
	if out, _ := kube("", "get", "persistentvolumeclaims", "-o", "name"); strings.Contains(out, "keep") {
		t.Errorf("the claim is still there: %s", out)
	}
	if removed, err := rt.RemoveClaims(ctx, claim); err != nil || len(removed) != 0 {
		t.Errorf("RemoveClaims of a gone claim: %v %v", removed, err)
	}

	// A squatter's claim of that name is never mounted.
	squat := `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"sq","labels":{"hsbx.key":"other"}},
 "spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"` + tg.StorageClass + `","resources":{"requests":{"storage":"1Gi"}}}}`
	if out, err := kube(squat, "create", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := rt.Run(ctx, withClaim("p3", runtime.Claim{Name: "sq", Class: tg.StorageClass, Size: "1g", Labels: labels})); !errors.Is(err, runtime.ErrForeignClaim) {
		t.Errorf("Run with a squatted claim: %v", err)
	}

	// A missing class, and a Pod that cannot start: nothing left.
	if _, err := rt.Run(ctx, withClaim("p4", runtime.Claim{Name: "noclass", Class: "nosuchclass", Size: "1g", Labels: labels})); err == nil ||
		!strings.Contains(err.Error(), `storage class "nosuchclass" does not exist`) {
		t.Errorf("Run with a missing class: %v", err)
	}
	bad := withClaim("p5", runtime.Claim{Name: "badimage", Class: tg.StorageClass, Size: "1g", Labels: labels})
	bad.Image = "hsbx-no-such-image:1"
	if _, err := rt.Run(ctx, bad); !errors.Is(err, runtime.ErrImageNotFound) {
		t.Errorf("Run with a missing image: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := kube("", "get", "pods,persistentvolumeclaims", "-o", "name")
		if !strings.Contains(out, "p3") && !strings.Contains(out, "p4") && !strings.Contains(out, "p5") &&
			!strings.Contains(out, "noclass") && !strings.Contains(out, "badimage") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failed Runs left behind:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
