package fakebin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/fakebin"
	"github.com/hsbx/hsbx/runtime/kubectl"
)

// capPod is the Pod scripts/capture-kube.sh creates (the fake reads only
// what hsbx's kubectl runtime reads back).
func capPod(name, cmd, image string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","labels":{"hermes-agent":"1","hsbx.profile":"cap","hsbx.task":"` + name + `"},
 "annotations":{"hsbx.key":"cap/` + name + `"}},"spec":{"containers":[{"name":"sandbox","image":"` + image + `","command":` + cmd + `,"workingDir":"/"}]}}`
}

// TestFakeKubectlMatchesCaptures replays scripts/capture-kube.sh's calls,
// in its order, against the fake kubectl and compares each with what the
// real kubectl v1.34 printed (testdata/kube): the exit status, and what
// hsbx reads from the output (the Pods parsed, the exec status and error
// class, the error class of a failure, the exec streams).
func TestFakeKubectlMatchesCaptures(t *testing.T) {
	dir := filepath.Join("..", "testdata", "kube", "kubectl-v1."+strings.TrimPrefix(fakebin.KubectlVersion, "v1."))
	state := t.TempDir()
	stdin := map[string]string{
		"create_run":       capPod("cap-run", `["sleep","infinity"]`, "hsbx-busybox"),
		"create_exists":    capPod("cap-run", `["sleep","infinity"]`, "hsbx-busybox"),
		"create_done":      capPod("cap-done", `["true"]`, "hsbx-busybox"),
		"create_bad_image": capPod("cap-bad-image", `["true"]`, "nosuchimage:1"),
		"create_unknown_runtime_class": strings.Replace(capPod("cap-no-class", `["true"]`, "hsbx-busybox"),
			`"spec":{`, `"spec":{"runtimeClassName":"hsbx-no-such-class",`, 1),
		"exec_stdin":             "stdin-ok\n",
		"claim_create":           capClaim,
		"claim_create_exists":    capClaim,
		"claim_delete_other_uid": `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}`,
	}
	order := []string{"version", "version_client", "auth_can_i", "auth_can_i_exec", "current_context", "get_none",
		"create_run", "create_exists", "create_done", "create_bad_image", "create_unknown_runtime_class", "get_runtimeclasses", "get_one", "get_missing", "get_label",
		"exec_ok", "exec_exit3", "exec_not_found", "exec_missing", "exec_done", "exec_words", "exec_stdin",
		"create_network_policy", "delete_missing", "delete_run", "delete_done",
		"class_ok", "class_missing", "claim_get_none", "claim_create", "claim_create_exists", "claim_get", "claim_delete_other_uid", "claim_delete",
		"down_no_config", "down_get"}
	for _, name := range order {
		read := func(ext string) string {
			b, err := os.ReadFile(filepath.Join(dir, name+"."+ext))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return string(b)
		}
		argv := strings.Split(strings.TrimSuffix(read("argv"), "\n"), "\n")
		wantCode, _ := strconv.Atoi(strings.TrimSpace(read("exit")))
		wantOut, wantErr := read("stdout"), read("stderr")
		env := []string{"FAKEENGINE_DIR=" + state, "FAKEENGINE_EXEC_INPROCESS=1"}
		if strings.HasPrefix(name, "down_") {
			env = append(env, "FAKEENGINE_DOWN=1")
		}
		if name == "claim_delete" { // the precondition is the fake claim's own uid
			var got bytes.Buffer
			fakebin.Run("kubectl", []string{"get", "persistentvolumeclaims", "-o", "json", "cap-claim"}, env, nil, &got, &bytes.Buffer{})
			uid := regexp.MustCompile(`"uid": "([^"]+)"`).FindStringSubmatch(got.String())
			if uid == nil {
				t.Fatalf("claim_delete: no claim in the fake: %s", got.String())
			}
			stdin[name] = `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"` + uid[1] + `"}}`
		}
		if name == "create_network_policy" { // owned by the fake's cap-run
			var got bytes.Buffer
			fakebin.Run("kubectl", []string{"get", "pod", "-o", "json", "cap-run"}, env, nil, &got, &bytes.Buffer{})
			uid := regexp.MustCompile(`"uid": "([^"]+)"`).FindStringSubmatch(got.String())
			if uid == nil {
				t.Fatalf("create_network_policy: no cap-run in the fake: %s", got.String())
			}
			stdin[name] = `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"generateName":"cap-run-deny-","labels":{"hsbx.profile":"cap","hsbx.task":"cap-run"},
 "ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"cap-run","uid":"` + uid[1] + `"}]},
 "spec":{"podSelector":{"matchLabels":{"hsbx.profile":"cap","hsbx.task":"cap-run"}},"policyTypes":["Ingress","Egress"]}}`
		}
		var out, errb bytes.Buffer
		code := fakebin.Run("kubectl", argv, env, strings.NewReader(stdin[name]), &out, &errb)
		if code != wantCode {
			t.Errorf("%s: exit %d, real kubectl %d\nfake stderr: %s", name, code, wantCode, errb.String())
			continue
		}
		switch {
		case strings.HasPrefix(name, "exec_"):
			fc, ferr := kubectl.ExecStatus(code, errb.String())
			rc, rerr := kubectl.ExecStatus(wantCode, wantErr)
			if fc != rc || !errors.Is(ferr, rerr) || out.String() != wantOut {
				t.Errorf("%s: fake status %d %v stdout %q, real %d %v %q", name, fc, ferr, out.String(), rc, rerr, wantOut)
			}
			last := func(s string) string { // the last line, exec ids masked
				s = strings.TrimSpace(s)
				return hexID.ReplaceAllString(s[strings.LastIndexByte(s, '\n')+1:], "ID")
			}
			if code != 0 && last(errb.String()) != last(wantErr) {
				t.Errorf("%s: fake stderr ends %q, real %q", name, last(errb.String()), last(wantErr))
			}
		case code != 0:
			if f, r := kubectl.Classify(code, errb.String()), kubectl.Classify(wantCode, wantErr); !errors.Is(f, r) {
				t.Errorf("%s: fake error class %v, real %v\nfake: %s\nreal: %s", name, f, r, errb.String(), wantErr)
			}
			if name == "claim_delete_other_uid" && hexUID.ReplaceAllString(errb.String(), "UID") != hexUID.ReplaceAllString(wantErr, "UID") {
				t.Errorf("%s: fake %q, real %q", name, errb.String(), wantErr)
			}
		case strings.HasPrefix(name, "claim_"):
			if got, want := claimView(t, out.Bytes()), claimView(t, []byte(wantOut)); got != want {
				t.Errorf("%s: fake claim %s, real %s", name, got, want)
			}
		case strings.HasPrefix(name, "class_"):
			if out.String() != wantOut {
				t.Errorf("%s: fake %q, real %q", name, out.String(), wantOut)
			}
		case name == "create_network_policy":
			if got, want := policyView(t, out.Bytes()), policyView(t, []byte(wantOut)); got != want {
				t.Errorf("%s: fake policy %s, real %s", name, got, want)
			}
		case strings.HasPrefix(name, "get_") || strings.HasPrefix(name, "create_"):
			if !samePods(t, out.Bytes(), []byte(wantOut)) {
				t.Errorf("%s: fake pods differ from real:\n%s", name, out.String())
			}
		case name == "auth_can_i" || name == "auth_can_i_exec" || strings.HasPrefix(name, "delete_"):
			if out.String() != wantOut {
				t.Errorf("%s: fake %q, real %q", name, out.String(), wantOut)
			}
		}
	}
}

var (
	hexID  = regexp.MustCompile(`[0-9a-f]{64}`)
	hexUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
)

// policyView is what hsbx reads of a created NetworkPolicy: its kind, a
// name made from generateName, its labels and one owner, its selector and
// types.
func policyView(t *testing.T, out []byte) string {
	var p struct {
		Kind     string
		Metadata struct {
			Name, GenerateName string
			Labels             map[string]string
			OwnerReferences    []struct{ Kind, Name, UID string }
		}
		Spec json.RawMessage
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("policy: %v: %s", err, out)
	}
	named := strings.HasPrefix(p.Metadata.Name, p.Metadata.GenerateName) && len(p.Metadata.Name) == len(p.Metadata.GenerateName)+5
	owners := len(p.Metadata.OwnerReferences) == 1 && hexUID.MatchString(p.Metadata.OwnerReferences[0].UID)
	var spec any
	_ = json.Unmarshal(p.Spec, &spec)
	sb, _ := json.Marshal(spec)
	return fmt.Sprintf("%s named=%v labels=%v owner=%v %s", p.Kind, named, p.Metadata.Labels, owners, sb)
}

// capClaim is the claim scripts/capture-kube.sh creates.
const capClaim = `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"cap-claim","labels":{"hsbx.profile":"cap","hsbx.task":"cap-claim"},"annotations":{"hsbx.key":"cap/cap-claim"}},
 "spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"hsbx-local","resources":{"requests":{"storage":"1Gi"}}}}`

// claimView is what hsbx reads of a claim: kind, name, labels and
// annotations it set, class, whether it is being deleted ("" for no
// output).
func claimView(t *testing.T, out []byte) string {
	if len(bytes.TrimSpace(out)) == 0 {
		return ""
	}
	var c struct {
		Kind     string
		Metadata struct {
			Name              string
			UID               string
			Labels            map[string]string
			Annotations       map[string]string
			DeletionTimestamp string
		}
		Spec struct{ StorageClassName string }
	}
	if err := json.Unmarshal(out, &c); err != nil {
		t.Errorf("claim: %v in %s", err, out)
		return "?"
	}
	return fmt.Sprintf("%s %s uid:%v labels:%v key:%q class:%s deleting:%v", c.Kind, c.Metadata.Name, c.Metadata.UID != "", c.Metadata.Labels,
		c.Metadata.Annotations["hsbx.key"], c.Spec.StorageClassName, c.Metadata.DeletionTimestamp != "")
}

// samePods compares what ParsePods reads, less ids and times.
func samePods(t *testing.T, fake, captured []byte) bool {
	f, ferr := kubectl.ParsePods(fake)
	r, rerr := kubectl.ParsePods(captured)
	if (ferr != nil) != (rerr != nil) || len(f) != len(r) {
		t.Logf("fake %d pods (%v), real %d (%v)", len(f), ferr, len(r), rerr)
		return false
	}
	for i := range f {
		if f[i].Name != r[i].Name || f[i].State != r[i].State || !reflect.DeepEqual(f[i].Labels, r[i].Labels) ||
			f[i].Created.IsZero() != r[i].Created.IsZero() || f[i].Started.IsZero() != r[i].Started.IsZero() {
			t.Logf("fake %+v\nreal %+v", f[i], r[i])
			return false
		}
	}
	return true
}
