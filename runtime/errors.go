package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Sentinel errors. Engine errors wrap one of them; branch with errors.Is.
var (
	// ErrBinaryNotFound: no engine CLI could be found or run.
	ErrBinaryNotFound = errors.New("container engine not found")
	// ErrUnsupported: the binary is neither docker nor podman.
	ErrUnsupported = errors.New("unsupported container engine")
	// ErrUnreachable: the CLI runs but cannot reach its engine (daemon down,
	// socket missing, no permission on the socket, remote host away).
	ErrUnreachable = errors.New("container engine unreachable")
	// ErrNotFound: no such container.
	ErrNotFound = errors.New("no such container")
	// ErrNameInUse: a container with that name already exists.
	ErrNameInUse = errors.New("container name already in use")
	// ErrNotRunning: the container is not running (exec on a stopped one).
	ErrNotRunning = errors.New("container is not running")
	// ErrPaused: the container is paused.
	ErrPaused = errors.New("container is paused")
	// ErrNetworkSetup: the engine could not set up the container's network
	// (rootless without /dev/net/tun: slirp4netns or pasta failed).
	ErrNetworkSetup = errors.New("container network setup failed")
	// ErrNoOCIRuntime: the engine has no OCI runtime of the name asked for
	// (oci_runtime); it made nothing.
	ErrNoOCIRuntime = errors.New("no such OCI runtime")
	// ErrImageNotFound: the image is not present and cannot be pulled.
	ErrImageNotFound = errors.New("image not found")
	// ErrRegistryUnreachable: a pull could not reach the image's registry
	// (DNS, a refused or timed-out connection: an air-gapped host).
	ErrRegistryUnreachable = errors.New("image registry unreachable")
	// ErrRegistryTLS: the registry's TLS certificate was not accepted.
	ErrRegistryTLS = errors.New("image registry TLS failure")
	// ErrRegistryAuth: the registry refused the credentials (or wants some).
	ErrRegistryAuth = errors.New("image registry refused the credentials")
	// ErrPullTimeout: an image pull did not finish within its own bound
	// (pull_timeout) and was stopped.
	ErrPullTimeout = errors.New("image pull timed out")
	// ErrTimeout: the engine CLI did not answer in time and was killed.
	ErrTimeout = errors.New("engine call timed out")
	// ErrBadOutput: the engine printed something hsbx cannot parse.
	ErrBadOutput = errors.New("unexpected engine output")
	// ErrNoSuchPath: a copy named a path that does not exist in the
	// container.
	ErrNoSuchPath = errors.New("no such file or directory in the container")
	// ErrNoSuchUser: a command was asked to run as a user (or group) the
	// sandbox does not have, or one it cannot switch to.
	ErrNoSuchUser = errors.New("no such user in the sandbox")
	// ErrImageInUse: an image a container is made from cannot be removed
	// until the container is.
	ErrImageInUse = errors.New("image in use by a container")
	// ErrEngine: any other failure reported by the engine.
	ErrEngine = errors.New("engine error")
	// ErrForeignClaim: a claim of the sandbox's name exists without its
	// labels; it is never mounted or removed.
	ErrForeignClaim = errors.New("claim not made by hsbx for this sandbox")
	// ErrNoSuchVolume: no named volume of that name.
	ErrNoSuchVolume = errors.New("no such volume")
	// ErrVolumeExists: a volume create raced another (podman refuses the
	// second; docker says nothing).
	ErrVolumeExists = errors.New("volume already exists")
	// ErrVolumeInUse: a volume a container mounts cannot be removed until
	// the container is.
	ErrVolumeInUse = errors.New("volume in use by a container")
	// ErrForeignVolume: a volume of the name hsbx gives a key's storage
	// exists without the key's labels; it is never mounted or removed.
	ErrForeignVolume = errors.New("volume not made by hsbx for this key")
)

// EngineError is a failed engine call: the argv, the exit code and the
// engine's own message, classified into one of the sentinels (Kind).
type EngineError struct {
	Kind     error
	Argv     []string
	ExitCode int
	Stderr   string
	// Held is, for exec, the start of the command's stderr that was held
	// back from the caller's writer because it looked like the engine's own
	// message. When the caller learns the status was the command's (the
	// container is running), it delivers Held unchanged.
	Held []byte
}

// Error names the engine subcommand and gives the engine's own message; the
// full argv is in the Argv field and in the debug log (--log-level debug).
func (e *EngineError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", e.ExitCode)
	}
	if len(msg) > 2000 {
		msg = "..." + msg[len(msg)-2000:]
	}
	return fmt.Sprintf("%v: `%s` (exit %d): %s", e.Kind, e.Command(), e.ExitCode, msg)
}

// Command is the engine binary's base name and its subcommand, as in
// "podman run" or "docker container inspect".
func (e *EngineError) Command() string {
	if len(e.Argv) == 0 {
		return "engine"
	}
	words := []string{filepath.Base(e.Argv[0])}
	for _, a := range e.Argv[1:] {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
		if a != "container" {
			break
		}
	}
	return strings.Join(words, " ")
}

// Unwrap returns the classification, so errors.Is(err, ErrNotFound) works.
func (e *EngineError) Unwrap() error { return e.Kind }

// MissingError is returned by Inspect when some IDs do not exist.
type MissingError struct {
	IDs []string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("no such container: %s", strings.Join(e.IDs, ", "))
}

// Unwrap makes errors.Is(err, ErrNotFound) hold.
func (e *MissingError) Unwrap() error { return ErrNotFound }

// Hint returns a one-line suggestion for fixing err, or "".
func Hint(err error) string {
	switch {
	case errors.Is(err, ErrBinaryNotFound):
		return "install docker or podman, or point --runtime (HSBX_RUNTIME) at the engine binary"
	case errors.Is(err, ErrUnsupported):
		return "set --runtime (HSBX_RUNTIME) to a docker or podman binary"
	case errors.Is(err, ErrUnreachable):
		return "start the engine (for docker: the daemon; check DOCKER_HOST / docker context; for podman: CONTAINER_HOST or --remote), or check your permission on its socket"
	case errors.Is(err, ErrPullTimeout):
		return "the image is still downloading or the registry is slow: raise pull_timeout (HSBX_PULL_TIMEOUT), or pull the image yourself first (docker pull IMAGE / podman pull IMAGE)"
	case errors.Is(err, ErrTimeout):
		return "the engine did not answer in time; check that its daemon is healthy"
	case errors.Is(err, ErrImageNotFound):
		return "check the image's name and tag (a private one needs docker login / podman login first), import it (docker load / podman load), or choose another with --image"
	case errors.Is(err, ErrRegistryUnreachable):
		return "the registry cannot be reached from here (DNS, network or proxy settings); on an air-gapped host import the image (docker load / podman load) or choose a local one with --image"
	case errors.Is(err, ErrRegistryTLS):
		return "the engine does not trust the registry's certificate: install the registry's CA for the engine, or check the host's clock"
	case errors.Is(err, ErrRegistryAuth):
		return "log in to the registry first (docker login / podman login REGISTRY)"
	case errors.Is(err, ErrForeignVolume):
		return "that volume is not hsbx's for this task: remove or rename it if it is no one's (docker volume rm NAME), or use another task"
	case errors.Is(err, ErrVolumeInUse):
		return "a container that is not this task's sandbox mounts the volume: remove that container first (docker ps -a --filter volume=NAME names it)"
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint() // an error that knows its own fix
	}
	return ""
}
