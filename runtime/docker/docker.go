// Package docker is the docker CLI dialect: JSON-lines ps output, the
// daemon's error messages and the exit codes measured on docker 20.10 and
// the 28.x client (captures under testdata/engines/docker-*).
package docker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// New returns a Runtime driving the docker CLI at bin.
func New(bin string, o enginecli.Options) *enginecli.Engine {
	return enginecli.New(Dialect{}, bin, o)
}

// Dialect implements enginecli.Dialect for docker.
type Dialect struct{}

// Name implements enginecli.Dialect.
func (Dialect) Name() runtime.Dialect { return runtime.Docker }

// PSFormat implements enginecli.Dialect. "{{json .}}" rather than "json":
// the 20.10 client prints the literal word "json" for --format json.
func (Dialect) PSFormat() string { return "{{json .}}" }

// InfoFormat implements enginecli.Dialect.
func (Dialect) InfoFormat() string { return "{{json .}}" }

// psLine is one line of `docker ps --format '{{json .}}'`.
type psLine struct {
	ID        string `json:"ID"`
	Names     string `json:"Names"`
	Image     string `json:"Image"`
	State     string `json:"State"`
	Labels    string `json:"Labels"`
	CreatedAt string `json:"CreatedAt"`
}

// ParsePS implements enginecli.Dialect: one JSON object per line, nothing
// at all when no container matches.
func (Dialect) ParsePS(out []byte) ([]runtime.Container, error) {
	var cs []runtime.Container
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var p psLine
		if err := json.Unmarshal(line, &p); err != nil {
			return nil, fmt.Errorf("line %d is not a JSON object: %.80q", n, line)
		}
		if p.ID == "" {
			return nil, fmt.Errorf("line %d has no ID", n)
		}
		name, _, _ := strings.Cut(p.Names, ",")
		c := runtime.Container{
			ID:     p.ID,
			Name:   name,
			Image:  p.Image,
			State:  enginecli.NormalizeState(p.State),
			Labels: ParseLabels(p.Labels),
		}
		c.Created, _ = runtime.ParseTime(p.CreatedAt) // "age unknown" when odd
		cs = append(cs, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return cs, nil
}

// ParseLabels parses docker ps's "k=v,k=v" label string. The format is
// ambiguous when a value holds a comma: a segment without "=" is taken as
// the continuation of the previous value. Use inspect for exact labels.
func ParseLabels(s string) map[string]string {
	labels := map[string]string{}
	last := ""
	for seg := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(seg, "=")
		switch {
		case ok && k != "":
			labels[k] = v
			last = k
		case last != "":
			labels[last] += "," + seg
		case seg != "":
			labels[seg] = ""
			last = seg
		}
	}
	return labels
}

type rawInfo struct {
	ServerVersion   string                     `json:"ServerVersion"`
	SecurityOptions []string                   `json:"SecurityOptions"`
	ServerErrors    []string                   `json:"ServerErrors"`
	CgroupVersion   string                     `json:"CgroupVersion"`
	Driver          string                     `json:"Driver"`
	DriverStatus    [][]string                 `json:"DriverStatus"`
	Runtimes        map[string]json.RawMessage `json:"Runtimes"`
	DefaultRuntime  string                     `json:"DefaultRuntime"`
}

// ParseInfo implements enginecli.Dialect. The 20.10 client exits 0 when
// the daemon is down and lists the failure under ServerErrors; that is
// ErrUnreachable.
func (Dialect) ParseInfo(out []byte) (runtime.Info, error) {
	var r rawInfo
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return runtime.Info{}, fmt.Errorf("info output is not a JSON object: %w", err)
	}
	if len(r.ServerErrors) > 0 {
		return runtime.Info{}, fmt.Errorf("%w: %s", runtime.ErrUnreachable, strings.Join(r.ServerErrors, "; "))
	}
	if r.ServerVersion == "" {
		return runtime.Info{}, errors.New("info output has no ServerVersion")
	}
	info := runtime.Info{ServerVersion: r.ServerVersion, CgroupVersion: r.CgroupVersion, StorageDriver: r.Driver,
		OCIRuntimes: runtime.OCIRuntimes{Default: r.DefaultRuntime, Names: slices.Sorted(maps.Keys(r.Runtimes)), Complete: true}}
	for _, o := range r.SecurityOptions {
		if o == "name=rootless" || strings.HasPrefix(o, "name=rootless,") {
			info.Rootless = true
		}
	}
	for _, kv := range r.DriverStatus {
		if len(kv) == 2 && kv[0] == "Backing Filesystem" {
			info.BackingFS = kv[1]
		}
	}
	return info, nil
}

// ParseVersion implements enginecli.Dialect.
func (Dialect) ParseVersion(out []byte) (runtime.Version, error) { return enginecli.ParseVersion(out) }

var rules = []enginecli.Rule{
	// Rootless networking (slirp4netns, pasta) failing: before the generic
	// rules, whose fragments its message may also hold.
	{Fragment: "slirp4netns", Kind: runtime.ErrNetworkSetup},
	{Fragment: "/dev/net/tun", Kind: runtime.ErrNetworkSetup},
	{Fragment: "pasta failed", Kind: runtime.ErrNetworkSetup},
	{Fragment: "unknown runtime specified", Kind: runtime.ErrNoOCIRuntime}, // run --runtime NAME the daemon has not registered
	{Fragment: "cannot connect to the docker daemon", Kind: runtime.ErrUnreachable},
	{Fragment: "error during connect", Kind: runtime.ErrUnreachable},
	{Fragment: "permission denied while trying to connect to the docker daemon", Kind: runtime.ErrUnreachable},
	{Fragment: "could not find the file", Kind: runtime.ErrNoSuchPath}, // cp (20.10)
	{Fragment: "no such container:path", Kind: runtime.ErrNoSuchPath},  // cp, the client's words for the same (28.2 client)
	{Fragment: "no such container", Kind: runtime.ErrNotFound},
	{Fragment: "no such volume", Kind: runtime.ErrNoSuchVolume},  // volume inspect, rm (20.10)
	{Fragment: "volume is in use", Kind: runtime.ErrVolumeInUse}, // volume rm (20.10)
	{Fragment: "is already in use by container", Kind: runtime.ErrNameInUse},
	{Fragment: "is paused, unpause the container", Kind: runtime.ErrPaused},
	{Fragment: "is not running", Kind: runtime.ErrNotRunning},
	{Fragment: "is using its referenced image", Kind: runtime.ErrImageInUse}, // image rm (docker 20.10)
	{Fragment: "image is being used by", Kind: runtime.ErrImageInUse},
	{Fragment: "image has dependent child images", Kind: runtime.ErrImageInUse},
	{Fragment: "unable to find image", Kind: runtime.ErrImageNotFound},
	{Fragment: "no such image", Kind: runtime.ErrImageNotFound},
	{Fragment: "pull access denied", Kind: runtime.ErrImageNotFound},
	{Fragment: "manifest unknown", Kind: runtime.ErrImageNotFound},
}

// execPrefixes start the daemon's own messages when `docker exec` fails
// before the command runs; it then exits 1, a status commands use too.
var execPrefixes = []string{
	"error response from daemon:",
	"error: no such container:",
	"cannot connect to the docker daemon",
	"error during connect",
	"permission denied while trying to connect",
}

// ExecErrorCode implements enginecli.Dialect.
func (Dialect) ExecErrorCode() int { return 1 }

// Classify implements enginecli.Dialect.
func (Dialect) Classify(op enginecli.Op, code int, stderr string) error {
	if op == enginecli.OpExec {
		first := strings.ToLower(enginecli.FirstLine(stderr))
		if code != 1 || !hasAnyPrefix(first, execPrefixes) {
			return nil // the command's own status (126/127 included)
		}
		if k := enginecli.Match(rules, first); k != nil {
			return k
		}
		return runtime.ErrEngine
	}
	return enginecli.Match(rules, stderr)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// StaleExecSessions implements enginecli.Dialect: docker drops an exec session when it ends, started or not (measured on 20.10).
func (Dialect) StaleExecSessions() bool { return false }

// Capabilities implements enginecli.Dialect: docker's cp writes beneath a
// running container's tmpfs mounts, not into them; info lists every
// runtime the daemon has registered.
func (Dialect) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{StopKeeps: true, HostDirs: true, Pulls: true, ListsOCIRuntimes: true}
}

// RunGrace implements enginecli.Dialect: the daemon carries out a run
// whatever happens to its client, and the client passes a SIGTERM on to
// the container it is starting (measured: the sandbox then exits), so a
// cancelled docker run is killed at once.
func (Dialect) RunGrace() time.Duration { return 0 }
