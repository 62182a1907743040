package kubectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
)

// The run flags sandbox's buildRun writes, as a Pod.
func TestManifestMapsHardening(t *testing.T) {
	spec := runtime.RunSpec{
		Name:   "hsbx-Default-My_Task-abc",
		Labels: map[string]string{"hsbx.task": "my task/with,commas=and=equals", "hermes-agent": "1"},
		Env:    map[string]string{"SECRET": "s3cr3t 'quoted'"},
		Args: []string{"--init", "-w", "/root", "--cap-drop", "ALL", "--cap-add", "DAC_OVERRIDE", "--cap-add", "CHOWN",
			"--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,nosuid,size=512m", "--tmpfs", "/run:rw,noexec,nosuid,size=64m",
			"--cpus", "1.5", "--memory", "5120m", "--shm-size", "1g", "--user", "1000:1001", "--runtime", "gvisor"},
		Image: "debian:bookworm-slim",
		Cmd:   []string{"sleep", "infinity"},
	}
	b, err := Manifest(spec)
	if err != nil {
		t.Fatal(err)
	}
	var p podManifest
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Name != "hsbx-default-my-task-abc" {
		t.Errorf("name %q: want a DNS-1123 name", p.Metadata.Name)
	}
	if p.Metadata.Labels["hsbx.task"] != "my_task_with_commas_and_equals" || p.Metadata.Annotations["hsbx.task"] != spec.Labels["hsbx.task"] {
		t.Errorf("labels %v annotations %v: want a valid label value and the exact one in an annotation", p.Metadata.Labels, p.Metadata.Annotations)
	}
	if _, ok := p.Metadata.Annotations["hermes-agent"]; ok {
		t.Errorf("a label value that is valid needs no annotation: %v", p.Metadata.Annotations)
	}
	s := p.Spec
	if s.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %q: want oci_runtime's --runtime", s.RuntimeClassName)
	}
	if s.RestartPolicy != "Never" || s.ShareProcessNamespace == nil || !*s.ShareProcessNamespace ||
		s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Errorf("pod spec %+v", s)
	}
	c := s.Containers[0]
	sec := c.SecurityContext
	if c.Name != ContainerName || c.WorkingDir != "/root" || c.ImagePullPolicy != "IfNotPresent" || strings.Join(c.Command, " ") != "sleep infinity" {
		t.Errorf("container %+v", c)
	}
	if sec.AllowPrivilegeEscalation == nil || *sec.AllowPrivilegeEscalation || sec.SeccompProfile.Type != "RuntimeDefault" ||
		strings.Join(sec.Capabilities.Drop, ",") != "ALL" || strings.Join(sec.Capabilities.Add, ",") != "DAC_OVERRIDE,CHOWN" ||
		*sec.RunAsUser != 1000 || *sec.RunAsGroup != 1001 {
		t.Errorf("security %+v caps %+v", sec, sec.Capabilities)
	}
	if c.Resources.Limits["cpu"] != "1500m" || c.Resources.Limits["memory"] != "5120Mi" ||
		c.Resources.Requests["cpu"] != RequestCPU || c.Resources.Requests["memory"] != RequestMemory {
		t.Errorf("limits %v requests %v: want the limits as caps and small requests", c.Resources.Limits, c.Resources.Requests)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range s.Volumes {
			if v.Name == m.Name && v.EmptyDir.Medium == "Memory" {
				mounts[m.MountPath] = v.EmptyDir.SizeLimit
			}
		}
	}
	if mounts["/tmp"] != "512Mi" || mounts["/run"] != "64Mi" || mounts["/dev/shm"] != "1Gi" || len(mounts) != 3 {
		t.Errorf("memory mounts %v", mounts)
	}
	if len(c.Env) != 1 || c.Env[0].Value != spec.Env["SECRET"] {
		t.Errorf("env %+v", c.Env)
	}
}

// What a Pod cannot do is an error naming it, never dropped.
func TestManifestRefusesWhatAPodCannotDo(t *testing.T) {
	for _, args := range [][]string{
		{"-v", "/host:/workspace"},
		{"--network", "bridge"},
		{"--pids-limit", "256"},
		{"--storage-opt", "size=1g"},
		{"--privileged"},
		{"--security-opt", "seccomp=unconfined"},
		{"--user", "nobody"},
		{"--memory", "lots"},
		{"--cpus", "-1"},
		{"--tmpfs"},
	} {
		_, err := Manifest(runtime.RunSpec{Name: "x", Image: "i", Args: args})
		if err == nil {
			t.Errorf("%q: no error", args)
			continue
		}
		if !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%q: error %q does not name the flag", args, err)
		}
	}
	if _, err := Manifest(runtime.RunSpec{Name: "x", Image: "i", Args: []string{"--network=host"}}); !errors.Is(err, runtime.ErrUnsupported) {
		t.Errorf("--network=host: %v", err)
	}
	if _, err := Manifest(runtime.RunSpec{Name: "___", Image: "i"}); err == nil {
		t.Error("a name with no valid character: no error")
	}
}

// --network none is a label the Pod's deny-all NetworkPolicy selects it
// by (with every other label, the creation's nonce among them), and the
// policy is owned by the Pod.
func TestManifestNoNetworkPolicy(t *testing.T) {
	labels := map[string]string{"hsbx.profile": "p", "hsbx.nonce": "0123abcd", "hsbx.config": strings.Repeat("x", 80)}
	pod, err := Manifest(runtime.RunSpec{Name: "hsbx-p-t-abc", Image: "i", Labels: labels, Args: []string{"--network", "none"}})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct{ Labels map[string]string }
	}
	if err := json.Unmarshal(pod, &p); err != nil || p.Metadata.Labels[NetworkLabel] != "none" {
		t.Fatalf("pod labels %v (%v), want %s=none", p.Metadata.Labels, err, NetworkLabel)
	}
	np, err := NetworkPolicyManifest(pod, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Kind     string
		Metadata struct {
			GenerateName    string
			OwnerReferences []struct{ APIVersion, Kind, Name, UID string }
		}
		Spec struct {
			PodSelector struct{ MatchLabels map[string]string }
			PolicyTypes []string
			Ingress     []any
			Egress      []any
		}
	}
	if err := json.Unmarshal(np, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "NetworkPolicy" || got.Metadata.GenerateName != "hsbx-p-t-abc-deny-" ||
		len(got.Metadata.OwnerReferences) != 1 || got.Metadata.OwnerReferences[0].UID != "uid-1" || got.Metadata.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("policy metadata: %s", np)
	}
	if !maps.Equal(got.Spec.PodSelector.MatchLabels, p.Metadata.Labels) || got.Spec.PodSelector.MatchLabels["hsbx.nonce"] != "0123abcd" {
		t.Errorf("selector %v, want the Pod's labels %v", got.Spec.PodSelector.MatchLabels, p.Metadata.Labels)
	}
	if !slices.Equal(got.Spec.PolicyTypes, []string{"Ingress", "Egress"}) || got.Spec.Ingress != nil || got.Spec.Egress != nil {
		t.Errorf("policy spec: %s (want both types, no rules: deny all)", np)
	}
	if without, _ := Manifest(runtime.RunSpec{Name: "x", Image: "i", Labels: labels}); bytes.Contains(without, []byte(NetworkLabel)) {
		t.Errorf("a networked Pod is labelled %s: %s", NetworkLabel, without)
	}
}

func TestQuantity(t *testing.T) {
	for in, want := range map[string]string{"512m": "512Mi", "1g": "1Gi", "64k": "64Ki", "1024": "1024", "2G": "2Gi", "10mb": "10Mi", "": ""} {
		if got, err := Quantity(in); err != nil || got != want {
			t.Errorf("Quantity(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"m", "1.5g", "-1m", "0", "1x", "99999999999999999999"} {
		if got, err := Quantity(bad); err == nil {
			t.Errorf("Quantity(%q) = %q, want an error", bad, got)
		}
	}
}

func TestPodName(t *testing.T) {
	for in, want := range map[string]string{
		"hsbx-default-task-abc": "hsbx-default-task-abc",
		"hsbx-My_Prof-T.x-abc":  "hsbx-my-prof-t.x-abc",
		"-_x_-":                 "x",
		"a/b c":                 "a-b-c",
	} {
		if got := PodName(in); got != want {
			t.Errorf("PodName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The hold writer drops kubectl's closing status line, and only that.
func TestTailHold(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		code   int
		want   string
	}{
		{"kubectl's line dropped", []string{"err\n", "command terminated with exit code 3\n"}, 3, "err\n"},
		{"split across writes", []string{"a\ncommand term", "inated with exit code 42\n"}, 42, "a\n"},
		{"the command's own words, then kubectl's", []string{"command terminated with exit code 3\n", "command terminated with exit code 3\n"}, 3, "command terminated with exit code 3\n"},
		{"a status that does not match is kept", []string{"command terminated with exit code 3\n"}, 4, "command terminated with exit code 3\n"},
		{"status 0 keeps it", []string{"command terminated with exit code 0\n"}, 0, "command terminated with exit code 0\n"},
		{"a prefix that diverges is released", []string{"command ter", "rific\n"}, 1, "command terrific\n"},
		{"mid-line words pass", []string{"x command terminated with exit code 1\n"}, 1, "x command terminated with exit code 1\n"},
		{"partial line at the end is kept", []string{"command"}, 1, "command"},
		{"no newline at the end", []string{"out", "put"}, 0, "output"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		h := &tailHold{dst: &b}
		for _, w := range c.writes {
			if n, err := h.Write([]byte(w)); err != nil || n != len(w) {
				t.Fatalf("%s: Write = %d, %v", c.name, n, err)
			}
		}
		h.finish(c.code)
		if b.String() != c.want {
			t.Errorf("%s: got %q, want %q", c.name, b.String(), c.want)
		}
	}
	// Output is not delayed: a line that cannot be kubectl's is written at once.
	var b bytes.Buffer
	h := &tailHold{dst: &b}
	_, _ = h.Write([]byte("progress 1\nprogress 2"))
	if b.String() != "progress 1\nprogress 2" {
		t.Errorf("held back %q", b.String())
	}
}

func FuzzTailHold(f *testing.F) {
	f.Add([]byte("a\ncommand terminated with exit code 3\n"), 3, 5)
	f.Add([]byte("command terminated with exit code 12"), 12, 1)
	f.Fuzz(func(t *testing.T, data []byte, code, split int) {
		var b bytes.Buffer
		h := &tailHold{dst: &b}
		if split < 0 || split > len(data) {
			split = len(data) / 2
		}
		_, _ = h.Write(data[:split])
		_, _ = h.Write(data[split:])
		h.finish(code)
		// Either everything comes through, or exactly kubectl's last line
		// for this status is missing.
		if b.String() == string(data) {
			return
		}
		line := terminatedPrefix + strconv.Itoa(code) + "\n"
		if code == 0 || !strings.HasSuffix(string(data), line) || b.String()+line != string(data) {
			t.Fatalf("in %q (status %d) out %q", data, code, b.String())
		}
		if rest := string(data[:len(data)-len(line)]); rest != "" && !strings.HasSuffix(rest, "\n") {
			t.Fatalf("dropped a line that did not start a line: %q", data)
		}
	})
}

// The exec wrapper, run by this host's sh: the environment arrives
// exactly (quotes, newlines, $(...), unicode), the working directory is
// entered, the command's stdin follows the environment, its status passes
// through, and an environment cut short is an error, not a command run
// without it.
func TestExecScript(t *testing.T) {
	if _, err := exec.LookPath("dd"); err != nil {
		t.Skip("no dd on this host")
	}
	env := map[string]string{"A": "it's $(touch /tmp/pwned) `x` \"q\" \\n", "B": "line1\nline2", "C": "ünï=,=", "D": ""}
	block := envScript(env)
	run := func(src string, stdin []byte, args ...string) (string, int) {
		cmd := exec.Command("/bin/sh", append([]string{"-c", execScript, "hsbx-exec", src}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	out, code := run(strconv.Itoa(len(block)), append(block, "stdin-rest"...), "/", "sh", "-c", `printf '%s|%s|%s|%s|' "$A" "$B" "$C" "${D-unset}"; pwd; cat; exit 7`)
	want := env["A"] + "|" + env["B"] + "|" + env["C"] + "||/\nstdin-rest"
	if out != want || code != 7 {
		t.Errorf("got %q (exit %d), want %q (exit 7)", out, code, want)
	}
	if out, code := run(strconv.Itoa(len(block)), block[:len(block)-3], "", "true"); code != 126 || !strings.Contains(out, "did not arrive") {
		t.Errorf("cut-short environment: %q exit %d, want 126 and a message", out, code)
	}
	if _, code := run("0", nil, "/nonexistent-dir", "true"); code != 126 {
		t.Errorf("missing workdir: exit %d, want 126", code)
	}
	if _, code := run("0", nil, "", "no-such-command-hsbx"); code != 127 {
		t.Errorf("missing command: exit %d, want 127", code)
	}
	// The marker alone rides on argv, a value the shell never evaluates,
	// and reaches the command's own environment (a fresh /bin/sh's).
	out, code = run("m"+"tok $(touch /tmp/pwned) `x`", nil, "/", "sh", "-c", `printf '%s|' "$`+runtime.ExecMarker+`"; tr '\0' '\n' < /proc/$$/environ | grep -c '^`+runtime.ExecMarker+`=tok '`)
	if want := "tok $(touch /tmp/pwned) `x`|1\n"; out != want || code != 0 {
		t.Errorf("marker on argv: %q exit %d, want %q", out, code, want)
	}
}

// Whatever the flags, Manifest gives valid JSON for a valid Pod name or
// an error; Quantity and PodName give valid values.
func FuzzManifest(f *testing.F) {
	f.Add("hsbx-a_B", "--tmpfs", "/tmp:size=1g", "--memory", "5g", "v/a,l=ue")
	f.Add("x", "--cpus", "0.001", "--user", "0:0", "")
	f.Fuzz(func(t *testing.T, name, f1, v1, f2, v2, label string) {
		b, err := Manifest(runtime.RunSpec{Name: name, Image: "i", Labels: map[string]string{"k": label}, Args: []string{f1, v1, f2, v2}})
		if err != nil {
			return
		}
		var p podManifest
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if n := p.Metadata.Name; n == "" || n != PodName(n) || len(n) > 253 {
			t.Fatalf("pod name %q", n)
		}
		if l := p.Metadata.Labels["k"]; l != LabelValue(l) || len(l) > 63 || (l != label && p.Metadata.Annotations["k"] != label) {
			t.Fatalf("label %q for %q, annotations %v", l, label, p.Metadata.Annotations)
		}
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir.SizeLimit != "" {
				if _, err := strconv.ParseUint(strings.TrimRight(v.EmptyDir.SizeLimit, "KMGTi"), 10, 64); err != nil {
					t.Fatalf("size limit %q", v.EmptyDir.SizeLimit)
				}
			}
		}
	})
}
