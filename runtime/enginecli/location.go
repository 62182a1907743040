package enginecli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/runtime"
)

// Locate says where the engine a client reaches runs, from what the
// client reads to choose it (env, its configuration files; goos is the
// machine's OS): a unix socket or named pipe is this machine's engine;
// ssh, tcp and http(s) name another (even a loopback tcp address may be a
// tunnel); a docker context or podman connection is what its address is;
// podman on macOS and Windows runs its engine in podman machine's VM,
// which shares the user's home. What cannot be read is taken as remote:
// hsbx then passes no host path it cannot vouch for.
func Locate(dialect, bin string, env []string, goos string) runtime.Location {
	get := func(k string) string { v, _ := environ.Lookup(env, k); return v }
	if dialect == "podman" {
		return locatePodman(bin, get, goos)
	}
	if v := get("DOCKER_HOST"); v != "" {
		return byAddress(v, "DOCKER_HOST")
	}
	name, src := get("DOCKER_CONTEXT"), "DOCKER_CONTEXT"
	if name == "" {
		name, src = dockerContext(env), "docker context use"
	}
	if name != "" && name != "default" {
		what := fmt.Sprintf("docker context %q (%s)", name, src)
		host, err := dockerContextHost(dockerConfigDir(environ.Getter(env)), name)
		if err != nil {
			return runtime.Location{Remote: true, Source: what + ", whose endpoint hsbx could not read: " + err.Error()}
		}
		return byAddress(host, what)
	}
	if goos == "windows" {
		return runtime.Location{Address: "npipe:////./pipe/docker_engine", Source: "the client's default"}
	}
	return runtime.Location{Address: "unix:///var/run/docker.sock", Source: "the client's default"}
}

// byAddress judges an engine address: unix, npipe and fd are this
// machine's; anything else another's.
func byAddress(addr, source string) runtime.Location {
	l := runtime.Location{Address: redactURL(addr), Source: source}
	scheme, _, ok := strings.Cut(addr, "://")
	switch {
	case !ok:
		l.Remote = !strings.HasPrefix(addr, "/") // a bare socket path is local
	case scheme != "unix" && scheme != "npipe" && scheme != "fd":
		l.Remote = true
	}
	return l
}

// redactURL drops a password from an address before it is shown.
func redactURL(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.User == nil {
		return addr
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// dockerConfigDir is where the docker client keeps config.json and its
// contexts: DOCKER_CONFIG, else ~/.docker ("" without either).
func dockerConfigDir(get func(string) (string, bool)) string {
	if d, _ := get("DOCKER_CONFIG"); d != "" {
		return d
	}
	if h, _ := get("HOME"); h != "" {
		return filepath.Join(h, ".docker")
	}
	return ""
}

// dockerContextHost reads context name's docker endpoint from the
// client's context store (contexts/meta/SHA256(name)/meta.json).
func dockerContextHost(dir, name string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("no HOME or DOCKER_CONFIG")
	}
	sum := sha256.Sum256([]byte(name))
	p := filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json")
	b, err := readSmall(p)
	if err != nil {
		return "", err
	}
	return parseContextMeta(b)
}

// parseContextMeta is a docker context's docker endpoint host.
func parseContextMeta(b []byte) (string, error) {
	var meta struct {
		Endpoints map[string]struct {
			Host string
		}
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return "", fmt.Errorf("the context's meta.json: %w", err)
	}
	h := meta.Endpoints["docker"].Host
	if h == "" {
		return "", fmt.Errorf("the context's meta.json names no docker endpoint")
	}
	return h, nil
}

func readSmall(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = fmt.Errorf("%s: over 1 MB", p)
	}
	return b, err
}

// podmanMachineShares are the host directories podman machine mounts into
// its VM at the same paths by default (`podman machine init`'s volumes).
func podmanMachineShares(get func(string) string, goos string) []string {
	if goos != "darwin" {
		return nil
	}
	var out []string
	if h := get("HOME"); strings.HasPrefix(h, "/") {
		out = append(out, filepath.Clean(h))
	}
	return append(out, "/private/folders", "/var/folders")
}

// locatePodman: CONTAINER_HOST, then CONTAINER_CONNECTION, then the
// configuration's remote = true (or a podman-remote binary) with its
// active connection; podman on macOS and Windows is always remote.
func locatePodman(bin string, get func(string) string, goos string) runtime.Location {
	machine := goos == "darwin" || goos == "windows"
	finish := func(l runtime.Location) runtime.Location {
		if machine {
			l.Remote = true
			l.Source += "; podman on " + goos + " runs its engine in podman machine's VM"
			l.Shared = podmanMachineShares(get, goos)
		}
		return l
	}
	if v := get("CONTAINER_HOST"); v != "" {
		return finish(byAddress(v, "CONTAINER_HOST"))
	}
	conf := readPodmanConf(get)
	name, src := get("CONTAINER_CONNECTION"), "CONTAINER_CONNECTION"
	remote := name != "" || conf.Engine.Remote || machine || strings.HasSuffix(filepath.Base(bin), "podman-remote")
	if !remote {
		return runtime.Location{Source: "podman on this machine: no CONTAINER_HOST, connection or remote = true"}
	}
	if name == "" {
		name, src = conf.defaultConnection()
	}
	if name == "" {
		if machine {
			return finish(runtime.Location{Source: "no connection named"})
		}
		return runtime.Location{Address: "unix:///run/podman/podman.sock", Source: "podman-remote's default"}
	}
	what := fmt.Sprintf("podman connection %q (%s)", name, src)
	uri, ok := conf.uri(name)
	if !ok {
		return finish(runtime.Location{Remote: true, Source: what + ", which hsbx did not find in containers.conf or podman-connections.json"})
	}
	return finish(byAddress(uri, what))
}

// podmanConf is what hsbx reads of podman's configuration: containers.conf
// ([engine] remote, active_service, service_destinations) and podman 5's
// podman-connections.json.
type podmanConf struct {
	Engine struct {
		Remote        bool   `toml:"remote"`
		ActiveService string `toml:"active_service"`
		Destinations  map[string]struct {
			URI string `toml:"uri"`
		} `toml:"service_destinations"`
	} `toml:"engine"`
	Connections struct {
		Connection struct {
			Default     string
			Connections map[string]struct{ URI string }
		}
	}
}

func (c podmanConf) defaultConnection() (string, string) {
	if d := c.Connections.Connection.Default; d != "" {
		return d, "podman-connections.json's default"
	}
	if c.Engine.ActiveService != "" {
		return c.Engine.ActiveService, "containers.conf's active_service"
	}
	return "", ""
}

func (c podmanConf) uri(name string) (string, bool) {
	if d, ok := c.Connections.Connection.Connections[name]; ok && d.URI != "" {
		return d.URI, true
	}
	if d, ok := c.Engine.Destinations[name]; ok && d.URI != "" {
		return d.URI, true
	}
	return "", false
}

// readPodmanConf merges the configuration files podman reads, later over
// earlier: the system's, the user's, then CONTAINERS_CONF (which podman
// reads instead of the others).
func readPodmanConf(get func(string) string) podmanConf {
	var c podmanConf
	cfgHome := get("XDG_CONFIG_HOME")
	if cfgHome == "" && get("HOME") != "" {
		cfgHome = filepath.Join(get("HOME"), ".config")
	}
	files := []string{"/usr/share/containers/containers.conf", "/etc/containers/containers.conf"}
	if cfgHome != "" {
		files = append(files, filepath.Join(cfgHome, "containers", "containers.conf"))
	}
	if v := get("CONTAINERS_CONF"); v != "" {
		files = []string{v}
	}
	for _, f := range files {
		if b, err := readSmall(f); err == nil {
			_ = toml.Unmarshal(b, &c) // a file podman itself would refuse says nothing here
		}
	}
	if cfgHome != "" {
		if b, err := readSmall(filepath.Join(cfgHome, "containers", "podman-connections.json")); err == nil {
			_ = json.Unmarshal(b, &c.Connections)
		}
	}
	return c
}
