package kubectl

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hsbx/hsbx/runtime"
)

// ContainerName is the name of the sandbox's one container in its Pod.
const ContainerName = "sandbox"

// The Pod manifest hsbx sends (`kubectl create -f -`): only the fields it
// sets, so the cluster's defaults apply to the rest.
type podManifest struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   objectMeta  `json:"metadata"`
	Spec       podSpecJSON `json:"spec"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type podSpecJSON struct {
	RestartPolicy                 string          `json:"restartPolicy"`
	RuntimeClassName              string          `json:"runtimeClassName,omitempty"`
	ShareProcessNamespace         *bool           `json:"shareProcessNamespace,omitempty"`
	AutomountServiceAccountToken  *bool           `json:"automountServiceAccountToken"`
	EnableServiceLinks            *bool           `json:"enableServiceLinks"`
	TerminationGracePeriodSeconds *int64          `json:"terminationGracePeriodSeconds,omitempty"`
	SecurityContext               *podSecurity    `json:"securityContext,omitempty"`
	Containers                    []containerJSON `json:"containers"`
	Volumes                       []volumeJSON    `json:"volumes,omitempty"`
}

type podSecurity struct {
	SeccompProfile *seccompProfile `json:"seccompProfile,omitempty"`
}

type seccompProfile struct {
	Type string `json:"type"`
}

type containerJSON struct {
	Name            string             `json:"name"`
	Image           string             `json:"image"`
	ImagePullPolicy string             `json:"imagePullPolicy"`
	Command         []string           `json:"command,omitempty"`
	WorkingDir      string             `json:"workingDir,omitempty"`
	Env             []envVar           `json:"env,omitempty"`
	Resources       *resources         `json:"resources,omitempty"`
	SecurityContext *containerSecurity `json:"securityContext"`
	VolumeMounts    []volumeMount      `json:"volumeMounts,omitempty"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type resources struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

// What a sandbox's Pod asks the scheduler to reserve when it has limits.
const (
	RequestCPU    = "10m"
	RequestMemory = "64Mi"
)

type containerSecurity struct {
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation,omitempty"`
	Capabilities             *capabilities   `json:"capabilities,omitempty"`
	SeccompProfile           *seccompProfile `json:"seccompProfile,omitempty"`
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	RunAsGroup               *int64          `json:"runAsGroup,omitempty"`
}

type capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
}

type volumeJSON struct {
	Name                  string        `json:"name"`
	EmptyDir              *emptyDirJSON `json:"emptyDir,omitempty"`
	PersistentVolumeClaim *claimSource  `json:"persistentVolumeClaim,omitempty"`
}

type claimSource struct {
	ClaimName string `json:"claimName"`
}

type emptyDirJSON struct {
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// Manifest renders a RunSpec as the Pod hsbx creates. RunSpec.Args are the
// docker run flags sandbox's buildRun writes (hardening, limits, memory
// mounts, user); each is mapped to its Pod field, and a flag with no Pod
// equivalent (a host bind mount, --network, an extra_args flag hsbx does not
// know) is an error naming it, never silently dropped:
//
//   - --init: shareProcessNamespace (the pause container is PID 1 and reaps)
//   - -w: workingDir
//   - --cap-drop/--cap-add: capabilities.drop/add
//   - --security-opt no-new-privileges: allowPrivilegeEscalation false
//   - --tmpfs PATH:opts and --shm-size: memory-backed emptyDirs with the
//     size as sizeLimit (mount options such as noexec have no equivalent)
//   - --cpus, --memory: resources.limits (requests RequestCPU and
//     RequestMemory: a cap, not a reservation, as on docker)
//   - --user UID:GID: runAsUser/runAsGroup
//   - --network none: the label NetworkLabel=none, which Run's NetworkPolicy
//     (NetworkPolicyManifest) selects the Pod by, with all its labels
//   - --mount type=volume,source=CLAIM,target=PATH,volume-subpath=DIR: the
//     PersistentVolumeClaim CLAIM (one of RunSpec.Claims) mounted at PATH,
//     its directory DIR (a subPath)
//
// Always: seccomp RuntimeDefault, no service-account token, no service
// links, restartPolicy Never, imagePullPolicy IfNotPresent. Label values a
// label cannot hold are made valid (LabelValue) and kept exactly in an
// annotation of the same name. Env values go into the manifest, which
// kubectl reads from stdin: never on a command line.
func Manifest(s runtime.RunSpec) ([]byte, error) {
	if s.Image == "" {
		return nil, fmt.Errorf("run: no image given")
	}
	name := PodName(s.Name)
	if name == "" {
		return nil, fmt.Errorf("run: %q gives no valid Pod name", s.Name)
	}
	yes, no := true, false
	grace := int64(10)
	sec := &containerSecurity{SeccompProfile: &seccompProfile{Type: "RuntimeDefault"}}
	c := containerJSON{Name: ContainerName, Image: s.Image, ImagePullPolicy: "IfNotPresent", Command: s.Cmd, SecurityContext: sec}
	p := podManifest{APIVersion: "v1", Kind: "Pod", Metadata: objectMeta{Name: name},
		Spec: podSpecJSON{RestartPolicy: "Never", AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			TerminationGracePeriodSeconds: &grace, SecurityContext: &podSecurity{SeccompProfile: &seccompProfile{Type: "RuntimeDefault"}}}}
	meta, err := metadata(name, s.Labels)
	if err != nil {
		return nil, err
	}
	p.Metadata = meta
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		c.Env = append(c.Env, envVar{Name: k, Value: s.Env[k]})
	}
	memDir := func(path, size string) error {
		q, err := Quantity(size)
		if err != nil {
			return err
		}
		vn := fmt.Sprintf("mem-%d", len(p.Spec.Volumes))
		p.Spec.Volumes = append(p.Spec.Volumes, volumeJSON{Name: vn, EmptyDir: &emptyDirJSON{Medium: "Memory", SizeLimit: q}})
		c.VolumeMounts = append(c.VolumeMounts, volumeMount{Name: vn, MountPath: path})
		return nil
	}
	claimVolumes := map[string]string{} // claim name → Pod volume name
	claimMount := func(v string) error {
		m, err := parseMount(v)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(s.Claims, func(c runtime.Claim) bool { return c.Name == m.source }) {
			return fmt.Errorf("%w: --mount %s: the volume %q is not one of the sandbox's claims", runtime.ErrUnsupported, v, m.source)
		}
		vn, ok := claimVolumes[m.source]
		if !ok {
			vn = fmt.Sprintf("claim-%d", len(claimVolumes))
			claimVolumes[m.source] = vn
			p.Spec.Volumes = append(p.Spec.Volumes, volumeJSON{Name: vn, PersistentVolumeClaim: &claimSource{ClaimName: PodName(m.source)}})
		}
		c.VolumeMounts = append(c.VolumeMounts, volumeMount{Name: vn, MountPath: m.target, SubPath: m.subPath})
		return nil
	}
	limits := map[string]string{}
	noNetwork := false
	args := s.Args
	for i := 0; i < len(args); i++ {
		flag, val, hasVal := strings.Cut(args[i], "=")
		if !strings.HasPrefix(flag, "--") {
			hasVal = false
			flag, val = args[i], ""
		}
		needs := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("run flag %s has no value", flag)
			}
			i++
			return args[i], nil
		}
		var err error
		switch flag {
		case "--init":
			p.Spec.ShareProcessNamespace = &yes
		case "-w", "--workdir":
			c.WorkingDir, err = needs()
		case "--network", "--net":
			var v string
			if v, err = needs(); err == nil {
				if v != "none" {
					err = unsupported(flag + " " + v)
				} else {
					noNetwork = true
				}
			}
		case "--runtime": // oci_runtime: the RuntimeClass
			p.Spec.RuntimeClassName, err = needs()
		case "--cap-drop", "--cap-add":
			var v string
			if v, err = needs(); err == nil {
				if sec.Capabilities == nil {
					sec.Capabilities = &capabilities{}
				}
				if flag == "--cap-drop" {
					sec.Capabilities.Drop = append(sec.Capabilities.Drop, strings.ToUpper(v))
				} else {
					sec.Capabilities.Add = append(sec.Capabilities.Add, strings.ToUpper(strings.TrimPrefix(v, "CAP_")))
				}
			}
		case "--security-opt":
			var v string
			if v, err = needs(); err == nil {
				if v != "no-new-privileges" && v != "no-new-privileges:true" {
					err = unsupported(flag + " " + v)
				}
				sec.AllowPrivilegeEscalation = &no
			}
		case "--tmpfs":
			var v string
			if v, err = needs(); err == nil {
				path, opts, _ := strings.Cut(v, ":")
				size := ""
				for o := range strings.SplitSeq(opts, ",") {
					if sz, ok := strings.CutPrefix(o, "size="); ok {
						size = sz
					}
				}
				err = memDir(path, size)
			}
		case "--shm-size":
			var v string
			if v, err = needs(); err == nil {
				err = memDir("/dev/shm", v)
			}
		case "--cpus":
			var v string
			if v, err = needs(); err == nil {
				if f, perr := strconv.ParseFloat(v, 64); perr != nil || f <= 0 {
					err = fmt.Errorf("--cpus %q is not a positive number", v)
				} else {
					limits["cpu"] = strconv.FormatInt(int64(f*1000+0.5), 10) + "m"
				}
			}
		case "--memory", "-m":
			var v, q string
			if v, err = needs(); err == nil {
				if q, err = Quantity(v); err == nil {
					limits["memory"] = q
				}
			}
		case "--user", "-u":
			var v string
			if v, err = needs(); err == nil {
				err = setUser(sec, v)
			}
		case "--mount":
			var v string
			if v, err = needs(); err == nil {
				err = claimMount(v)
			}
		default:
			err = unsupported(args[i])
		}
		if err != nil && !errors.Is(err, runtime.ErrUnsupported) {
			err = fmt.Errorf("run flag %s: %w", flag, err)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(limits) > 0 {
		// Limits are caps, as --cpus and --memory are on docker; without
		// requests Kubernetes would reserve the whole limit on the node
		// (a 2-core node then holds two default sandboxes). A small
		// request lets the scheduler pack sandboxes as one docker host
		// does.
		c.Resources = &resources{Limits: limits, Requests: map[string]string{}}
		if _, ok := limits["cpu"]; ok {
			c.Resources.Requests["cpu"] = RequestCPU
		}
		if _, ok := limits["memory"]; ok {
			c.Resources.Requests["memory"] = RequestMemory
		}
	}
	if noNetwork {
		p.Metadata.Labels[NetworkLabel] = "none"
	}
	p.Spec.Containers = []containerJSON{c}
	return json.Marshal(p)
}

// NetworkLabel marks a Pod made with --network none (network = off or
// allow): Run gives it a NetworkPolicy that denies it every connection in
// and out, and Inspect reports its NetworkMode as "none".
const NetworkLabel = "hsbx.network"

// NetworkPolicyManifest is the NetworkPolicy that keeps the Pod made from
// podJSON (Manifest's output) off the network: every connection in and
// out denied (policyTypes Ingress and Egress with no rules), selecting the
// Pod by all its labels (the creation's nonce among them, so no other Pod
// is selected), owned by the Pod (uid) so that the cluster deletes it with
// the Pod, and named from the Pod with a suffix the API server makes
// unique (a policy of an earlier Pod of that name may not be gone yet).
func NetworkPolicyManifest(podJSON []byte, uid string) ([]byte, error) {
	var p podManifest
	if err := json.Unmarshal(podJSON, &p); err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	prefix := p.Metadata.Name
	if len(prefix) > 200 {
		prefix = strings.TrimRight(prefix[:200], "-.")
	}
	type owner struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		UID        string `json:"uid"`
	}
	np := map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"generateName": prefix + "-deny-", "labels": p.Metadata.Labels,
			"ownerReferences": []owner{{APIVersion: "v1", Kind: "Pod", Name: p.Metadata.Name, UID: uid}}},
		"spec": map[string]any{"podSelector": map[string]any{"matchLabels": p.Metadata.Labels},
			"policyTypes": []string{"Ingress", "Egress"}},
	}
	return json.Marshal(np)
}

// metadata is an object's name, labels and annotations: label values a
// label cannot hold are made valid (LabelValue) and kept exactly in an
// annotation of the same name.
func metadata(name string, ls map[string]string) (objectMeta, error) {
	m := objectMeta{Name: name}
	labels, annotations := map[string]string{}, map[string]string{}
	for k, v := range ls {
		if !utf8.ValidString(v) {
			return m, fmt.Errorf("label %s: the value %q is not valid UTF-8, which a Kubernetes annotation cannot keep exactly", k, v)
		}
		lv := LabelValue(v)
		labels[k] = lv
		if lv != v {
			annotations[k] = v
		}
	}
	m.Labels = labels
	if len(annotations) > 0 {
		m.Annotations = annotations
	}
	return m, nil
}

type mountSpec struct{ source, target, subPath string }

// parseMount reads docker's --mount of a named volume:
// type=volume,source=NAME,target=PATH[,volume-subpath=DIR] (src, dst and
// destination are docker's other spellings). Any other type or option has
// no Pod equivalent hsbx maps.
func parseMount(v string) (mountSpec, error) {
	var m mountSpec
	typ := ""
	for f := range strings.SplitSeq(v, ",") {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "type":
			typ = val
		case "source", "src":
			m.source = val
		case "target", "dst", "destination":
			m.target = val
		case "volume-subpath":
			m.subPath = val
		default:
			return m, fmt.Errorf("%w: --mount option %q has no Pod equivalent", runtime.ErrUnsupported, k)
		}
	}
	switch {
	case typ != "volume":
		return m, fmt.Errorf("%w: --mount type %q: a Pod mounts only claims (type=volume)", runtime.ErrUnsupported, typ)
	case m.source == "" || !strings.HasPrefix(m.target, "/"):
		return m, fmt.Errorf("--mount %q: want source=CLAIM,target=/PATH", v)
	case strings.HasPrefix(m.subPath, "/") || slices.Contains(strings.Split(m.subPath, "/"), ".."):
		return m, fmt.Errorf("--mount %q: volume-subpath must be a relative path without a .. element", v)
	}
	return m, nil
}

func unsupported(flag string) error {
	return fmt.Errorf("%w: the run flag %s has no Kubernetes equivalent (a Pod cannot bind host paths, and extra_args take docker/podman flags); remove it for the kubectl runtime", runtime.ErrUnsupported, flag)
}

func setUser(sec *containerSecurity, v string) error {
	u, g, hasG := strings.Cut(v, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uid < 0 {
		return fmt.Errorf("%w: --user %q: a Pod takes a numeric uid[:gid]", runtime.ErrUnsupported, v)
	}
	sec.RunAsUser = &uid
	if hasG {
		gid, err := strconv.ParseInt(g, 10, 64)
		if err != nil || gid < 0 {
			return fmt.Errorf("%w: --user %q: a Pod takes a numeric uid[:gid]", runtime.ErrUnsupported, v)
		}
		sec.RunAsGroup = &gid
	}
	return nil
}

// Quantity turns a docker size (512m, 1g, 64k, 1024, 1.5g) into a
// Kubernetes quantity (512Mi, 1Gi, 64Ki, 1024). "" stays "" (no limit).
func Quantity(size string) (string, error) {
	if size == "" {
		return "", nil
	}
	s := strings.ToLower(strings.TrimSpace(size))
	s = strings.TrimSuffix(s, "b")
	unit := ""
	switch {
	case strings.HasSuffix(s, "k"):
		unit = "Ki"
	case strings.HasSuffix(s, "m"):
		unit = "Mi"
	case strings.HasSuffix(s, "g"):
		unit = "Gi"
	case strings.HasSuffix(s, "t"):
		unit = "Ti"
	}
	if unit != "" {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil || n == 0 {
		return "", fmt.Errorf("size %q: want a whole number with an optional k, m, g or t suffix", size)
	}
	return strconv.FormatUint(n, 10) + unit, nil
}

// PodName makes a container name a valid Pod name (a DNS-1123 subdomain):
// lower case, letters, digits, '-' and '.', starting and ending with a
// letter or digit, at most 253 characters. hsbx's names differ in a hash
// of the key, so the mapping keeps them apart.
func PodName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	out := string(b)
	if len(out) > 253 {
		out = out[:253]
	}
	return strings.Trim(out, "-.")
}
