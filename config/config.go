// Package config resolves hsbx's settings into one typed struct, with one
// precedence everywhere: flag > environment > file > default. The file is
// TOML (BurntSushi/toml); the environment variables are the Hermes agent
// framework's TERMINAL_* names (so users carry settings across) plus
// hsbx's own. Every value remembers where it came from, for `hsbx config`.
package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/sandbox"
)

// Setting is one resolved value and where it came from: "default",
// "file PATH:LINE", "env NAME" or "flag --NAME".
type Setting[T any] struct {
	Value  T
	Source string
}

// Explicit reports whether the user set it (anything but the default).
func (s Setting[T]) Explicit() bool { return s.Source != "default" }

// Settings is every setting hsbx reads.
type Settings struct {
	Runtime       Setting[string]        // runtime: docker | podman | a path | auto
	Profile       Setting[string]        // profile
	Task          Setting[string]        // task: the sandbox commands act on
	LogLevel      Setting[string]        // log_level: debug | info | warn | error
	EngineTimeout Setting[time.Duration] // engine_timeout: bound on each engine call
	PullTimeout   Setting[time.Duration] // pull_timeout: bound on pulling a missing image
	// KnownPaths are the install locations tried after PATH.
	KnownPaths Setting[[]string]
	// ExecChannel: commands in a warm sandbox go through hsbx's agent
	// (exec_channel; env HSBX_EXEC_CHANNEL); ExecChannelIdle ends an
	// unused holder (exec_channel_idle).
	ExecChannel     Setting[bool]
	ExecChannelIdle Setting[time.Duration]
	// ExecChannelAgent is the agent binary (exec_channel_agent; "" = the
	// one hsbx carries for the engine's platform, internal/agentbin);
	// one named must be a static Linux build of hsbx or hsbx-agent.
	ExecChannelAgent Setting[string]
	// CopyMaxSize bounds the data one `cp` out of a sandbox writes on the
	// host (copy_max_size; env HSBX_COPY_MAX_SIZE; "0" = no bound).
	CopyMaxSize Setting[string]
	// SnapshotMaxSize bounds what one snapshot adds to its sandbox's
	// image: the files of its mounts staged plus the image layer the
	// engine saves (snapshot_max_size; env HSBX_SNAPSHOT_MAX_SIZE; "0" =
	// no bound).
	SnapshotMaxSize Setting[string]
	// CopyChannelMax: a `cp` of at most this much data goes through the
	// exec channel's agent when its channel is up and it runs as root,
	// instead of the engine's cp (copy_channel_max; env
	// HSBX_COPY_CHANNEL_MAX; "0" = always the engine's cp).
	CopyChannelMax Setting[string]
	// PersistentShell: `hsbx run` without --session uses the task's
	// "default" session, so cd and export carry over (persistent_shell;
	// Hermes TERMINAL_PERSISTENT_SHELL); false: a fresh shell each run.
	// SessionIdle ends a session unused this long (session_idle).
	PersistentShell Setting[bool]
	SessionIdle     Setting[time.Duration]
	// SharedPaths are host directories a remote engine's machine has
	// too, at the same paths (shared_paths; env HSBX_SHARED_PATHS,
	// colon-separated): host paths under them may be bound there.
	// Podman machine's own mounts of the user's home are known already.
	SharedPaths Setting[[]string]
	// SSHShare: the hsbx command's docker calls to an engine reached over
	// ssh share one ssh connection, kept this long after its last use
	// (ssh_share; env HSBX_SSH_SHARE; 0 = a connection per call).
	SSHShare   Setting[time.Duration]
	Sandbox    SandboxSettings
	Reaper     ReaperSettings
	Kubernetes KubernetesSettings
}

// KubernetesSettings are the [kubernetes] table: where the kubectl runtime
// works ("" = the kubeconfig's current context, and its namespace).
type KubernetesSettings struct {
	Context   Setting[string]
	Namespace Setting[string]
	// StorageClass keeps a persistent sandbox's /workspace and /root in a
	// PersistentVolumeClaim of this class ("" = in the Pod, not kept);
	// StorageSize is what the claim requests.
	StorageClass Setting[string]
	StorageSize  Setting[string]
}

// SandboxSettings are the [sandbox] table: how a sandbox is made.
type SandboxSettings struct {
	Image      Setting[string]
	Cwd        Setting[string]
	Volumes    Setting[[]string]
	Env        Setting[map[string]string]
	ForwardEnv Setting[[]string]
	ExtraArgs  Setting[[]string]
	CPU        Setting[float64]
	Memory     Setting[int64]
	Disk       Setting[int64]
	PidsLimit  Setting[int64]
	ShmSize    Setting[string]
	// Network is on, off or allow (true and false read as on and off);
	// EgressAllow is allow's list.
	Network     Setting[string]
	EgressAllow Setting[[]string]
	// Secrets are brokered through allow's relay (docs/secrets.md).
	Secrets                Setting[[]Secret]
	OCIRuntime             Setting[string]
	SharedContainerKey     Setting[string]
	SandboxDir             Setting[string]
	SnapCompat             Setting[bool]
	RunAsHostUser          Setting[bool]
	MountCwdToWorkspace    Setting[bool]
	Persistent             Setting[bool]
	PersistAcrossProcesses Setting[bool]
	// Storage is where a persistent sandbox keeps /workspace and /root:
	// bind (host directories under the state dir), volume (the engine's
	// named volumes) or auto (bind on this machine's engine, volume on a
	// remote one); docs/remote.md.
	Storage Setting[string]
	Timeout Setting[time.Duration]
	// OnDrift: what to do with a sandbox made from other settings
	// (on_drift: warn | recreate | error).
	OnDrift Setting[string]
}

// ReaperSettings are the [reaper] table.
type ReaperSettings struct {
	OrphanReaper Setting[bool]
	Lifetime     Setting[time.Duration]
	IdleAfter    Setting[time.Duration]
	// SnapshotMaxAge: the sweep removes snapshots older than this
	// (reaper.snapshot_max_age; env HSBX_SNAPSHOT_MAX_AGE; 0 = never).
	SnapshotMaxAge Setting[time.Duration]
}

// DefaultCopyMaxSize bounds a copy out of a sandbox (copy_max_size).
const DefaultCopyMaxSize = "10g"

// DefaultSnapshotMaxSize bounds one snapshot (snapshot_max_size).
const DefaultSnapshotMaxSize = "10g"

// DefaultCopyChannelMax is the largest copy the exec channel's agent
// makes (copy_channel_max): below it the agent is faster than the
// engine's cp, far above it slower (BENCHMARKS.md).
const DefaultCopyChannelMax = "4m"

// SizeBytes reads a size like 512m, 10g or 1024 (bytes; b, k, m, g, t in
// either case) as bytes; "0" means no bound.
func SizeBytes(s string) (int64, error) {
	digits := strings.TrimRight(s, "bkmgtBKMGT")
	if len(s)-len(digits) > 1 || digits == "" {
		return 0, fmt.Errorf("%q: want a size like 512m or 10g (0 = no bound)", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a size like 512m or 10g (0 = no bound)", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "m": 20, "g": 30, "t": 40}[strings.ToLower(s[len(digits):])]
	if n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return n << shift, nil
}

// Defaults are the settings before any file, environment or flag: the one
// place defaults live (the sandbox's come from sandbox.DefaultSpec).
func Defaults() Settings {
	d := sandbox.DefaultSpec()
	return Settings{
		Runtime: Setting[string]{"auto", "default"}, Profile: Setting[string]{"default", "default"},
		Task: Setting[string]{"default", "default"}, LogLevel: Setting[string]{"warn", "default"},
		EngineTimeout: Setting[time.Duration]{enginecli.DefaultTimeout, "default"},
		PullTimeout:   Setting[time.Duration]{enginecli.DefaultPullTimeout, "default"},
		KnownPaths:    Setting[[]string]{detect.KnownPaths(), "default"},
		ExecChannel:   Setting[bool]{true, "default"}, ExecChannelIdle: Setting[time.Duration]{10 * time.Minute, "default"},
		ExecChannelAgent: Setting[string]{"", "default"},
		CopyMaxSize:      Setting[string]{DefaultCopyMaxSize, "default"},
		CopyChannelMax:   Setting[string]{DefaultCopyChannelMax, "default"},
		SnapshotMaxSize:  Setting[string]{DefaultSnapshotMaxSize, "default"},
		PersistentShell:  Setting[bool]{true, "default"}, SessionIdle: Setting[time.Duration]{time.Hour, "default"},
		SharedPaths: Setting[[]string]{[]string{}, "default"}, SSHShare: Setting[time.Duration]{2 * time.Minute, "default"},
		Sandbox: SandboxSettings{
			Image: Setting[string]{d.Image, "default"}, Cwd: Setting[string]{d.Cwd, "default"},
			Volumes: Setting[[]string]{[]string{}, "default"}, Env: Setting[map[string]string]{map[string]string{}, "default"},
			ForwardEnv: Setting[[]string]{[]string{}, "default"}, ExtraArgs: Setting[[]string]{[]string{}, "default"},
			CPU: Setting[float64]{d.CPU, "default"}, Memory: Setting[int64]{d.MemoryMB, "default"},
			Disk: Setting[int64]{d.DiskMB, "default"}, PidsLimit: Setting[int64]{d.PidsLimit, "default"},
			ShmSize: Setting[string]{d.ShmSize, "default"}, Network: Setting[string]{NetworkOn, "default"},
			EgressAllow:        Setting[[]string]{[]string{}, "default"},
			Secrets:            Setting[[]Secret]{[]Secret{}, "default"},
			SharedContainerKey: Setting[string]{"", "default"}, SandboxDir: Setting[string]{d.SandboxDir, "default"},
			SnapCompat: Setting[bool]{d.SnapCompat, "default"}, RunAsHostUser: Setting[bool]{d.RunAsHostUser, "default"},
			MountCwdToWorkspace: Setting[bool]{d.MountCwdToWorkspace, "default"}, Persistent: Setting[bool]{d.Persistent, "default"},
			PersistAcrossProcesses: Setting[bool]{d.PersistAcrossProcesses, "default"}, Timeout: Setting[time.Duration]{0, "default"},
			OnDrift: Setting[string]{string(sandbox.DriftWarn), "default"}, OCIRuntime: Setting[string]{"", "default"},
			Storage: Setting[string]{sandbox.StorageAuto, "default"},
		},
		Reaper: ReaperSettings{
			OrphanReaper: Setting[bool]{true, "default"}, Lifetime: Setting[time.Duration]{300 * time.Second, "default"},
			IdleAfter: Setting[time.Duration]{0, "default"}, SnapshotMaxAge: Setting[time.Duration]{0, "default"},
		},
		Kubernetes: KubernetesSettings{Context: Setting[string]{"", "default"}, Namespace: Setting[string]{"", "default"},
			StorageClass: Setting[string]{"", "default"}, StorageSize: Setting[string]{d.StorageSize, "default"}},
	}
}

// field binds a key, its environment variables and its flag to one typed
// setting. fields is the only table of settings.
type field struct {
	key  string   // file key, dotted: "sandbox.image"
	env  []string // environment variables, first wins
	flag string   // the flag that sets it, if any ("--image")
	ptr  any      // *Setting[T]
	enum []string // allowed values (strings only)
	// paths: the environment value is a colon-separated list (not JSON)
	paths bool
	// network: on, off or allow, and the booleans Hermes writes
	network bool
}

func (s *Settings) fields() []field {
	sb, r, k := &s.Sandbox, &s.Reaper, &s.Kubernetes
	return []field{
		{key: "runtime", env: []string{"HSBX_RUNTIME", "HERMES_DOCKER_BINARY"}, flag: "--runtime", ptr: &s.Runtime},
		{key: "profile", env: []string{"HSBX_PROFILE"}, flag: "--profile", ptr: &s.Profile},
		{key: "task", env: []string{"HSBX_TASK"}, flag: "--task", ptr: &s.Task},
		{key: "log_level", env: []string{"HSBX_LOG_LEVEL"}, flag: "--log-level", ptr: &s.LogLevel, enum: []string{"debug", "info", "warn", "error"}},
		{key: "engine_timeout", env: []string{"HSBX_ENGINE_TIMEOUT"}, flag: "--engine-timeout", ptr: &s.EngineTimeout},
		{key: "pull_timeout", env: []string{"HSBX_PULL_TIMEOUT"}, ptr: &s.PullTimeout},
		{key: "known_paths", env: []string{"HSBX_KNOWN_PATHS"}, ptr: &s.KnownPaths, paths: true},
		{key: "exec_channel", env: []string{"HSBX_EXEC_CHANNEL"}, ptr: &s.ExecChannel},
		{key: "exec_channel_idle", env: []string{"HSBX_EXEC_CHANNEL_IDLE"}, ptr: &s.ExecChannelIdle},
		{key: "exec_channel_agent", env: []string{"HSBX_EXEC_CHANNEL_AGENT"}, ptr: &s.ExecChannelAgent},
		{key: "copy_max_size", env: []string{"HSBX_COPY_MAX_SIZE"}, ptr: &s.CopyMaxSize},
		{key: "copy_channel_max", env: []string{"HSBX_COPY_CHANNEL_MAX"}, ptr: &s.CopyChannelMax},
		{key: "snapshot_max_size", env: []string{"HSBX_SNAPSHOT_MAX_SIZE"}, ptr: &s.SnapshotMaxSize},
		{key: "persistent_shell", env: []string{"TERMINAL_PERSISTENT_SHELL", "HSBX_PERSISTENT_SHELL"}, ptr: &s.PersistentShell},
		{key: "session_idle", env: []string{"HSBX_SESSION_IDLE"}, ptr: &s.SessionIdle},
		{key: "shared_paths", env: []string{"HSBX_SHARED_PATHS"}, ptr: &s.SharedPaths, paths: true},
		{key: "ssh_share", env: []string{"HSBX_SSH_SHARE"}, ptr: &s.SSHShare},
		{key: "sandbox.image", env: []string{"TERMINAL_DOCKER_IMAGE"}, flag: "--image", ptr: &sb.Image},
		{key: "sandbox.cwd", env: []string{"TERMINAL_CWD"}, ptr: &sb.Cwd},
		{key: "sandbox.volumes", env: []string{"TERMINAL_DOCKER_VOLUMES"}, ptr: &sb.Volumes},
		{key: "sandbox.env", env: []string{"TERMINAL_DOCKER_ENV"}, ptr: &sb.Env},
		{key: "sandbox.forward_env", env: []string{"TERMINAL_DOCKER_FORWARD_ENV"}, ptr: &sb.ForwardEnv},
		{key: "sandbox.extra_args", env: []string{"TERMINAL_DOCKER_EXTRA_ARGS"}, ptr: &sb.ExtraArgs},
		{key: "sandbox.cpu", env: []string{"TERMINAL_CONTAINER_CPU"}, ptr: &sb.CPU},
		{key: "sandbox.memory", env: []string{"TERMINAL_CONTAINER_MEMORY"}, ptr: &sb.Memory},
		{key: "sandbox.disk", env: []string{"TERMINAL_CONTAINER_DISK"}, ptr: &sb.Disk},
		{key: "sandbox.pids_limit", ptr: &sb.PidsLimit},
		{key: "sandbox.shm_size", env: []string{"TERMINAL_DOCKER_SHM_SIZE"}, ptr: &sb.ShmSize},
		{key: "sandbox.network", env: []string{"TERMINAL_DOCKER_NETWORK", "HSBX_NETWORK"}, flag: "--network", ptr: &sb.Network, network: true},
		{key: "sandbox.egress_allow", env: []string{"HSBX_EGRESS_ALLOW"}, flag: "--egress-allow", ptr: &sb.EgressAllow},
		{key: "sandbox.secrets", env: []string{"HSBX_SECRETS"}, ptr: &sb.Secrets},
		{key: "sandbox.oci_runtime", env: []string{"HSBX_OCI_RUNTIME"}, flag: "--oci-runtime", ptr: &sb.OCIRuntime},
		{key: "sandbox.shared_container_key", env: []string{"TERMINAL_DOCKER_SHARED_CONTAINER_KEY"}, ptr: &sb.SharedContainerKey},
		{key: "sandbox.sandbox_dir", env: []string{"TERMINAL_SANDBOX_DIR"}, ptr: &sb.SandboxDir},
		{key: "sandbox.snap_compat", env: []string{"TERMINAL_DOCKER_SNAP_COMPAT"}, ptr: &sb.SnapCompat},
		{key: "sandbox.run_as_host_user", env: []string{"TERMINAL_DOCKER_RUN_AS_HOST_USER"}, ptr: &sb.RunAsHostUser},
		{key: "sandbox.mount_cwd_to_workspace", env: []string{"TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE"}, ptr: &sb.MountCwdToWorkspace},
		{key: "sandbox.persistent", env: []string{"TERMINAL_CONTAINER_PERSISTENT"}, ptr: &sb.Persistent},
		{key: "sandbox.persist_across_processes", env: []string{"TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES"}, ptr: &sb.PersistAcrossProcesses},
		{key: "sandbox.storage", env: []string{"HSBX_STORAGE"}, ptr: &sb.Storage, enum: sandbox.Storages()},
		{key: "sandbox.timeout", env: []string{"TERMINAL_TIMEOUT"}, flag: "--timeout", ptr: &sb.Timeout},
		{key: "sandbox.on_drift", env: []string{"HSBX_ON_DRIFT"}, ptr: &sb.OnDrift, enum: sandbox.DriftPolicies()},
		{key: "reaper.orphan_reaper", env: []string{"TERMINAL_DOCKER_ORPHAN_REAPER"}, ptr: &r.OrphanReaper},
		{key: "reaper.lifetime", env: []string{"TERMINAL_LIFETIME_SECONDS"}, ptr: &r.Lifetime},
		{key: "reaper.idle_after", flag: "--idle", ptr: &r.IdleAfter},
		{key: "reaper.snapshot_max_age", env: []string{"HSBX_SNAPSHOT_MAX_AGE"}, ptr: &r.SnapshotMaxAge},
		{key: "kubernetes.context", env: []string{"HSBX_KUBE_CONTEXT"}, flag: "--kube-context", ptr: &k.Context},
		{key: "kubernetes.namespace", env: []string{"HSBX_KUBE_NAMESPACE"}, flag: "--kube-namespace", ptr: &k.Namespace},
		{key: "kubernetes.storage_class", env: []string{"HSBX_KUBE_STORAGE_CLASS"}, ptr: &k.StorageClass},
		{key: "kubernetes.storage_size", env: []string{"HSBX_KUBE_STORAGE_SIZE"}, ptr: &k.StorageSize},
	}
}

// Value is a resolved setting in `hsbx config --json`.
type Value struct {
	V      any    `json:"value"`
	Source string `json:"source"`
}

// Config is the resolved configuration.
type Config struct {
	Settings
	Path string // the file in use ("" when none)
}

// Flag is a setting given on the command line.
type Flag struct {
	Key   string // the setting's key ("sandbox.image")
	Value string // as typed
	Name  string // the flag ("--image"), for the source
}

// Options say where to read from.
type Options struct {
	// File is --config / HSBX_CONFIG ("" = the default path).
	File string
	// Getenv reads the environment; nil means the process environment.
	Getenv func(string) (string, bool)
	// Flags are the settings given on the command line.
	Flags []Flag
}

// Error is a configuration error: it names the source and the fix. hsbx
// exits 2 on it before any engine call.
type Error struct {
	Source string // "file PATH:LINE", "env NAME", "flag --x"
	Key    string
	Msg    string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.Source, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Source, e.Key, e.Msg)
}

// Hint says where to fix the value.
func (e *Error) Hint() string {
	switch {
	case strings.HasPrefix(e.Source, "env "):
		return fmt.Sprintf("fix or unset %s in your environment (`hsbx config` shows every setting and its source)", strings.TrimPrefix(e.Source, "env "))
	case strings.HasPrefix(e.Source, "flag "):
		return fmt.Sprintf("fix the value of %s (`hsbx --help` lists the flags)", strings.TrimPrefix(e.Source, "flag "))
	case strings.HasPrefix(e.Source, "file "), strings.HasPrefix(e.Source, "config file "):
		return "fix the configuration file there (docs/configuration.md lists every key), or point --config / HSBX_CONFIG elsewhere"
	}
	return "see `hsbx config` and docs/configuration.md"
}

// DefaultPath is $XDG_CONFIG_HOME/hsbx/config.toml (or ~/.config/...).
func DefaultPath(getenv func(string) (string, bool)) string {
	if d, ok := getenv("XDG_CONFIG_HOME"); ok && d != "" {
		return filepath.Join(d, "hsbx", "config.toml")
	}
	if h, ok := getenv("HOME"); ok && h != "" {
		return filepath.Join(h, ".config", "hsbx", "config.toml")
	}
	return ""
}

// Validate checks cross-field rules and values the sandbox would reject,
// so every configuration error surfaces before any engine call. Load runs
// it; a program that changes settings afterwards (set Value, and Source to
// say who did) runs it again.
func (c *Config) Validate() error {
	if err := c.Spec().Validate(); err != nil {
		var bs *sandbox.SpecError
		if errors.As(err, &bs) {
			key := bs.Setting
			if !strings.Contains(key, ".") {
				key = "sandbox." + key
			}
			src := "default"
			if f, ok := lookup(c.fields(), key); ok {
				src = f.source()
			}
			return &Error{Source: src, Key: key, Msg: bs.Msg}
		}
		return err
	}
	for _, s := range []struct {
		key string
		set Setting[string]
	}{{"profile", c.Profile}, {"task", c.Task}} {
		if strings.TrimSpace(s.set.Value) == "" {
			return &Error{Source: s.set.Source, Key: s.key, Msg: "empty; name one"}
		}
		if !utf8.ValidString(s.set.Value) {
			// The engines turn other bytes into U+FFFD in labels: the name
			// would read back as another, and one name get two sandboxes.
			return &Error{Source: s.set.Source, Key: s.key, Msg: fmt.Sprintf("%q is not valid UTF-8; name it in UTF-8 text", s.set.Value)}
		}
	}
	for _, p := range c.SharedPaths.Value {
		if !filepath.IsAbs(p) {
			return &Error{Source: c.SharedPaths.Source, Key: "shared_paths", Msg: fmt.Sprintf("%q is not an absolute path; name directories of this machine that the engine's machine has at the same path", p)}
		}
	}
	if n := c.Sandbox.EgressAllow; len(n.Value) > 0 && c.Sandbox.Network.Value != NetworkAllow {
		return &Error{Source: n.Source, Key: "sandbox.egress_allow", Msg: fmt.Sprintf("an allow-list is set, but network is %s (%s), which does not apply it; set network = allow to enforce it, or remove egress_allow", c.Sandbox.Network.Value, c.Sandbox.Network.Source)}
	}
	if n := c.Sandbox.Secrets; len(n.Value) > 0 {
		if c.Sandbox.Network.Value != NetworkAllow {
			return &Error{Source: n.Source, Key: "sandbox.secrets", Msg: fmt.Sprintf("secrets are brokered by network = allow's relay, but network is %s (%s); set network = allow (egress_allow may stay empty: a secret's hosts are reachable)", c.Sandbox.Network.Value, c.Sandbox.Network.Source)}
		}
		e := &sandbox.Egress{}
		for _, d := range n.Value {
			e.Secrets = append(e.Secrets, d.secret())
		}
		if err := (sandbox.Spec{Image: "x", Cwd: "/", Egress: e}).Validate(); err != nil {
			var se *sandbox.SpecError
			msg := err.Error()
			if errors.As(err, &se) {
				msg = se.Msg
			}
			return &Error{Source: n.Source, Key: "sandbox.secrets", Msg: msg}
		}
	}
	if c.EngineTimeout.Value <= 0 {
		return &Error{Source: c.EngineTimeout.Source, Key: "engine_timeout", Msg: "want a duration > 0"}
	}
	if c.PullTimeout.Value <= 0 {
		return &Error{Source: c.PullTimeout.Source, Key: "pull_timeout", Msg: "want a duration > 0"}
	}
	if _, err := SizeBytes(c.CopyMaxSize.Value); err != nil {
		return &Error{Source: c.CopyMaxSize.Source, Key: "copy_max_size", Msg: err.Error()}
	}
	if _, err := SizeBytes(c.SnapshotMaxSize.Value); err != nil {
		return &Error{Source: c.SnapshotMaxSize.Source, Key: "snapshot_max_size", Msg: err.Error()}
	}
	if _, err := SizeBytes(c.CopyChannelMax.Value); err != nil {
		return &Error{Source: c.CopyChannelMax.Source, Key: "copy_channel_max", Msg: strings.Replace(err.Error(), "0 = no bound", "0 = never", 1)}
	}
	if c.ExecChannelIdle.Value <= 0 {
		return &Error{Source: c.ExecChannelIdle.Source, Key: "exec_channel_idle", Msg: "want a duration > 0"}
	}
	if c.SessionIdle.Value <= 0 {
		return &Error{Source: c.SessionIdle.Source, Key: "session_idle", Msg: "want a duration > 0"}
	}
	return nil
}

// Spec is the sandbox specification the settings describe.
func (c *Config) Spec() sandbox.Spec {
	sb := c.Sandbox
	cwd := sb.Cwd.Value
	if cwd == "~" {
		cwd = "/root"
	}
	shm := sb.ShmSize.Value
	if shm == "0" {
		shm = "" // Hermes: "0" (or empty) leaves the engine's default
	}
	s := sandbox.Spec{
		Image: sb.Image.Value, Cwd: cwd, Volumes: sb.Volumes.Value, Env: sb.Env.Value,
		ForwardEnv: sb.ForwardEnv.Value, ExtraArgs: sb.ExtraArgs.Value,
		CPU: sb.CPU.Value, MemoryMB: sb.Memory.Value, DiskMB: sb.Disk.Value, PidsLimit: sb.PidsLimit.Value,
		ShmSize: shm, Network: sb.Network.Value == NetworkOn, OCIRuntime: sb.OCIRuntime.Value,
		RunAsHostUser: sb.RunAsHostUser.Value, MountCwdToWorkspace: sb.MountCwdToWorkspace.Value,
		Persistent: sb.Persistent.Value, PersistAcrossProcesses: sb.PersistAcrossProcesses.Value, Storage: sb.Storage.Value,
		SandboxDir: sb.SandboxDir.Value, SnapCompat: sb.SnapCompat.Value,
		StorageClass: c.Kubernetes.StorageClass.Value, StorageSize: c.Kubernetes.StorageSize.Value,
		OnDrift: sandbox.DriftPolicy(sb.OnDrift.Value), Explicit: map[string]bool{},
	}
	if sb.Network.Value == NetworkAllow {
		s.Egress = &sandbox.Egress{Allow: slices.Clone(sb.EgressAllow.Value)}
		for _, d := range sb.Secrets.Value {
			s.Egress.Secrets = append(s.Egress.Secrets, d.secret())
		}
	}
	for _, f := range c.fields() {
		if name, ok := strings.CutPrefix(f.key, "sandbox."); ok && f.source() != "default" {
			s.Explicit[name] = true
		}
	}
	return s
}

// Key is the sandbox key for the task setting (shared container key
// included).
func (c *Config) Key() sandbox.Key {
	return sandbox.Key{Profile: c.Profile.Value, Task: c.Task.Value, Shared: c.Sandbox.SharedContainerKey.Value}
}

// Scope is the set of sandboxes ls and the reaper act on: the profile's,
// or the shared container key's.
func (c *Config) Scope() sandbox.Scope { return c.Key().Scope() }

// All returns every setting by key in display order, for `hsbx config`.
// Durations are rendered as strings ("300s").
func (c *Config) All() ([]string, map[string]Value) {
	fields := c.fields()
	keys := make([]string, 0, len(fields))
	out := map[string]Value{}
	for _, f := range fields {
		keys = append(keys, f.key)
		v := f.value()
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		out[f.key] = Value{V: v, Source: f.source()}
	}
	return keys, out
}
