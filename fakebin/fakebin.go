// Package fakebin holds fake `docker` and `podman` programs for tests. They
// are registered with testscript.Main, so scripts run them as real
// executables on PATH. They reproduce each engine's output shapes, exit
// codes and messages for the subcommands hsbx uses (checked against the
// captures in testdata/engines by fidelity_test.go), keep their containers
// in a state file under $FAKEENGINE_DIR (default $WORK/.fakeengine) that is
// safe under concurrent invocations, append every argv to argv.log there,
// and inject faults from environment variables documented in
// testdata/script/README.md.
package fakebin

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Docker is the fake docker program (for testscript.Main).
func Docker() { os.Exit(Run("docker", os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)) }

// Podman is the fake podman program (for testscript.Main).
func Podman() { os.Exit(Run("podman", os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)) }

// Versions the fakes claim to be: the engines captured in testdata/engines.
const (
	DockerClientVersion = "28.2.2"
	DockerServerVersion = "20.10.24+dfsg1"
	PodmanVersion       = "4.3.1"
)

// fake is one invocation.
type fake struct {
	name    string // the program name: docker or podman
	dialect string // what it behaves as (FAKEENGINE_DOCKER_IS=podman makes docker a podman shim)
	env     map[string]string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	st      store
	now     time.Time
	sub     string // the subcommand, e.g. "ps", "inspect", "--version"
}

// Run executes one fake engine command and returns its exit status.
func Run(name string, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	for _, kv := range environ {
		if job, ok := strings.CutPrefix(kv, childEnv+"="); ok {
			return runChild(name, job)
		}
	}
	f := &fake{name: name, dialect: name, env: map[string]string{}, stdin: stdin, stdout: stdout, stderr: stderr}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		f.env[k] = v
	}
	if name == "docker" && f.env["FAKEENGINE_DOCKER_IS"] == "podman" {
		f.dialect = "podman"
	}
	dir := f.env["FAKEENGINE_DIR"]
	if dir == "" && f.env["WORK"] != "" {
		dir = filepath.Join(f.env["WORK"], ".fakeengine")
	}
	if dir == "" {
		fmt.Fprintln(stderr, "fake engine: set FAKEENGINE_DIR (or WORK) to a directory for its state")
		return 125
	}
	f.st = store{dir: dir}
	f.now = time.Now().UTC()
	if s := f.env["FAKEENGINE_NOW"]; s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			f.now = t.UTC()
		}
	}
	f.logArgv(args)
	if name == "kubectl" {
		return f.kubectl(args)
	}

	args, remote := f.globalFlags(args)
	if len(args) == 0 {
		return f.usage("missing command")
	}
	sub, rest := args[0], args[1:]
	if sub == "image" && len(rest) > 0 && rest[0] == "inspect" {
		sub, rest = "image-inspect", rest[1:]
	}
	if sub == "image" && len(rest) > 0 && (rest[0] == "ls" || rest[0] == "rm") {
		sub = "image-" + rest[0] // rest keeps it: image() dispatches
	}
	if sub == "container" && len(rest) > 0 {
		sub, rest = rest[0], rest[1:]
		if sub == "ls" || sub == "list" {
			sub = "ps"
		}
	}
	if sub == "-v" || sub == "--version" {
		sub = "versionflag"
	}
	f.sub = sub
	if code, done := f.faults(); done {
		return code
	}
	if sub != "versionflag" && f.down(remote) {
		return f.unreachable()
	}
	switch sub {
	case "versionflag":
		if f.dialect == "podman" {
			fmt.Fprintf(stdout, "podman version %s\n", PodmanVersion)
		} else {
			fmt.Fprintf(stdout, "Docker version %s, build e6534b4\n", DockerClientVersion)
		}
		return 0
	case "version":
		return f.version()
	case "info":
		return f.info()
	case "ps":
		return f.ps(rest)
	case "inspect":
		return f.inspect(rest)
	case "run", "create":
		return f.run(rest, sub == "create")
	case "start":
		return f.start(rest)
	case "stop", "kill":
		return f.stop(rest, sub == "kill")
	case "rm":
		return f.rm(rest)
	case "pause", "unpause":
		return f.pause(rest, sub == "pause")
	case "exec":
		return f.exec(rest)
	case "image-inspect":
		return f.imageInspect(rest)
	case "image-ls", "image-rm":
		return f.image(rest)
	case "commit":
		return f.commit(rest)
	case "cleanup":
		return f.cleanup(rest)
	case "cp":
		return f.cp(rest)
	case "pull":
		return f.pull(rest)
	case "volume":
		return f.volume(rest)
	}
	return f.usage(fmt.Sprintf("unknown command %q for %q", sub, f.name))
}

// logArgv appends the invocation to argv.log (O_APPEND: one write per line).
func (f *fake) logArgv(args []string) {
	_ = os.MkdirAll(f.st.dir, 0o755)
	line := f.name
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\") {
			a = strconv.Quote(a)
		}
		line += " " + a
	}
	lf, err := os.OpenFile(f.st.path("argv.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		lf.WriteString(line + "\n")
		lf.Close()
	}
}

var globalValueFlags = map[string]bool{
	"-H": true, "--host": true, "--context": true, "-c": true, "--config": true, "--log-level": true,
	"-l": true, "--url": true, "--connection": true, "--root": true, "--runroot": true,
	"--cgroup-manager": true, "--events-backend": true, "--storage-driver": true, "--identity": true,
}

// globalFlags strips the flags that come before the subcommand.
func (f *fake) globalFlags(args []string) ([]string, bool) {
	remote := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-v" && args[0] != "--version" {
		a := args[0]
		args = args[1:]
		switch {
		case a == "--remote" || a == "-r":
			remote = true
		case strings.Contains(a, "="):
		case globalValueFlags[a] && len(args) > 0:
			if a == "--url" || a == "--connection" {
				remote = true
			}
			args = args[1:]
		}
	}
	return args, remote
}

// down reports whether the engine is out of reach: FAKEENGINE_DOWN=1, or a
// DOCKER_HOST / CONTAINER_HOST unix socket that does not exist (as for the
// real clients; CONTAINER_HOST implies --remote).
func (f *fake) down(remote bool) bool {
	if f.env["FAKEENGINE_DOWN"] == "1" {
		return true
	}
	host := f.env["DOCKER_HOST"]
	if f.dialect == "podman" {
		host = f.env["CONTAINER_HOST"]
		if !remote && host == "" {
			return false
		}
	}
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		if _, err := os.Stat(p); err != nil {
			return true
		}
	}
	return false
}

func (f *fake) dockerHost() string {
	if h := f.env["DOCKER_HOST"]; h != "" {
		return h
	}
	return "unix:///var/run/docker.sock"
}

func (f *fake) unreachable() int {
	if f.dialect == "podman" {
		host := f.env["CONTAINER_HOST"]
		if host == "" {
			host = "unix:///run/podman/podman.sock"
		}
		fmt.Fprintf(f.stderr, "Cannot connect to Podman. Please verify your connection to the Linux system using `podman system connection list`, or try `podman machine init` and `podman machine start` to manage a new Linux VM\n"+
			"Error: unable to connect to Podman socket: Get \"http://d/v%s/libpod/_ping\": dial unix %s: connect: no such file or directory\n", PodmanVersion, strings.TrimPrefix(host, "unix://"))
		return 125
	}
	msg := fmt.Sprintf("Cannot connect to the Docker daemon at %s. Is the docker daemon running?", f.dockerHost())
	switch f.sub {
	case "run", "create":
		fmt.Fprintf(f.stderr, "docker: %s\n\nRun 'docker %s --help' for more information\n", msg, f.sub)
		return 125
	case "version":
		fmt.Fprintf(f.stdout, `{"Client":{"Version":"%s","ApiVersion":"1.50","DefaultAPIVersion":"1.50","GitCommit":"e6534b4","GoVersion":"go1.24.3","Os":"linux","Arch":"amd64","Context":"default"},"Server":null}`+"\n", DockerClientVersion)
	case "info":
		fmt.Fprintln(f.stdout, `{"ID":"","Containers":0,"ServerVersion":"","SecurityOptions":null,"ClientInfo":{"Debug":false,"Context":"default"}}`)
	}
	fmt.Fprintln(f.stderr, msg)
	return 1
}

func (f *fake) usage(msg string) int {
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: %s\n", msg)
		return 125
	}
	fmt.Fprintf(f.stderr, "docker: %s\n\nRun 'docker --help' for more information\n", msg)
	return 1
}

// faults applies the FAKEENGINE_*_<SUB> knobs for this subcommand.
func (f *fake) faults() (int, bool) {
	key := strings.ToUpper(strings.ReplaceAll(f.sub, "-", ""))
	if d := f.env["FAKEENGINE_DELAY_"+key]; d != "" {
		if dur, err := time.ParseDuration(d); err == nil {
			time.Sleep(dur)
		}
	}
	if f.env["FAKEENGINE_HANG_"+key] == "1" {
		sleepForever()
	}
	if f.env["FAKEENGINE_GARBAGE_"+key] == "1" {
		fmt.Fprintln(f.stdout, "\x00garbage{{not json]] from a confused engine")
		return 0, true
	}
	spec := f.env["FAKEENGINE_FAIL_"+key]
	if spec == "" {
		return 0, false
	}
	if n := f.env["FAKEENGINE_FAIL_"+key+"_TIMES"]; n != "" {
		limit, _ := strconv.Atoi(n)
		if f.bumpCounter("fail-"+key) > limit {
			return 0, false
		}
	}
	if n := f.env["FAKEENGINE_FAIL_"+key+"_AFTER"]; n != "" {
		ok, _ := strconv.Atoi(n)
		if f.bumpCounter("after-"+key) <= ok {
			return 0, false
		}
	}
	codeStr, msg, _ := strings.Cut(spec, ":")
	code, err := strconv.Atoi(codeStr)
	if err != nil {
		code = 1
	}
	msg = strings.ReplaceAll(msg, `\n`, "\n")
	if msg != "" {
		fmt.Fprintln(f.stderr, msg)
	}
	return code, true
}

// bumpCounter increments a counter file and returns its new value.
func (f *fake) bumpCounter(name string) int {
	n := 0
	_ = f.st.update(func(*State) error {
		p := f.st.path(name + ".count")
		b, _ := os.ReadFile(p)
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		n++
		return os.WriteFile(p, []byte(strconv.Itoa(n)), 0o644)
	})
	return n
}

// version prints the engines' version JSON. The engine's architecture is
// this host's (the fake's sandboxes run on it), or FAKEENGINE_ARCH.
func (f *fake) version() int {
	arch := f.env["FAKEENGINE_ARCH"]
	if arch == "" {
		arch = goruntime.GOARCH
	}
	if f.dialect == "podman" {
		fmt.Fprintf(f.stdout, `{"Client":{"APIVersion":"%[1]s","Version":"%[1]s","GoVersion":"go1.19.8","GitCommit":"","BuiltTime":"Thu Jan  1 00:00:00 1970","Built":0,"OsArch":"linux/%[2]s","Os":"linux"}}`+"\n", PodmanVersion, arch)
		return 0
	}
	fmt.Fprintf(f.stdout, `{"Client":{"Version":"%s","ApiVersion":"1.41","DefaultAPIVersion":"1.50","GitCommit":"e6534b4","GoVersion":"go1.24.3","Os":"linux","Arch":"%s","Context":"default"},"Server":{"Platform":{"Name":""},"Components":[{"Name":"Engine","Version":"%s","Details":{"ApiVersion":"1.41"}}],"Version":"%s","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"%s"}}`+"\n",
		DockerClientVersion, goruntime.GOARCH, DockerServerVersion, DockerServerVersion, arch)
	return 0
}

func (f *fake) info() int {
	rootless := f.env["FAKEENGINE_ROOTLESS"] == "1"
	if f.dialect == "podman" {
		out := map[string]any{
			"host": map[string]any{"arch": "amd64", "cgroupManager": "cgroupfs", "cgroupVersion": "v1",
				"ociRuntime": map[string]any{"name": "runc", "path": "/usr/bin/runc"},
				"security":   map[string]any{"rootless": rootless, "seccompEnabled": true}},
			"store":   map[string]any{"graphDriverName": "overlay", "graphStatus": map[string]string{"Backing Filesystem": "extfs"}},
			"version": map[string]any{"APIVersion": PodmanVersion, "Version": PodmanVersion, "OsArch": "linux/amd64"},
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(f.stdout, string(b))
		return 0
	}
	sec := []string{"name=seccomp,profile=default"}
	if rootless {
		sec = append(sec, "name=rootless")
	}
	out := map[string]any{"ID": "FAKE:ENGINE", "ServerVersion": DockerServerVersion, "SecurityOptions": sec,
		"CgroupVersion": "1", "Driver": "overlay2", "DriverStatus": [][]string{{"Backing Filesystem", "extfs"}}, "OSType": "linux",
		"Runtimes": f.runtimeTable(), "DefaultRuntime": "runc"}
	b, _ := json.Marshal(out)
	fmt.Fprintln(f.stdout, string(b))
	return 0
}

// runtimeTable is docker info's Runtimes: containerd's two names for runc
// and the daemon's own (captured), and any more the fake is given.
func (f *fake) runtimeTable() map[string]any {
	t := map[string]any{"io.containerd.runc.v2": map[string]string{"path": "runc"}, "io.containerd.runtime.v1.linux": map[string]string{"path": "runc"}}
	for _, r := range f.runtimes() {
		t[r] = map[string]string{"path": r}
	}
	return t
}

// notFound prints the engine's "no such container" for ref.
func (f *fake) notFound(ref string) {
	switch {
	case f.dialect == "podman" && f.sub == "inspect":
		fmt.Fprintf(f.stderr, "Error: inspecting object: no such container %s\n", ref)
	case f.dialect == "podman":
		fmt.Fprintf(f.stderr, "Error: no container with name or ID %q found: no such container\n", ref)
	default:
		fmt.Fprintf(f.stderr, "Error response from daemon: No such container: %s\n", ref)
	}
}

// notFoundCode is the exit status for a missing container, per subcommand.
func (f *fake) notFoundCode() int {
	if f.dialect == "podman" {
		if f.sub == "rm" {
			return 1
		}
		return 125
	}
	return 1
}

func (f *fake) fail(err error) int {
	fmt.Fprintf(f.stderr, "Error: fake engine: %v\n", err)
	return 125
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
