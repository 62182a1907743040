package sandbox

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/runtime"
)

// Spec is how a sandbox is made. The zero value is not useful; start from
// DefaultSpec. Settings named in Explicit were chosen by the user; the
// others are defaults, which hsbx may leave off (with a warning) where the
// engine cannot apply them, whereas a user's choice the engine cannot
// apply is an error.
type Spec struct {
	Image      string
	Cwd        string            // working directory in the sandbox
	Volumes    []string          // "host:container[:ro|rw]"
	Env        map[string]string // literal values
	ForwardEnv []string          // names whose values come from the caller's environment
	ExtraArgs  []string          // appended last to `run`
	CPU        float64           // cores; 0 = unlimited
	MemoryMB   int64             // 0 = unlimited
	DiskMB     int64             // 0 = no quota
	PidsLimit  int64             // 0 = unlimited
	ShmSize    string
	Network    bool
	// OCIRuntime is the OCI runtime the sandbox runs under (oci_runtime):
	// docker's and podman's --runtime (a name the engine knows; podman
	// also takes a path), a Pod's runtimeClassName. "" is the engine's
	// default. "runsc" is gVisor, a kernel of its own between the
	// sandbox's processes and the host's (docs/containment.md).
	OCIRuntime string
	// Egress, when set, is the network `allow`: the sandbox gets no
	// network interface but loopback (Network must be false), and its
	// processes reach only what Egress.Allow names, through hsbx's relay
	// (the proxy variables point at it; the policy is applied on the host).
	// Nil with Network false is `off`: nothing leaves. docs/containment.md.
	Egress *Egress

	RunAsHostUser          bool
	MountCwdToWorkspace    bool
	Persistent             bool // /workspace and /root kept per key (else tmpfs), in Storage
	PersistAcrossProcesses bool // one shared sandbox per key (else one per process)
	// Storage is where a persistent sandbox's /workspace and /root live
	// on docker and podman: StorageBind, StorageVolume, or StorageAuto
	// ("" too): bind where the engine runs on this machine, volume where
	// it runs on another (runtime.Location).
	Storage string

	// SandboxDir, when set, holds the persistent dirs in the Hermes
	// backend's layout (TERMINAL_SANDBOX_DIR: <dir>/docker/<task>/{home,
	// workspace}), so hsbx and Hermes see the same files for a task.
	// Empty: hsbx's own layout under its state dir.
	SandboxDir string
	// SnapCompat drops --init and no-new-privileges, which snap-packaged
	// Docker's AppArmor profile turns into exec failures (Hermes's
	// docker_snap_compat). It weakens the sandbox; hsbx warns when it is on.
	SnapCompat bool
	// ImageInit says the image brings its own init as PID 1 (s6-overlay's
	// /init): no --init, and /run mounted exec (s6 execs from it). hsbx
	// sets it from the image's entrypoint when it creates a sandbox.
	ImageInit bool

	// StorageClass (kubectl only): a persistent sandbox keeps /workspace
	// and /root in a PersistentVolumeClaim of this class, one per key,
	// of StorageSize. Empty: they live in the Pod (memory-backed) and do
	// not persist.
	StorageClass string
	StorageSize  string

	// OnDrift is what Ensure does with a sandbox made from other settings
	// than these (on_drift; "" = DriftWarn). It is not part of what a
	// sandbox is made from.
	OnDrift DriftPolicy

	// Explicit holds the names of settings the user chose ("cpu", "memory",
	// "pids_limit", "network", "disk", "cwd", ...).
	Explicit map[string]bool
}

// Storage values (Spec.Storage).
const (
	// StorageAuto is StorageBind on this machine's engine, StorageVolume
	// on a remote one.
	StorageAuto = "auto"
	// StorageBind keeps /workspace and /root in host directories under
	// the state dir (or SandboxDir), bound into the sandbox.
	StorageBind = "bind"
	// StorageVolume keeps them in two named volumes of the engine,
	// labelled with the key: no host path is bound.
	StorageVolume = "volume"
)

// Storages are the accepted values of storage, the default first.
func Storages() []string { return []string{StorageAuto, StorageBind, StorageVolume} }

// DefaultImage is the image used when none is configured: small, with a
// shell and a package manager.
const DefaultImage = "debian:bookworm-slim"

// DefaultStorageSize is the storage a sandbox's claim requests on
// Kubernetes (kubernetes.storage_size).
const DefaultStorageSize = "10g"

// DefaultSpec returns the defaults (those of the Hermes Docker backend).
func DefaultSpec() Spec {
	return Spec{
		Image: DefaultImage, Cwd: "/root", CPU: 1, MemoryMB: 5120, PidsLimit: 256, ShmSize: "1g",
		Network: true, Persistent: true, PersistAcrossProcesses: true, StorageSize: DefaultStorageSize,
	}
}

// engineHost is what the engine can do, from `info` (cached) and the caller.
type engineHost struct {
	Dialect   runtime.Dialect
	Caps      runtime.Capabilities `json:"-"` // the runtime's, never cached
	Rootless  bool
	CgroupV1  bool
	BackingFS string
	UID, GID  int
	// OCIRuntimes are the runtimes info named (none on Kubernetes).
	OCIRuntimes runtime.OCIRuntimes
	// NoNetwork is learned, not reported: creating a networked container
	// failed (rootless without /dev/net/tun), so defaults skip networking.
	NoNetwork bool
}

// limitsIgnored reports whether the engine silently ignores resource limits
// (rootless on cgroups v1: podman warns and carries on).
func (h engineHost) limitsIgnored() bool { return h.Rootless && h.CgroupV1 }

// mountPaths are the host paths a sandbox binds.
type mountPaths struct {
	Workspace, Home string // per-key persistent dirs (Spec.Persistent)
	Claim           string // the key's claim on Kubernetes (Spec.StorageClass)
	// Volumes are the key's named volumes for /workspace and /root, in
	// that order (storage = volume).
	Volumes   []runtime.Volume
	CallerCwd string // the caller's directory (Spec.MountCwdToWorkspace)
}

// SpecError marks a setting that is malformed or cannot be applied.
type SpecError struct {
	Setting string
	Msg     string
}

func (e *SpecError) Error() string { return e.Setting + ": " + e.Msg }

// validEnvName reports whether s is a shell variable name.
func validEnvName(s string) bool {
	for i, c := range s {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// validRuntimeName reports whether s can name an OCI runtime: printable,
// no spaces, not a flag.
func validRuntimeName(s string) bool {
	if strings.HasPrefix(s, "-") || len(s) > 255 {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || c > 0x7e {
			return false
		}
	}
	return true
}

// validSize reports whether s is a size like 64m or 1g.
func validSize(s string) bool {
	digits := strings.TrimRight(s, "bkmgBKMG")
	if len(s)-len(digits) > 1 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return digits != ""
}

// Sandbox env values travel in the engine client's environment (name-only
// "-e NAME" on argv), so a value for a variable the client itself reads
// would steer the client (runtime.ClientReads; the proxy variables when it
// talks to its engine over a network: a tcp:// or ssh:// endpoint, or a
// context hsbx cannot see into). The docker and podman runtime passes
// such names in an env file instead (runtime.Capabilities.EnvByFile),
// kubectl in band, so the value reaches the sandbox and never the client;
// only a value an env file cannot hold is refused (clientVarError).
func steersClient(name string, getenv func(string) (string, bool)) bool {
	if runtime.ClientReads(name) {
		return true
	}
	if runtime.ProxyVar(name) {
		for _, ep := range []string{"DOCKER_HOST", "CONTAINER_HOST"} {
			if v, _ := getenv(ep); v != "" && !strings.HasPrefix(v, "unix://") && !strings.HasPrefix(v, "npipe://") {
				return true
			}
		}
		for _, ctx := range []string{"DOCKER_CONTEXT", "CONTAINER_CONNECTION"} {
			if v, _ := getenv(ctx); v != "" && v != "default" {
				return true
			}
		}
	}
	return false
}

// clientVarError refuses a sandbox value for a variable that steers the
// engine client, unless it equals what the client already has or the
// runtime passes it another way (an env file that holds it, kubectl's
// manifest and stdin).
func clientVarError(setting, k, v string, getenv func(string) (string, bool), caps runtime.Capabilities) error {
	if cur, ok := getenv(k); !steersClient(k, getenv) || (ok && cur == v) || caps.ExecEnvInBand ||
		caps.EnvByFile && runtime.EnvFileSafe(v) {
		return nil
	}
	if caps.EnvByFile {
		return &SpecError{setting, fmt.Sprintf("%s is read by the engine client itself, so hsbx passes it in an env file, which cannot hold a line break, a NUL or non-UTF-8 bytes", k)}
	}
	return &SpecError{setting, fmt.Sprintf("%s is read by the engine client itself, which carries the sandbox's values, so it cannot differ here; set it in the command (-- env %s=... CMD)", k, k)}
}

// Validate checks the settings that need no engine to judge.
func (s Spec) Validate() error {
	if s.Egress != nil {
		if s.Network {
			return &SpecError{"network", "an egress allow-list is for network = allow, which has no network interface; set Network false (or Egress nil for network = on)"}
		}
		if _, err := egress.ParsePosture(egress.Posture{Addr: s.Egress.posture().Addr}.Encode()); err != nil {
			return &SpecError{"egress_allow", fmt.Sprintf("the relay's address %q is not a loopback host:port", s.Egress.Addr)}
		}
		if _, err := egress.ParseRules(s.Egress.Allow); err != nil {
			return &SpecError{"egress_allow", err.Error() + "; want host names (*.example.com), addresses or CIDRs, each with an optional :PORT"}
		}
		if err := s.Egress.checkSecrets(); err != nil {
			return err
		}
		if err := s.checkSecretsAgainstEnv(); err != nil {
			return err
		}
	}
	if strings.TrimSpace(s.Image) == "" {
		return &SpecError{"image", "empty; set an image reference"}
	}
	if !path.IsAbs(s.Cwd) {
		return &SpecError{"cwd", fmt.Sprintf("%q is not an absolute path in the sandbox", s.Cwd)}
	}
	for _, v := range s.Volumes {
		if _, err := ParseVolume(v); err != nil {
			return err
		}
	}
	for k := range s.Env {
		if !validEnvName(k) {
			return &SpecError{"env", fmt.Sprintf("%q is not a valid variable name", k)}
		}
	}
	for _, k := range s.ForwardEnv {
		if !validEnvName(k) {
			return &SpecError{"forward_env", fmt.Sprintf("%q is not a valid variable name", k)}
		}
	}
	switch {
	case s.CPU < 0 || s.CPU != s.CPU:
		return &SpecError{"cpu", fmt.Sprintf("%v: want cores >= 0 (0 = unlimited)", s.CPU)}
	case s.MemoryMB < 0:
		return &SpecError{"memory", fmt.Sprintf("%d: want MB >= 0 (0 = unlimited)", s.MemoryMB)}
	case s.DiskMB < 0:
		return &SpecError{"disk", fmt.Sprintf("%d: want MB >= 0 (0 = no quota)", s.DiskMB)}
	case s.PidsLimit < 0:
		return &SpecError{"pids_limit", fmt.Sprintf("%d: want >= 0 (0 = unlimited)", s.PidsLimit)}
	case s.ShmSize != "" && !validSize(s.ShmSize):
		return &SpecError{"shm_size", fmt.Sprintf("%q: want a size like 64m or 1g", s.ShmSize)}
	case s.StorageClass != "" && (s.StorageSize == "" || !validSize(s.StorageSize) || strings.Trim(s.StorageSize, "0bkmgBKMG") == ""):
		return &SpecError{"kubernetes.storage_size", fmt.Sprintf("%q: want a size like 10g", s.StorageSize)}
	case s.OCIRuntime != "" && !validRuntimeName(s.OCIRuntime):
		return &SpecError{"oci_runtime", fmt.Sprintf("%q: want a runtime's name (runsc) or, on podman, an absolute path (/usr/bin/runsc)", s.OCIRuntime)}
	case s.OCIRuntime != "" && len(flagValues(s.ExtraArgs, "--runtime")) > 0:
		return &SpecError{"oci_runtime", fmt.Sprintf("extra_args also says --runtime %s; set the runtime in one place (oci_runtime)", flagValues(s.ExtraArgs, "--runtime")[0])}
	case s.Storage != "" && !slices.Contains(Storages(), s.Storage):
		return &SpecError{"storage", fmt.Sprintf("%q: want one of %s", s.Storage, strings.Join(Storages(), ", "))}
	case s.OnDrift != "" && !slices.Contains(DriftPolicies(), string(s.OnDrift)):
		return &SpecError{"on_drift", fmt.Sprintf("%q: want one of %s", s.OnDrift, strings.Join(DriftPolicies(), ", "))}
	}
	return nil
}
