// Package podman is the podman CLI dialect: JSON-array ps output with unix
// timestamps, libpod's error messages and the exit codes measured on podman
// 4.3 rootful and rootless (captures under testdata/engines/podman-*).
package podman

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// New returns a Runtime driving the podman CLI at bin.
func New(bin string, o enginecli.Options) *enginecli.Engine {
	return enginecli.New(Dialect{}, bin, o)
}

// Dialect implements enginecli.Dialect for podman.
type Dialect struct{}

// Name implements enginecli.Dialect.
func (Dialect) Name() runtime.Dialect { return runtime.Podman }

// PSFormat implements enginecli.Dialect.
func (Dialect) PSFormat() string { return "json" }

// InfoFormat implements enginecli.Dialect.
func (Dialect) InfoFormat() string { return "json" }

// psEntry is one element of `podman ps --format json`.
type psEntry struct {
	ID        string             `json:"Id"`
	Names     []string           `json:"Names"`
	Image     string             `json:"Image"`
	State     string             `json:"State"`
	Labels    map[string]string  `json:"Labels"`
	Created   enginecli.FlexTime `json:"Created"`
	StartedAt enginecli.FlexTime `json:"StartedAt"`
	ExitedAt  enginecli.FlexTime `json:"ExitedAt"`
}

// ParsePS implements enginecli.Dialect: a JSON array ("[]" when nothing
// matches); Labels is null when a container has none; times are unix
// seconds, ExitedAt -62135596800 when it never exited.
func (Dialect) ParsePS(out []byte) ([]runtime.Container, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var entries []psEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("ps output is not a JSON array of containers: %w", err)
	}
	cs := make([]runtime.Container, 0, len(entries))
	for i, p := range entries {
		if p.ID == "" {
			return nil, fmt.Errorf("ps entry %d has no Id", i)
		}
		c := runtime.Container{
			ID:       p.ID,
			Image:    p.Image,
			State:    enginecli.NormalizeState(p.State),
			Labels:   p.Labels,
			Created:  p.Created.Time,
			Started:  p.StartedAt.Time,
			Finished: p.ExitedAt.Time,
		}
		if len(p.Names) > 0 {
			c.Name = p.Names[0]
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		cs = append(cs, c)
	}
	return cs, nil
}

type rawInfo struct {
	Host *struct {
		CgroupVersion string `json:"cgroupVersion"`
		OCIRuntime    struct {
			Name string `json:"name"`
		} `json:"ociRuntime"`
		Security struct {
			Rootless bool `json:"rootless"`
		} `json:"security"`
	} `json:"host"`
	Store *struct {
		GraphDriverName string            `json:"graphDriverName"`
		GraphStatus     map[string]string `json:"graphStatus"`
	} `json:"store"`
	Version *struct {
		Version string `json:"Version"`
	} `json:"version"`
}

// ParseInfo implements enginecli.Dialect.
func (Dialect) ParseInfo(out []byte) (runtime.Info, error) {
	var r rawInfo
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return runtime.Info{}, fmt.Errorf("info output is not a JSON object: %w", err)
	}
	if r.Host == nil || r.Version == nil || r.Version.Version == "" {
		return runtime.Info{}, errors.New("info output lacks host or version")
	}
	info := runtime.Info{
		ServerVersion: r.Version.Version,
		Rootless:      r.Host.Security.Rootless,
		CgroupVersion: r.Host.CgroupVersion,
	}
	// podman names its default; it also takes any runtime its
	// containers.conf names ([engine.runtimes], with built-in entries for
	// crun, runc, runsc, kata, ...) and any path, judged at create.
	if n := r.Host.OCIRuntime.Name; n != "" {
		info.OCIRuntimes = runtime.OCIRuntimes{Default: n, Names: []string{n}}
	}
	if r.Store != nil {
		info.StorageDriver = r.Store.GraphDriverName
		info.BackingFS = r.Store.GraphStatus["Backing Filesystem"]
	}
	return info, nil
}

// ParseVersion implements enginecli.Dialect. Local podman has no server:
// the client is the engine, so Server is the client's version.
func (Dialect) ParseVersion(out []byte) (runtime.Version, error) {
	v, err := enginecli.ParseVersion(out)
	if err == nil && v.Server == "" {
		v.Server, v.Platform = v.Client, enginecli.ClientPlatform(out)
	}
	return v, err
}

var rules = []enginecli.Rule{
	// Rootless networking (slirp4netns, pasta) failing: before the generic
	// rules, whose fragments its message may also hold.
	{Fragment: "slirp4netns", Kind: runtime.ErrNetworkSetup},
	{Fragment: "/dev/net/tun", Kind: runtime.ErrNetworkSetup},
	{Fragment: "pasta failed", Kind: runtime.ErrNetworkSetup},
	{Fragment: "default oci runtime", Kind: runtime.ErrNoOCIRuntime},                       // run --runtime NAME: no such name
	{Fragment: "no valid executable found for oci runtime", Kind: runtime.ErrNoOCIRuntime}, // run --runtime PATH: nothing there
	{Fragment: "cannot connect to podman", Kind: runtime.ErrUnreachable},
	{Fragment: "unable to connect to podman socket", Kind: runtime.ErrUnreachable},
	{Fragment: "could not be found on container", Kind: runtime.ErrNoSuchPath}, // cp (4.3)
	{Fragment: "no such container", Kind: runtime.ErrNotFound},
	{Fragment: "no container with name or id", Kind: runtime.ErrNotFound},
	{Fragment: "no such volume", Kind: runtime.ErrNoSuchVolume},        // volume inspect, rm (4.3)
	{Fragment: "volume already exists", Kind: runtime.ErrVolumeExists}, // volume create (4.3)
	{Fragment: "volume is being used", Kind: runtime.ErrVolumeInUse},   // volume rm (4.3)
	{Fragment: "already in use", Kind: runtime.ErrNameInUse},
	{Fragment: "can only create exec sessions on running containers", Kind: runtime.ErrNotRunning},
	{Fragment: "image is in use by a container", Kind: runtime.ErrImageInUse}, // image rm (4.3)
	{Fragment: "did not resolve to an alias", Kind: runtime.ErrImageNotFound},
	{Fragment: "image not known", Kind: runtime.ErrImageNotFound},
	{Fragment: "initializing source", Kind: runtime.ErrImageNotFound},
}

// ExecErrorCode implements enginecli.Dialect.
func (Dialect) ExecErrorCode() int { return 125 }

// Classify implements enginecli.Dialect. podman exec exits 125 when the
// container is missing or the engine unreachable and 255 when the container
// is not running, with a first line starting "Error: " or "Cannot connect".
func (Dialect) Classify(op enginecli.Op, code int, stderr string) error {
	if op == enginecli.OpExec {
		if code != 125 && code != 255 {
			return nil
		}
		// Only podman's own recognised messages count; an unknown "Error:"
		// line at 125 may be the command's, and its status passes through.
		first := enginecli.FirstLine(stderr)
		if !strings.HasPrefix(first, "Error: ") && !strings.HasPrefix(first, "Cannot connect to Podman") {
			return nil
		}
		return enginecli.Match(rules, first)
	}
	return enginecli.Match(rules, stderr)
}

// StaleExecSessions implements enginecli.Dialect: podman 4.3 keeps the session of an exec that failed to start (command not found, not executable, bad workdir) in ExecIDs (measured).
func (Dialect) StaleExecSessions() bool { return true }

// Capabilities implements enginecli.Dialect: podman's cp reaches a running
// container's tmpfs mounts, and a killed run can leave a storage
// container holding the name.
func (Dialect) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{StopKeeps: true, HostDirs: true, Pulls: true, CopyReachesMemoryMounts: true, StorageLeftovers: true}
}

// RunGrace implements enginecli.Dialect: podman 4.3's run, SIGKILLed after
// its runtime started the container, leaves the container's process
// running with the record at "created" (podman ps --sync does not correct
// it), and removing that record leaks the process; given SIGTERM it
// finishes the run (150-170 ms in, measured). What it made is then judged
// by its nonce: kept when running, removed otherwise.
func (Dialect) RunGrace() time.Duration { return 10 * time.Second }
