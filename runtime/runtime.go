// Package runtime is hsbx's view of a container engine: the Runtime interface
// over the docker or podman CLI (or kubectl, where a container is a Pod),
// the types every engine's output is parsed into, and the typed errors
// callers branch on. The dialects live in runtime/docker, runtime/podman and
// runtime/kubectl; runtime/detect picks one.
package runtime

import (
	"context"
	"io"
	"slices"
	"time"
)

// Dialect names the CLI family a binary speaks.
type Dialect string

// The dialects hsbx drives.
const (
	Docker Dialect = "docker"
	Podman Dialect = "podman"
	// Kubectl drives a Kubernetes cluster through kubectl: a sandbox is a
	// Pod (runtime/kubectl).
	Kubectl Dialect = "kubectl"
)

// ExecMarker is the variable hsbx sets in every command it runs in a
// sandbox, with a value unique to the command: the processes carrying it
// are the command's (to stop them on a timeout or signal, and, where the
// engine cannot list exec sessions, to tell which commands run).
const ExecMarker = "HSBX_EXEC_ID"

// State is a container's lifecycle state, normalised across engines.
type State string

// States as both engines report them after normalisation (podman's
// "configured"/"initialized" read as created, "stopped" as exited).
const (
	StateCreated    State = "created"
	StateRunning    State = "running"
	StatePaused     State = "paused"
	StateRestarting State = "restarting"
	StateRemoving   State = "removing"
	StateStopping   State = "stopping"
	StateExited     State = "exited"
	StateDead       State = "dead"
	StateUnknown    State = "unknown"
	// StateStarting is a Pod the cluster is still bringing up (scheduling,
	// pulling its image, creating its container): alive, not yet running.
	StateStarting State = "starting"
)

// Alive reports whether processes may be running in a container in this
// state. Anything not known to be stopped counts as alive: code that removes
// containers must treat unknown states as alive.
func (s State) Alive() bool {
	switch s {
	case StateCreated, StateExited, StateDead:
		return false
	}
	return true
}

// Container is one container as ps or inspect reports it. Times are zero
// when the engine says "never" (not started, not finished) or does not say.
type Container struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Image    string            `json:"image"`
	State    State             `json:"state"`
	Labels   map[string]string `json:"labels"`
	Created  time.Time         `json:"created"`
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	// ExecIDs are the container's exec sessions (inspect only: nil from
	// List). Both engines list an exec while it runs and drop it when it
	// ends, on any host that shares the engine; podman 4.3 also keeps those
	// that failed to start (measured), so Runtime.LiveExecs tells which run.
	ExecIDs []string `json:"exec_ids,omitempty"`
	// EnvNames are the names Config.Env sets (inspect only; never the
	// values, which stay in the engine).
	EnvNames []string `json:"env_names,omitempty"`
	// NetworkMode is HostConfig.NetworkMode ("none", "bridge", ...; inspect
	// only: "" from List).
	NetworkMode string `json:"network_mode,omitempty"`
	// OCIRuntime is the OCI runtime the engine runs it with, as the engine
	// names it (docker's HostConfig.Runtime, podman's OCIRuntime: a name or
	// a path; a Pod's runtimeClassName, "" for the node's default; inspect
	// only: "" from List).
	OCIRuntime string `json:"oci_runtime,omitempty"`
}

// ListOptions selects containers for Runtime.List. All filters must match.
type ListOptions struct {
	// Labels are label filters: "key" (present) or "key=value".
	Labels []string
	// Status keeps only containers in these states (engine filter
	// status=...); empty means every state.
	Status []State
	// Name keeps containers whose name matches this engine name filter.
	Name string
}

// RunSpec describes a detached container to create and start.
type RunSpec struct {
	Name   string
	Labels map[string]string
	// Env is passed as "-e NAME" on argv with the value in the engine
	// client's environment, so values never appear on any command line.
	Env map[string]string
	// Args are further run flags, in order, placed after name, labels and
	// env and before the image (hardening, limits, mounts, extra args).
	Args  []string
	Image string
	Cmd   []string
	// Claims are the persistent volumes the container mounts by name
	// (--mount type=volume,source=NAME in Args), made before it when
	// absent (kubectl only: a PersistentVolumeClaim per sandbox key).
	Claims []Claim
	// Volumes are the engine's named volumes the container mounts
	// (--mount type=volume,source=NAME in Args; docker and podman), made
	// before it, with their labels, when absent (Volumes.EnsureVolumes).
	Volumes []Volume
}

// Volume is a named volume of a docker or podman engine: it outlives the
// containers that mount it, and carries Labels so that only the key's own
// is ever mounted or removed.
type Volume struct {
	Name   string
	Labels map[string]string
}

// Volumes is implemented by runtimes whose engine keeps named volumes
// (docker, podman): a sandbox's storage = volume.
type Volumes interface {
	// EnsureVolumes makes each of vs that does not exist, with its
	// labels, and checks that every one carries them: one that exists
	// without is an ErrForeignVolume, and nothing is made for it.
	EnsureVolumes(ctx context.Context, vs ...Volume) error
	// ListVolumes lists the volumes that carry every one of labels (an
	// empty value: the label with any value).
	ListVolumes(ctx context.Context, labels map[string]string) ([]Volume, error)
	// RemoveVolumes removes the named volumes and checks with the engine
	// that they are gone; one a container mounts stays, and the error
	// wraps ErrVolumeInUse. A missing one is not an error.
	RemoveVolumes(ctx context.Context, names ...string) error
}

// Claim is a persistent volume that outlives the containers that mount it:
// on Kubernetes a PersistentVolumeClaim of a storage class.
type Claim struct {
	Name  string
	Class string // the storage class
	Size  string // the storage requested, docker-style ("2g")
	// Labels mark the claim as the sandbox key's; one that exists without
	// exactly these is never mounted or removed.
	Labels map[string]string
}

// ClaimRemover is implemented by runtimes whose sandboxes keep files in
// claims (kubectl): RemoveClaims deletes the named claims that carry
// their labels, waits until they are gone, and returns the names it
// removed. A missing claim is not an error; one without the labels is
// left alone and named in an ErrForeignClaim error.
type ClaimRemover interface {
	RemoveClaims(ctx context.Context, claims ...Claim) ([]string, error)
}

// PolicyNetwork is implemented by runtimes whose sandbox without a
// network (RunSpec.Args "--network none") still has an interface, kept
// off the network by a policy its cluster must enforce (kubectl: a
// NetworkPolicy that denies the Pod everything). Such a policy is not
// proof: ReachTargets names TCP addresses the sandbox id could connect to
// were the policy not enforced (its node's kubelet), which the lifecycle
// must find out of reach from inside before the sandbox is used.
type PolicyNetwork interface {
	ReachTargets(ctx context.Context, id string) ([]string, error)
}

// StorageRemover is implemented by runtimes whose engine can hold a
// container name in its storage without listing a container (podman: a
// `run` killed between creating the storage and registering the
// container leaves such a "storage container", which `ps -a` and
// `inspect` do not show and which blocks the name). RemoveStorage removes
// the storage container of that exact name; removed is false when there
// was none. podman 4.3 removes a container it lists as well (an exited
// or created one, measured), so callers first make sure, by inspect, that
// no container of the name exists.
type StorageRemover interface {
	RemoveStorage(ctx context.Context, name string) (removed bool, err error)
}

// ExecSpec describes a command to run in a running container.
type ExecSpec struct {
	ID      string
	Cmd     []string
	WorkDir string
	User    string
	// Env as in RunSpec: names on argv, values in the client's environment.
	Env         map[string]string
	Interactive bool // keep stdin open (-i)
	TTY         bool // allocate a terminal (-t)
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	// StdoutDirect gives Stdout to the client as it is, as on a terminal:
	// no start-failure hold in between, so an *os.File is the client's own
	// stdout (no pipe and copying goroutine per chunk). For a caller that
	// reads a protocol there and knows a command that did not start by its
	// first bytes (the exec channel's agent, which must say hello first).
	StdoutDirect bool
	// Timeout bounds the whole exec (the client is killed after it); 0
	// means only the context bounds it. Commands may run for hours, so
	// callers set it only for short housekeeping execs.
	Timeout time.Duration
}

// Image is what hsbx reads from `image inspect`.
type Image struct {
	ID         string   `json:"id"`
	Entrypoint []string `json:"entrypoint"`
	// Labels are the image's labels; EnvNames the names its environment
	// sets (never the values); Size its bytes with the layers it stands on;
	// Created when it was made (zero when the engine does not say).
	Labels   map[string]string `json:"labels,omitempty"`
	EnvNames []string          `json:"env_names,omitempty"`
	Size     int64             `json:"size,omitempty"`
	Created  time.Time         `json:"created,omitzero"`
}

// CommitSpec is a container's file system saved as an image (Committer).
type CommitSpec struct {
	ID  string // the container
	Ref string // the image's name, "repository:tag"
	// Labels are set on the image, each in its own change, so no value
	// is read as another label; values must be free of quotes,
	// backslashes and white space (the engines parse them apart).
	Labels map[string]string
	// BlankEnv are environment names the image is to carry empty,
	// whatever value the container had (so none is kept in the image).
	BlankEnv []string
	// NoPause commits without pausing the container (a rootless engine on
	// cgroups v1 cannot pause one); the caller keeps it from writing.
	NoPause bool
}

// Committer is implemented by runtimes that can save a container's file
// system as an image and manage such images (docker, podman: `commit`;
// not kubectl, which cannot reach a Pod's image layer).
type Committer interface {
	// Commit saves spec.ID's file system as an image, pausing the
	// container while it copies (unless spec.NoPause), and returns the
	// new image's id.
	Commit(ctx context.Context, spec CommitSpec) (string, error)
	// Images returns the local images carrying every label filter
	// ("key" or "key=value"), inspected (one `image ls` and one
	// `image inspect`).
	Images(ctx context.Context, labels ...string) ([]Image, error)
	// RemoveImages removes images by id; one a container uses fails
	// with ErrImageInUse, a missing one is not an error.
	RemoveImages(ctx context.Context, ids ...string) error
}

// Version is what `<engine> version` reports.
type Version struct {
	Client string `json:"client"`
	Server string `json:"server"` // empty when the engine has no daemon or it is unreachable
	// Platform is "os/arch" (GOOS/GOARCH words) of the machine that runs
	// the sandboxes: the daemon's, local podman's own, the cluster's
	// server's on kubectl ("" when the engine does not say).
	Platform string `json:"platform,omitempty"`
}

// Info is what hsbx needs from `<engine> info`.
type Info struct {
	ServerVersion string
	Rootless      bool
	CgroupVersion string
	// StorageDriver and BackingFS tell whether a disk quota can work.
	StorageDriver string
	BackingFS     string
	// OCIRuntimes are the engine's runtimes (docker lists them all;
	// podman names its default).
	OCIRuntimes OCIRuntimes
}

// OCIRuntimes is what an engine says of the OCI runtimes it can run a
// container with (docker's --runtime, podman's --runtime, a Pod's
// runtimeClassName).
type OCIRuntimes struct {
	// Default is the one a container gets when none is asked for ("" when
	// the engine does not say: a Pod gets its node's).
	Default string `json:"default"`
	// Names are the runtimes one may ask for by name, sorted.
	Names []string `json:"names"`
	// Complete says Names is every name the engine accepts. Podman's is
	// not: it also takes any name in containers.conf's [engine.runtimes]
	// and any path, and judges them when it creates (refusing, with
	// nothing made, one it cannot find: ErrNoOCIRuntime).
	Complete bool `json:"complete"`
}

// Has reports whether name is one of Names or the Default.
func (o OCIRuntimes) Has(name string) bool {
	return name == o.Default || slices.Contains(o.Names, name)
}

// CgroupsV1 reports whether the engine runs on cgroups v1 (docker says
// "1", podman "v1"), where a rootless engine cannot enforce limits.
func (i Info) CgroupsV1() bool { return i.CgroupVersion == "1" || i.CgroupVersion == "v1" }

// Capabilities is what an engine can do where engines differ: the
// lifecycle asks this, not which engine it is, so a new engine is a new
// runtime package reporting its own.
type Capabilities struct {
	// StopKeeps: a stopped container keeps its filesystem and can be
	// started again (docker, podman); a Pod is deleted by stop.
	StopKeeps bool
	// HostDirs: containers bind host directories, so a persistent
	// sandbox's /workspace and /root live on the host; without, they live
	// in a claim (RunSpec.Claims), which down removes (ClaimRemover).
	HostDirs bool
	// Pulls: hsbx pulls a missing image itself (Pull) before it creates;
	// without, the engine's nodes pull what they need.
	Pulls bool
	// ListsOCIRuntimes: OCIRuntimes names every runtime the engine takes
	// (docker, a cluster's RuntimeClasses), so a name it lacks can be
	// refused before a create; podman also takes paths and judges them
	// when it creates (refusing with nothing made).
	ListsOCIRuntimes bool
	// CopyRunsInside: the engine's copy runs inside the sandbox (kubectl's
	// tar through exec), so it sees what the sandbox's processes see under
	// any OCI runtime; docker's and podman's write the host's view of its
	// file system, which a runtime with a kernel of its own (gVisor's, a
	// VM's) may not show its processes.
	CopyRunsInside bool
	// CopyReachesMemoryMounts: the engine's copy reaches a running
	// container's tmpfs mounts (podman, kubectl's tar); docker's writes
	// beneath them.
	CopyReachesMemoryMounts bool
	// ExecEnvInBand: exec's environment values travel inside the exec's
	// own stream (kubectl: on its stdin), never in the client's
	// environment, so names the client reads itself cannot steer it.
	ExecEnvInBand bool
	// EnvByFile: a variable whose name the client reads itself
	// (ClientReads, ProxyVar) reaches the sandbox in an env file, never
	// the client's environment (docker, podman), so it may have any value
	// an env file holds (EnvFileSafe).
	EnvByFile bool
	// StorageLeftovers: a killed create can leave storage holding the
	// name that no listing shows (podman); see StorageRemover.
	StorageLeftovers bool
	// Lacks names what the engine cannot apply to a sandbox, each with
	// the reason in the engine's terms (what it would take); the caller
	// refuses a setting that needs one and leaves a default off.
	Lacks map[Feature]string
}

// Feature is something a sandbox setting needs from the engine.
type Feature string

const (
	// NoNetwork is a sandbox with no network at all (network = false).
	NoNetwork Feature = "no-network"
	// PidsLimit is a process limit per sandbox (--pids-limit).
	PidsLimit Feature = "pids-limit"
	// DiskQuota is a size limit on the sandbox's writable layer.
	DiskQuota Feature = "disk-quota"
	// RunFlags are docker/podman `run` flags passed through (extra_args).
	RunFlags Feature = "run-flags"
	// ExecUser is a command run as another user by the engine's own exec
	// (ExecSpec.User); without it only hsbx's agent switches user.
	ExecUser Feature = "exec-user"
)

// Runtime is a container engine driven through its CLI. Every method that
// talks to the engine takes a context and is bounded by a timeout. Errors
// wrap the sentinels in errors.go and carry the engine's own message.
type Runtime interface {
	// Dialect says which CLI family this is.
	Dialect() Dialect
	// Binary is the path of the engine CLI.
	Binary() string
	// Capabilities says what the engine can do where engines differ.
	Capabilities() Capabilities
	// Endpoint names the engine this runtime reaches, for what a host
	// keeps per engine (the container it verified for a sandbox key): the
	// dialect, the binary and what in the client's environment and
	// configuration selects a daemon or cluster. Runtimes with one
	// endpoint reach one engine.
	Endpoint() string
	// CallTimeout bounds every engine call except exec and run (run gets
	// four times as long: it may pull an image).
	CallTimeout() time.Duration
	// List returns all containers (running or not) matching opts.
	List(ctx context.Context, opts ListOptions) ([]Container, error)
	// Inspect returns the containers among ids that exist, in one engine
	// call. When some do not exist the error wraps ErrNotFound (see
	// *MissingError) and the found ones are still returned.
	Inspect(ctx context.Context, ids ...string) ([]Container, error)
	// Run creates and starts a detached container and returns its full ID.
	Run(ctx context.Context, spec RunSpec) (string, error)
	// Start starts a stopped container.
	Start(ctx context.Context, id string) error
	// Stop stops a container, killing it after grace.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Unpause resumes a paused container.
	Unpause(ctx context.Context, id string) error
	// Remove removes containers, in one call when the engine cooperates;
	// force removes running ones too. IDs that do not exist are not an
	// error (they are gone, which is what was asked). A zero exit status is
	// not proof: callers that must know verify with List or Inspect.
	Remove(ctx context.Context, force bool, ids ...string) error
	// Exec runs a command in a running container, streaming its stdio, and
	// returns the command's exit code. An error means the engine failed,
	// not the command.
	Exec(ctx context.Context, spec ExecSpec) (int, error)
	// LiveExecs returns the exec sessions of c (as inspected) that are
	// running now. Docker lists exactly those in ExecIDs; podman 4.3 also
	// keeps the sessions of execs that failed to start (measured), so each
	// is asked. An error leaves the answer unknown: callers treat it as busy.
	LiveExecs(ctx context.Context, c Container) ([]string, error)
	// InspectImage reports a local image's id and entrypoint; it fails
	// with ErrImageNotFound when the image is not present.
	InspectImage(ctx context.Context, ref string) (Image, error)
	// Pull pulls image ref, writing the engine's progress to progress,
	// bounded by timeout (0: enginecli.DefaultPullTimeout). It fails with
	// ErrImageNotFound when the image cannot be pulled and ErrPullTimeout
	// when the bound ran out.
	Pull(ctx context.Context, ref string, progress io.Writer, timeout time.Duration) error
	// CopyIn extracts a tar archive into directory dir of container id
	// (`cp - ID:dir`), running or stopped. It cannot reach a tmpfs mount:
	// the engine writes beneath it.
	CopyIn(ctx context.Context, id, dir string, archive io.Reader) error
	// CopyOut writes a tar archive of path src of container id to w (`cp
	// ID:src -`), running or stopped.
	CopyOut(ctx context.Context, id, src string, w io.Writer) error
	// CopyTo copies host file or directory src to dst in container id
	// (`cp -- src ID:dst`, the engine's semantics: into dst when dst is an
	// existing directory), running or stopped; the engine streams it.
	CopyTo(ctx context.Context, id, src, dst string) error
	// CopyFrom copies src of container id to host path dst (`cp --
	// ID:src dst`).
	CopyFrom(ctx context.Context, id, src, dst string) error
	// Version reports client and server versions.
	Version(ctx context.Context) (Version, error)
	// Info reports the engine's host facts; it fails with ErrUnreachable
	// when the engine cannot be reached.
	Info(ctx context.Context) (Info, error)
	// OCIRuntimes asks the engine which OCI runtimes it offers (one call).
	OCIRuntimes(ctx context.Context) (OCIRuntimes, error)
}
