package kubectl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
)

// A persistent sandbox's mounts, as sandbox's buildRun writes them for a
// claim: one Pod volume for the claim, each directory a subPath.
func TestManifestMountsTheClaim(t *testing.T) {
	claim := runtime.Claim{Name: "hsbx-Default-T_1-abc", Class: "fast", Size: "10g", Labels: map[string]string{"hsbx.key": "abc"}}
	b, err := Manifest(runtime.RunSpec{Name: "hsbx-Default-T_1-abc", Image: "i", Claims: []runtime.Claim{claim}, Args: []string{
		"--mount", "type=volume,source=hsbx-Default-T_1-abc,target=/workspace,volume-subpath=workspace",
		"--mount=type=volume,src=hsbx-Default-T_1-abc,dst=/root,volume-subpath=home"}})
	if err != nil {
		t.Fatal(err)
	}
	var p podManifest
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim == nil ||
		p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "hsbx-default-t-1-abc" || p.Spec.Volumes[0].EmptyDir != nil {
		t.Fatalf("volumes %s: want one claim volume, the claim's name made valid as in ClaimManifest", b)
	}
	ms := p.Spec.Containers[0].VolumeMounts
	if len(ms) != 2 || ms[0] != (volumeMount{Name: p.Spec.Volumes[0].Name, MountPath: "/workspace", SubPath: "workspace"}) ||
		ms[1] != (volumeMount{Name: p.Spec.Volumes[0].Name, MountPath: "/root", SubPath: "home"}) {
		t.Errorf("mounts %+v", ms)
	}
	if strings.Contains(string(b), `"emptyDir":null`) {
		t.Errorf("manifest %s has a null emptyDir", b)
	}

	cm, err := ClaimManifest(claim)
	if err != nil {
		t.Fatal(err)
	}
	var c claimManifest
	if err := json.Unmarshal(cm, &c); err != nil {
		t.Fatal(err)
	}
	if c.Kind != "PersistentVolumeClaim" || c.Metadata.Name != "hsbx-default-t-1-abc" || c.Spec.StorageClassName != "fast" ||
		c.Spec.Resources.Requests["storage"] != "10Gi" || c.Metadata.Labels["hsbx.key"] != "abc" || strings.Join(c.Spec.AccessModes, ",") != "ReadWriteOnce" {
		t.Errorf("claim %s", cm)
	}
}

func TestManifestRefusesOtherMounts(t *testing.T) {
	claims := []runtime.Claim{{Name: "c", Class: "x", Size: "1g"}}
	for _, m := range []string{
		"type=bind,source=/etc,target=/etc",
		"type=tmpfs,target=/x",
		"type=volume,source=other,target=/x",      // not one of the claims
		"type=volume,source=c,target=relative",    // target not absolute
		"type=volume,source=c,target=/x,readonly", // an option hsbx does not map
		"type=volume,source=c,target=/x,volume-subpath=../up",
		"type=volume,source=c,target=/x,volume-subpath=/abs",
	} {
		if _, err := Manifest(runtime.RunSpec{Name: "x", Image: "i", Claims: claims, Args: []string{"--mount", m}}); err == nil {
			t.Errorf("--mount %s: no error", m)
		} else if !strings.Contains(err.Error(), "--mount") && !strings.Contains(err.Error(), "mount") {
			t.Errorf("--mount %s: error %q does not name the flag", m, err)
		}
	}
	for _, c := range []runtime.Claim{{Name: "c", Size: "1g"}, {Name: "c", Class: "x", Size: "lots"}, {Name: "c", Class: "x"}, {Name: "__", Class: "x", Size: "1g"}} {
		if _, err := ClaimManifest(c); err == nil {
			t.Errorf("claim %+v: no error", c)
		}
	}
}

// Which claims a sandbox may mount or remove: exactly its labels, the
// exact value from an annotation where a label could not hold it.
func TestClaimOwns(t *testing.T) {
	want := map[string]string{"hsbx.key": "abc", "hsbx.task": "a/b"}
	mk := func(labels, annotations map[string]string) claim {
		var c claim
		c.Metadata.Labels, c.Metadata.Annotations = labels, annotations
		return c
	}
	for _, tc := range []struct {
		c    claim
		owns bool
	}{
		{mk(map[string]string{"hsbx.key": "abc", "hsbx.task": "a_b"}, map[string]string{"hsbx.task": "a/b"}), true},
		{mk(map[string]string{"hsbx.key": "abc", "hsbx.task": "a_b"}, nil), false}, // a_b is another task
		{mk(map[string]string{"hsbx.key": "abd", "hsbx.task": "a_b"}, map[string]string{"hsbx.task": "a/b"}), false},
		{mk(nil, nil), false},
		{mk(map[string]string{"hsbx.task": "a_b"}, map[string]string{"hsbx.key": "abc", "hsbx.task": "a/b"}), false}, // an annotation alone is no label
	} {
		if got := tc.c.owns(want); got != tc.owns {
			t.Errorf("%+v: owns %v, want %v", tc.c.Metadata, got, tc.owns)
		}
	}
}

func TestKubectlLine(t *testing.T) {
	for line, want := range map[string]bool{
		`Error from server (NotFound): pods "x" not found`:                     true,
		`error: unable to upgrade connection: container not found ("sandbox")`: true,
		"The connection to the server 127.0.0.1:6443 was refused":              true,
		"error while loading shared libraries":                                 false,
		"grep: no such file":                                                   false,
		"command terminated with exit code 3":                                  false,
	} {
		if got := kubectlLine(line); got != want {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
}
