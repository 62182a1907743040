package enginecli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Locate tells this machine's engine from another's by what the client
// reads, and takes what it cannot read as another's.
func TestLocate(t *testing.T) {
	home := t.TempDir()
	writeFile := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	context := func(name, host string) {
		sum := sha256.Sum256([]byte(name))
		writeFile(filepath.Join(home, ".docker", "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json"),
			`{"Name":"`+name+`","Metadata":{},"Endpoints":{"docker":{"Host":"`+host+`","SkipTLSVerify":false}}}`)
	}
	context("box", "ssh://me@box")
	context("desk", "unix:///Users/me/.docker/run/docker.sock")
	context("nohost", "")
	writeFile(filepath.Join(home, ".docker", "config.json"), `{"currentContext":"box"}`)
	cfgs := t.TempDir()
	conf := func(name, s string) string {
		p := filepath.Join(cfgs, name)
		writeFile(p, s)
		return p
	}
	remoteConf := conf("remote.conf", "[engine]\nremote = true\nactive_service = \"far\"\n[engine.service_destinations.far]\nuri = \"ssh://core@far:22/run/podman/podman.sock\"\n")
	activeOnly := conf("active.conf", "[engine]\nactive_service = \"far\"\n[engine.service_destinations.far]\nuri = \"ssh://core@far:22/run/podman/podman.sock\"\n")
	garbage := conf("garbage.conf", "[engine\nremote = ")
	xdg := t.TempDir()
	writeFile(filepath.Join(xdg, "containers", "podman-connections.json"),
		`{"Connection":{"Default":"mach","Connections":{"mach":{"URI":"ssh://core@127.0.0.1:50123/run/user/501/podman/podman.sock"}}}}`)

	noCtx := "DOCKER_CONFIG=" + t.TempDir()
	base := []string{"HOME=" + home, "PATH=/usr/bin", "CONTAINERS_CONF=" + filepath.Join(cfgs, "none.conf")}
	for _, tc := range []struct {
		name, dialect, bin, goos string
		env                      []string
		remote                   bool
		source, address          string
		shared                   []string
	}{
		{"docker's default", "docker", "docker", "linux", []string{noCtx}, false, "the client's default", "unix:///var/run/docker.sock", nil},
		{"DOCKER_HOST unix", "docker", "docker", "linux", []string{"DOCKER_HOST=unix:///tmp/d.sock"}, false, "DOCKER_HOST", "unix:///tmp/d.sock", nil},
		{"DOCKER_HOST ssh", "docker", "docker", "linux", []string{"DOCKER_HOST=ssh://me@box:2222"}, true, "DOCKER_HOST", "ssh://me@box:2222", nil},
		{"DOCKER_HOST tcp", "docker", "docker", "linux", []string{"DOCKER_HOST=tcp://10.0.0.5:2376"}, true, "DOCKER_HOST", "tcp://10.0.0.5:2376", nil},
		{"DOCKER_HOST tcp on loopback (a tunnel, perhaps)", "docker", "docker", "linux", []string{"DOCKER_HOST=tcp://127.0.0.1:2375"}, true, "DOCKER_HOST", "tcp://127.0.0.1:2375", nil},
		{"a password is not shown", "docker", "docker", "linux", []string{"DOCKER_HOST=tcp://u:secret@box:2376"}, true, "DOCKER_HOST", "tcp://u:xxxxx@box:2376", nil},
		{"DOCKER_HOST wins over a context", "docker", "docker", "linux", []string{"DOCKER_HOST=unix:///d.sock", "DOCKER_CONTEXT=box"}, false, "DOCKER_HOST", "unix:///d.sock", nil},
		{"docker context use", "docker", "docker", "linux", nil, true, `docker context "box" (docker context use)`, "ssh://me@box", nil},
		{"DOCKER_CONTEXT", "docker", "docker", "linux", []string{"DOCKER_CONTEXT=desk"}, false, `docker context "desk" (DOCKER_CONTEXT)`, "unix:///Users/me/.docker/run/docker.sock", nil},
		{"DOCKER_CONTEXT default", "docker", "docker", "linux", []string{"DOCKER_CONTEXT=default", noCtx}, false, "the client's default", "unix:///var/run/docker.sock", nil},
		{"an unknown context is remote", "docker", "docker", "linux", []string{"DOCKER_CONTEXT=nosuch"}, true, `docker context "nosuch" (DOCKER_CONTEXT), whose endpoint hsbx could not read`, "", nil},
		{"a context without a host is remote", "docker", "docker", "linux", []string{"DOCKER_CONTEXT=nohost"}, true, "names no docker endpoint", "", nil},
		{"docker on windows", "docker", "docker", "windows", []string{noCtx}, false, "the client's default", "npipe:////./pipe/docker_engine", nil},
		{"docker desktop on a mac is local", "docker", "docker", "darwin", []string{"DOCKER_CONTEXT=desk"}, false, "desk", "unix:///Users/me/.docker/run/docker.sock", nil},

		{"podman on linux", "podman", "podman", "linux", nil, false, "podman on this machine", "", nil},
		{"CONTAINER_HOST ssh", "podman", "podman", "linux", []string{"CONTAINER_HOST=ssh://core@box/run/podman/podman.sock"}, true, "CONTAINER_HOST", "ssh://core@box/run/podman/podman.sock", nil},
		{"CONTAINER_HOST unix", "podman", "podman", "linux", []string{"CONTAINER_HOST=unix:///run/podman/podman.sock"}, false, "CONTAINER_HOST", "unix:///run/podman/podman.sock", nil},
		{"remote = true", "podman", "podman", "linux", []string{"CONTAINERS_CONF=" + remoteConf}, true, `podman connection "far" (containers.conf's active_service)`, "ssh://core@far:22/run/podman/podman.sock", nil},
		{"an active service without remote is not used", "podman", "podman", "linux", []string{"CONTAINERS_CONF=" + activeOnly}, false, "podman on this machine", "", nil},
		{"CONTAINER_CONNECTION", "podman", "podman", "linux", []string{"CONTAINERS_CONF=" + activeOnly, "CONTAINER_CONNECTION=far"}, true, `podman connection "far" (CONTAINER_CONNECTION)`, "ssh://core@far:22/run/podman/podman.sock", nil},
		{"an unknown connection is remote", "podman", "podman", "linux", []string{"CONTAINER_CONNECTION=nosuch"}, true, "which hsbx did not find", "", nil},
		{"a garbage containers.conf says nothing", "podman", "podman", "linux", []string{"CONTAINERS_CONF=" + garbage}, false, "podman on this machine", "", nil},
		{"podman-remote's default socket", "podman", "/usr/bin/podman-remote", "linux", nil, false, "podman-remote's default", "unix:///run/podman/podman.sock", nil},
		{"podman machine on a mac", "podman", "podman", "darwin", []string{"XDG_CONFIG_HOME=" + xdg}, true, `podman connection "mach" (podman-connections.json's default); podman on darwin runs its engine in podman machine's VM`,
			"ssh://core@127.0.0.1:50123/run/user/501/podman/podman.sock", []string{home, "/private/folders", "/var/folders"}},
		{"podman machine with a unix socket is still remote", "podman", "podman", "darwin", []string{"CONTAINER_HOST=unix:///tmp/podman.sock"}, true, "podman machine's VM", "unix:///tmp/podman.sock", []string{home, "/private/folders", "/var/folders"}},
		{"podman on windows", "podman", "podman", "windows", nil, true, "podman on windows runs its engine in podman machine's VM", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Locate(tc.dialect, tc.bin, append(append([]string{}, base...), tc.env...), tc.goos)
			if l.Remote != tc.remote || !strings.Contains(l.Source, tc.source) || l.Address != tc.address || strings.Join(l.Shared, ",") != strings.Join(tc.shared, ",") {
				t.Errorf("Locate = %+v, want remote %v, source containing %q, address %q, shared %q", l, tc.remote, tc.source, tc.address, tc.shared)
			}
			if tc.remote && strings.Contains(l.String(), "local") || !tc.remote && !strings.HasPrefix(l.String(), "local") {
				t.Errorf("String() = %q", l.String())
			}
		})
	}
}

func FuzzContextMeta(f *testing.F) {
	f.Add([]byte(`{"Endpoints":{"docker":{"Host":"ssh://me@box"}}}`))
	f.Add([]byte(`{"Endpoints":{}}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseContextMeta(b)
		if (err == nil) == (h == "") {
			t.Fatalf("host %q with error %v", h, err)
		}
		if err == nil {
			_ = byAddress(h, "test").String()
		}
	})
}

func FuzzByAddress(f *testing.F) {
	for _, s := range []string{"unix:///x", "ssh://u@h", "tcp://u:p@h:1", "npipe:////./pipe/x", "/run/x.sock", "", "::", "http://[::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		l := byAddress(addr, "test")
		local := strings.HasPrefix(addr, "unix://") || strings.HasPrefix(addr, "npipe://") || strings.HasPrefix(addr, "fd://") ||
			!strings.Contains(addr, "://") && strings.HasPrefix(addr, "/")
		if l.Remote == local {
			t.Fatalf("%q: remote %v", addr, l.Remote)
		}
		if strings.Contains(addr, ":secret@") && strings.Contains(l.Address, "secret") {
			t.Fatalf("%q: password shown: %q", addr, l.Address)
		}
	})
}

func FuzzParseVolumes(f *testing.F) {
	for _, dir := range []string{"docker-client28.2.2-engine20.10.24", "podman-4.3.1"} {
		for _, c := range []string{"volume_inspect", "volume_inspect_missing", "volume_inspect_auto", "volume_inspect_none"} {
			if b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "engines", dir, c+".stdout")); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`[{"Name":""}]`))
	f.Add([]byte(`[{"Name":"a","Labels":{"k":1}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := ParseVolumes(b)
		if err != nil && vs != nil {
			t.Fatalf("volumes %v with error %v", vs, err)
		}
		for _, v := range vs {
			if v.Name == "" {
				t.Fatalf("a volume without a name from %q", b)
			}
		}
	})
}
