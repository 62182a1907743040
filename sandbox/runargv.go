package sandbox

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/runtime"
)

// The engine's run argv built from a Spec, the settings refused for what
// the engine lacks, and the parsing of extra_args and volumes it needs.

// extraNetwork finds a --network / --net flag in extra run args.
func extraNetwork(args []string) (string, bool) {
	if vs := flagValues(args, "--network", "--net"); len(vs) > 0 {
		return vs[0], true
	}
	return "", false
}

// flagValues are the values args give the named flags, in order, in both
// the "--flag value" and "--flag=value" forms; a flag last with no value
// gives "".
// moveEnvValues takes the environment values out of run flags: each
// "-e NAME=VALUE", "--env NAME=VALUE", "--env=NAME=VALUE" or
// "-eNAME=VALUE" is dropped from rest and its value put in vals (the
// caller passes NAME as the other variables are: -e NAME, the value in the
// client's environment). "-e NAME" alone, which reads the client's own
// NAME, stays.
func moveEnvValues(args []string) (rest []string, vals map[string]string) {
	vals = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		tokens, kv := []string{a}, ""
		switch {
		case (a == "-e" || a == "--env") && i+1 < len(args):
			tokens, kv = []string{a, args[i+1]}, args[i+1]
		case strings.HasPrefix(a, "--env="):
			kv = a[len("--env="):]
		case strings.HasPrefix(a, "-e") && !strings.HasPrefix(a, "--") && len(a) > 2:
			kv = a[2:]
		}
		i += len(tokens) - 1
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			vals[k] = v
			continue
		}
		rest = append(rest, tokens...) // no value here (-e NAME), or not a variable: as it was
	}
	return rest, vals
}

func flagValues(args []string, names ...string) []string {
	var vs []string
	for i := 0; i < len(args); i++ {
		for _, f := range names {
			if args[i] == f {
				v := ""
				if i+1 < len(args) {
					i++
					v = args[i]
				}
				vs = append(vs, v)
				break
			}
			if v, ok := strings.CutPrefix(args[i], f+"="); ok {
				vs = append(vs, v)
				break
			}
		}
	}
	return vs
}

// Volume is one parsed "host:container[:mode]".
type Volume struct {
	Host, Container string
	ReadOnly        bool
}

// ParseVolume parses and checks a volume entry.
func ParseVolume(v string) (Volume, error) {
	bad := func(why string) (Volume, error) {
		return Volume{}, &SpecError{"volumes", fmt.Sprintf("%q: %s; want HOST:CONTAINER[:ro|rw] with absolute paths", v, why)}
	}
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("wrong number of ':'-separated parts")
	}
	vol := Volume{Host: parts[0], Container: parts[1]}
	if !path.IsAbs(vol.Host) {
		return bad("host path is not absolute")
	}
	if !path.IsAbs(vol.Container) {
		return bad("container path is not absolute")
	}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			vol.ReadOnly = true
		case "rw":
		default:
			return bad(fmt.Sprintf("unknown mode %q", parts[2]))
		}
	}
	return vol, nil
}

// Env splits the sandbox environment into the names passed on argv ("-e
// NAME") and the values, which travel in the engine client's environment.
// Forwarded names missing from the caller's environment are left out.
func (s Spec) envValues(getenv func(string) (string, bool), caps runtime.Capabilities) (map[string]string, error) {
	vals := maps.Clone(s.Env)
	if vals == nil {
		vals = map[string]string{}
	}
	for _, k := range s.ForwardEnv {
		if v, ok := getenv(k); ok {
			vals[k] = v
		}
	}
	for k, v := range vals {
		if k == ExecIDVar {
			return nil, &SpecError{"env", ExecIDVar + " is reserved: hsbx marks each command's processes with it"}
		}
		if err := clientVarError("env", k, v, getenv, caps); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// buildRun turns the spec into the `run` of a detached, hardened sandbox:
// `run -d --init --name N <labels> -w <cwd> <hardening> <limits> <mounts>
// <env> <extra args> <image> sleep infinity`. It returns warnings for
// defaults left off because the host cannot apply them.
func buildRun(key Key, name string, s Spec, h engineHost, m mountPaths, getenv func(string) (string, bool)) (runtime.RunSpec, []string, error) {
	if err := s.Validate(); err != nil {
		return runtime.RunSpec{}, nil, err
	}
	env, err := s.envValues(getenv, h.Caps)
	if err != nil {
		return runtime.RunSpec{}, nil, err
	}
	// extra_args' -e/--env NAME=VALUE: the value joins the others in the
	// engine client's environment, never on its command line (ps shows it).
	extra, extraVals := moveEnvValues(s.ExtraArgs)
	for _, k := range slices.Sorted(maps.Keys(extraVals)) {
		if k == ExecIDVar {
			return runtime.RunSpec{}, nil, &SpecError{"extra_args", ExecIDVar + " is reserved: hsbx marks each command's processes with it"}
		}
		if err := clientVarError("extra_args", k, extraVals[k], getenv, h.Caps); err != nil {
			return runtime.RunSpec{}, nil, err
		}
		env[k] = extraVals[k] // last, as extra_args come last
	}
	warnings, err := lacking(s, h)
	if err != nil {
		return runtime.RunSpec{}, nil, err
	}
	persistent := s.Persistent
	var claims []runtime.Claim
	if !h.Caps.HostDirs {
		if persistent && s.StorageClass != "" {
			if m.Claim == "" {
				return runtime.RunSpec{}, nil, errors.New("persistent sandbox in a claim: no claim name")
			}
			claims = []runtime.Claim{{Name: m.Claim, Class: s.StorageClass, Size: s.StorageSize, Labels: key.Labels()}}
		}
		persistent = false // no host directories: the claim, or the sandbox's own memory
	}
	cwd := s.Cwd
	if s.MountCwdToWorkspace && !s.Explicit["cwd"] {
		cwd = "/workspace"
	}
	var args []string
	// An image with its own init (s6-overlay) must be PID 1 itself; snap
	// Docker's AppArmor breaks --init and no-new-privileges.
	if !s.ImageInit && !s.SnapCompat {
		args = append(args, "--init")
	}
	args = append(args, "-w", cwd,
		"--cap-drop", "ALL", "--cap-add", "DAC_OVERRIDE", "--cap-add", "CHOWN", "--cap-add", "FOWNER")
	if !s.RunAsHostUser {
		args = append(args, "--cap-add", "SETUID", "--cap-add", "SETGID")
	}
	if s.SnapCompat {
		warnings = append(warnings, "snap_compat is on: the sandbox runs without --init and without no-new-privileges (snap-packaged Docker's AppArmor profile breaks them)")
	} else {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	runMount := "/run:rw,noexec,nosuid,size=64m"
	if s.ImageInit {
		runMount = "/run:rw,exec,nosuid,size=64m" // s6 stage0 execs from /run
	}
	args = append(args,
		"--tmpfs", "/tmp:rw,nosuid,size=512m,mode=1777", // 1777: every user's and sticky, whatever an engine defaults to
		"--tmpfs", "/var/tmp:rw,noexec,nosuid,size=256m,mode=1777",
		"--tmpfs", runMount)

	// Limits. Rootless engines on cgroups v1 ignore them (podman only warns):
	// a user's limit is then an error, a default is left off with a warning.
	type limit struct {
		setting, flag, value string
		on                   bool
	}
	limits := []limit{
		{"pids_limit", "--pids-limit", strconv.FormatInt(s.enginePids(), 10), s.PidsLimit > 0},
		{"cpu", "--cpus", strconv.FormatFloat(s.CPU, 'f', -1, 64), s.CPU > 0},
		{"memory", "--memory", strconv.FormatInt(s.MemoryMB, 10) + "m", s.MemoryMB > 0},
	}
	var dropped []string
	for _, l := range limits {
		if !l.on {
			continue
		}
		if why, lacks := h.Caps.Lacks[runtime.PidsLimit]; lacks && l.setting == "pids_limit" {
			if s.Explicit[l.setting] {
				return runtime.RunSpec{}, nil, &SpecError{l.setting, why + "; set pids_limit = 0"}
			}
			warnings = append(warnings, fmt.Sprintf("%s: default pids_limit %s left off", why, l.value))
			continue
		}
		if h.limitsIgnored() {
			if s.Explicit[l.setting] {
				return runtime.RunSpec{}, nil, &SpecError{l.setting, fmt.Sprintf("this %s engine is rootless on cgroups v1 and cannot enforce %s %s; set %s = 0 or use a rootful engine or a cgroups v2 host", h.Dialect, l.flag, l.value, l.setting)}
			}
			dropped = append(dropped, l.flag+" "+l.value)
			continue
		}
		args = append(args, l.flag, l.value)
	}
	if len(dropped) > 0 {
		warnings = append(warnings, fmt.Sprintf("rootless %s on cgroups v1 cannot enforce limits: default %s left off", h.Dialect, strings.Join(dropped, ", ")))
	}
	if s.ShmSize != "" {
		args = append(args, "--shm-size", s.ShmSize)
	}
	if s.OCIRuntime != "" {
		args = append(args, "--runtime", s.OCIRuntime)
	}
	if !s.Network {
		switch mode, set := extraNetwork(s.ExtraArgs); {
		case !set:
			args = append(args, "--network", "none")
		case mode != "none":
			return runtime.RunSpec{}, nil, &SpecError{"network", fmt.Sprintf("network is off (air-gapped), but extra_args asks for --network %s; remove that from extra_args, or set network = on", mode)}
		} // extra_args already says --network none (the engine refuses two)
	}
	if s.DiskMB > 0 {
		if h.BackingFS != "" && !strings.EqualFold(h.BackingFS, "xfs") {
			return runtime.RunSpec{}, nil, &SpecError{"disk", fmt.Sprintf("a %d MB quota needs the engine's storage on XFS with project quotas (pquota); this engine's is on %s; set disk = 0", s.DiskMB, h.BackingFS)}
		}
		args = append(args, "--storage-opt", "size="+strconv.FormatInt(s.DiskMB, 10)+"m")
	}

	// Mounts.
	var volumes []runtime.Volume
	claimMount := func(dir, target string) string {
		return "type=volume,source=" + m.Claim + ",target=" + target + ",volume-subpath=" + dir
	}
	switch {
	case s.MountCwdToWorkspace:
		args = append(args, "-v", m.CallerCwd+":/workspace")
	case len(claims) > 0:
		args = append(args, "--mount", claimMount("workspace", "/workspace"))
	case persistent && len(m.Volumes) == 2:
		args = append(args, "--mount", "type=volume,source="+m.Volumes[0].Name+",target=/workspace")
		volumes = append(volumes, m.Volumes[0])
	case persistent:
		args = append(args, "-v", m.Workspace+":/workspace")
	default:
		args = append(args, "--tmpfs", "/workspace:rw,exec,size=1g")
	}
	switch {
	case len(claims) > 0:
		args = append(args, "--mount", claimMount("home", "/root"))
	case persistent && len(m.Volumes) == 2:
		args = append(args, "--mount", "type=volume,source="+m.Volumes[1].Name+",target=/root")
		volumes = append(volumes, m.Volumes[1])
	case persistent:
		args = append(args, "-v", m.Home+":/root")
	default:
		args = append(args, "--tmpfs", "/root:rw,exec,size=256m")
	}
	for _, v := range s.Volumes {
		args = append(args, "-v", v)
	}
	if s.RunAsHostUser {
		args = append(args, "--user", fmt.Sprintf("%d:%d", h.UID, h.GID))
	}
	args = append(args, extra...)

	labels := key.Labels()
	if s.Egress != nil {
		p := s.Egress.posture()
		labels[egress.Label] = p.Encode()
		labels[LabelEgress] = egressPosture(p, s.Egress.secretsSetting())
		for _, kv := range egress.ProxyEnv(p.Addr) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v // the relay is the only way out: a user's proxy is unreachable
		}
		if len(s.Egress.Secrets) > 0 {
			recs := s.Egress.secretRecords(nil)
			labels[egress.SecretsLabel] = egress.EncodeSecrets(recs)
			for _, r := range recs {
				env[r.Name] = r.Placeholder // never the value
			}
			trustEnv(env)
		}
	}
	if !s.PersistAcrossProcesses {
		labels[LabelEphemeral] = "1"
	}
	return runtime.RunSpec{
		Name: name, Labels: labels, Env: env, Args: args,
		Image: s.Image, Cmd: []string{"sleep", "infinity"}, Claims: claims, Volumes: volumes,
	}, warnings, nil
}

// lacking checks a spec against what the engine lacks (caps.Lacks) and
// whether it binds host directories: a setting that needs what is missing
// is an error when the user chose it and a warning when it is a default,
// as for a rootless engine. Without host directories /workspace and /root
// persist in a claim of the storage class (kubernetes.storage_class); with
// none set they live in the sandbox's memory.
func lacking(s Spec, h engineHost) (warnings []string, err error) {
	caps := h.Caps
	refuse := func(f runtime.Feature, on bool, setting, fix string) error {
		if why, lacks := caps.Lacks[f]; lacks && on {
			return &SpecError{setting, why + "; " + fix}
		}
		return nil
	}
	for _, e := range []error{
		refuse(runtime.NoNetwork, !s.Network, "network", "network = off and allow both rest on that; set network = on, or use docker or podman"),
		refuse(runtime.DiskQuota, s.DiskMB > 0, "disk", "set disk = 0"),
		refuse(runtime.RunFlags, len(s.ExtraArgs) > 0, "extra_args", fmt.Sprintf("remove %q", s.ExtraArgs)),
	} {
		if e != nil {
			return nil, e
		}
	}
	if caps.HostDirs {
		return nil, nil
	}
	switch {
	case len(s.Volumes) > 0:
		return nil, &SpecError{"volumes", fmt.Sprintf("%s cannot bind host paths into a sandbox; remove volumes", h.Dialect)}
	case s.MountCwdToWorkspace:
		return nil, &SpecError{"mount_cwd_to_workspace", fmt.Sprintf("%s cannot bind the caller's directory into a sandbox; set mount_cwd_to_workspace = false", h.Dialect)}
	case s.Persistent && s.StorageClass != "":
	case s.Persistent && s.Explicit["persistent"]:
		return nil, &SpecError{"persistent", "with no kubernetes.storage_class set, /workspace and /root live in the sandbox, so they would not survive it being deleted (stop, down, reap); set kubernetes.storage_class to a storage class of the cluster (`kubectl get storageclasses`), or persistent = false"}
	case s.Persistent:
		warnings = append(warnings, "with no kubernetes.storage_class set, /workspace and /root live in the sandbox (memory-backed) and are lost when it is deleted (stop, down, the reaper); set kubernetes.storage_class to keep them in a PersistentVolumeClaim")
	}
	return warnings, nil
}

// MemoryMounts are the sandbox paths this spec mounts as tmpfs: /tmp,
// /var/tmp and /run always, /workspace and /root when not persistent, and
// any --tmpfs in extra_args.
func (s Spec) MemoryMounts() []string {
	ms := []string{"/tmp", "/var/tmp", "/run"}
	if !s.Persistent {
		if !s.MountCwdToWorkspace {
			ms = append(ms, "/workspace")
		}
		ms = append(ms, "/root")
	}
	for _, v := range flagValues(s.ExtraArgs, "--tmpfs") {
		if m, _, _ := strings.Cut(v, ":"); m != "" {
			ms = append(ms, path.Clean("/"+m))
		}
	}
	return ms
}
