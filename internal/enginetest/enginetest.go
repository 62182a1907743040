// Package enginetest gives test suites the engines to run against: the fake
// docker and podman always, and the real docker, rootful podman and rootless
// podman that scripts/engines.sh set up (HSBX_IT_* variables). Without real
// engines their targets are skipped with a visible note, or fail when
// HSBX_REQUIRE_ENGINES=1 (CI), so a green CI run means the real engines ran.
package enginetest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hsbx/hsbx/fakebin"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/sshshare"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/kubectl"
)

// Main is TestMain for a package that uses Targets: it puts the fake
// docker, podman and kubectl on PATH as real executables, and keeps
// copies off the exec channel (HSBX_COPY_CHANNEL_MAX=0).
// FAKEENGINE_DIR defaults to a directory of its own under the OS temp
// dir, so examples can use the fakes with nothing but PATH. It and every
// TempDir are removed when the tests end.
func Main(m *testing.M) { MainWith(m, nil, nil) }

// MainWith is Main with more commands the test binary can run as (name →
// its main, beside the fakes) and a set-up that runs before the tests —
// only then, not each time the binary runs as one of the commands.
func MainWith(m *testing.M, commands map[string]func(), setup func()) {
	// A test that names the test binary as hsbx's ssh stand-in
	// (hsbx.Options.SSHStandIn): run as it, it is that.
	if sshshare.Invoked(os.Args[0], os.Getenv) {
		os.Exit(sshshare.Main(os.Args[1:]))
	}
	cmds := map[string]func(){"docker": fakebin.Docker, "podman": fakebin.Podman, "kubectl": fakebin.Kubectl}
	maps.Copy(cmds, commands)
	testscript.Main(testRun{m: m, setup: setup}, cmds)
}

// testRun is the test binary's own run (testscript.Main calls Run only
// there): set up, run the tests, remove the temp dirs.
type testRun struct {
	m     *testing.M
	setup func()
}

func (r testRun) Run() int {
	defer removeTempDirs()
	defer runAtExit()
	if os.Getenv("FAKEENGINE_DIR") == "" {
		dir, err := TempDir("hsbx-fakeengine-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Setenv("FAKEENGINE_DIR", dir)
	}
	// The fakes run the exec channel's agent on this host: a copy through
	// it (copy_channel_max) would be made here, not in a sandbox.
	os.Setenv("HSBX_COPY_CHANNEL_MAX", "0")
	if r.setup != nil {
		r.setup()
	}
	return r.m.Run()
}

// tempDirs are the directories TempDir made, removed when Main's tests
// end: what outlives one test (a binary built once per process, the
// fakes' state) and so cannot use t.TempDir.
var tempDirs struct {
	sync.Mutex
	paths []string
}

// TempDir makes a directory under the OS temp dir that Main removes when
// the tests end.
func TempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	tempDirs.Lock()
	defer tempDirs.Unlock()
	tempDirs.paths = append(tempDirs.paths, dir)
	return dir, nil
}

func removeTempDirs() {
	tempDirs.Lock()
	defer tempDirs.Unlock()
	for _, dir := range tempDirs.paths {
		_ = os.RemoveAll(dir)
	}
	tempDirs.paths = nil
}

// atExit holds what runs when Main's tests end, last registered first.
var atExit struct {
	sync.Mutex
	fns []func()
}

// AtExit registers fn to run when Main's tests end (before the temp dirs
// go): the removal of what outlives one test, as a shared sandbox does.
func AtExit(fn func()) {
	atExit.Lock()
	defer atExit.Unlock()
	atExit.fns = append(atExit.fns, fn)
}

func runAtExit() {
	atExit.Lock()
	fns := atExit.fns
	atExit.fns = nil
	atExit.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// lasting holds Lasting's targets, by name.
var lasting struct {
	sync.Mutex
	targets map[string]Target
}

// Lasting returns tg with what a test's target keeps for the test alone
// (a fake engine's state, the state dir, the cluster namespace) made to
// last until Main's tests end: for a sandbox that many tests share. One
// per target name; the first call makes it.
func Lasting(t testing.TB, tg Target) Target {
	t.Helper()
	lasting.Lock()
	defer lasting.Unlock()
	if lt, ok := lasting.targets[tg.Name]; ok {
		return lt
	}
	dir, err := TempDir("hsbx-lasting-")
	if err != nil {
		t.Fatal(err)
	}
	lt := tg
	lt.Env = nil
	for _, kv := range tg.Env {
		if !strings.HasPrefix(kv, "FAKEENGINE_DIR=") {
			lt.Env = append(lt.Env, kv)
		}
	}
	lt.StateDir = filepath.Join(dir, "state")
	if err := os.Mkdir(lt.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	switch {
	case tg.Fake:
		lt.Env = append(lt.Env, "FAKEENGINE_DIR="+filepath.Join(dir, "engine"))
	case tg.Rootless:
		_ = os.Chmod(dir, 0o755)
		chownRootless(lt.StateDir)
	case tg.Kube.Namespace != "":
		ns := fmt.Sprintf("hsbx-shared-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
		if out, err := exec.Command(tg.Bin, "create", "namespace", ns).CombinedOutput(); err != nil {
			t.Fatalf("kubectl create namespace %s: %v\n%s", ns, err, out)
		}
		AtExit(func() { _ = exec.Command(tg.Bin, "delete", "namespace", ns, "--wait=false").Run() })
		lt.Kube.Namespace = ns
	}
	if lasting.targets == nil {
		lasting.targets = map[string]Target{}
	}
	lasting.targets[tg.Name] = lt
	return lt
}

// Soak reports whether this run is `make soak` (HSBX_SOAK=1): stress
// counts, trials and sizes at full size. The merge gate (`make test`,
// CI) runs the same tests with the small counts: every behaviour proven
// once on every engine, the long trials left to the soak.
func Soak() bool { return os.Getenv("HSBX_SOAK") == "1" }

// Count is a stress test's count: gate in the merge gate, soak under
// `make soak`. One knob for every trial count, session count, size and
// concurrency a test repeats for confidence rather than for a behaviour.
func Count(gate, soak int) int {
	if Soak() {
		return soak
	}
	return gate
}

// Target is one engine to test against.
type Target struct {
	Name     string   // fake-docker, fake-podman, docker, podman, podman-rootless
	Bin      string   // the engine CLI
	Image    string   // an image present in it
	Env      []string // the client's environment
	Fake     bool
	Rootless bool
	// StateDir is a directory the engine's user can use for bind mounts
	// (the rootless user cannot enter root's home).
	StateDir string
	// Kube is the context and namespace of a kubectl target;
	// StorageClass the cluster's class for claims
	// (HSBX_IT_KUBE_STORAGE_CLASS, "" = none).
	Kube         kubectl.Target
	StorageClass string
	// GVisor is what oci_runtime names to run a sandbox under gVisor on
	// this target: docker's runtime name, podman's path to runsc, the
	// cluster's RuntimeClass (HSBX_IT_GVISOR_*, set by scripts/engines.sh
	// and scripts/kube.sh); the fakes' "runsc" is a name only. "" = none.
	GVisor string
	// Remote: the engine is reached over ssh, in a mount namespace where
	// no path of this machine exists (SSHTargets).
	Remote bool
}

// Kube returns the real Kubernetes cluster that scripts/kube.sh set up
// (HSBX_IT_KUBECTL, KUBECONFIG, HSBX_IT_KUBE_IMAGE), with a namespace of
// its own for this test, deleted afterwards. Without a cluster the test
// is skipped with a note, or fails when HSBX_REQUIRE_ENGINES=1 (CI).
func Kube(t *testing.T) Target {
	t.Helper()
	tg, ok := KubeIfConfigured(t)
	if !ok {
		t.SkipNow()
	}
	return tg
}

// KubeIfConfigured is Kube for a suite that runs on several targets: ok
// is false (with a note logged, or an error under HSBX_REQUIRE_ENGINES=1)
// when there is no cluster.
func KubeIfConfigured(t *testing.T) (Target, bool) {
	t.Helper()
	bin, image := os.Getenv("HSBX_IT_KUBECTL"), os.Getenv("HSBX_IT_KUBE_IMAGE")
	if bin == "" || image == "" || os.Getenv("KUBECONFIG") == "" {
		msg := "real Kubernetes not configured (HSBX_IT_KUBECTL, HSBX_IT_KUBE_IMAGE or KUBECONFIG unset): run `make kube` (scripts/kube.sh) and source its env.sh"
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Errorf("%s, but HSBX_REQUIRE_ENGINES=1", msg)
		} else {
			t.Log("SKIP " + msg)
		}
		return Target{}, false
	}
	ns := fmt.Sprintf("hsbx-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if out, err := exec.Command(bin, "create", "namespace", ns).CombinedOutput(); err != nil {
		t.Fatalf("kubectl create namespace %s: %v\n%s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "delete", "namespace", ns, "--wait=false").CombinedOutput(); err != nil {
			t.Logf("kubectl delete namespace %s: %v\n%s", ns, err, out)
		}
	})
	dir := t.TempDir()
	return Target{Name: "kubectl", Bin: bin, Image: image, Env: os.Environ(), StateDir: dir,
		Kube: kubectl.Target{Namespace: ns}, StorageClass: os.Getenv("HSBX_IT_KUBE_STORAGE_CLASS"), GVisor: os.Getenv("HSBX_IT_GVISOR_KUBE")}, true
}

// Targets lists the engines: fakes always, real ones when configured.
func Targets(t *testing.T) []Target {
	t.Helper()
	var ts []Target
	for _, name := range []string{"docker", "podman"} {
		bin, err := proc.LookPath(name)
		if err != nil || !strings.Contains(bin, "testscript-main") {
			t.Fatalf("fake %s not on PATH (%s, %v): call enginetest.Main from TestMain", name, bin, err)
		}
		dir := t.TempDir()
		ts = append(ts, Target{Name: "fake-" + name, Bin: bin, Image: "hsbx-busybox", Fake: true, GVisor: "runsc",
			Env:      append(os.Environ(), "FAKEENGINE_DIR="+filepath.Join(dir, "engine"), "FAKEENGINE_RUNTIMES=runsc"),
			StateDir: filepath.Join(dir, "state")})
	}
	image := os.Getenv("HSBX_IT_IMAGE")
	for _, real := range []struct{ name, envVar, gvisor string }{
		{"docker", "HSBX_IT_DOCKER", "HSBX_IT_GVISOR_DOCKER"}, {"podman", "HSBX_IT_PODMAN", "HSBX_IT_GVISOR_PODMAN"},
		{"podman-rootless", "HSBX_IT_PODMAN_ROOTLESS", "HSBX_IT_GVISOR_PODMAN"},
	} {
		bin := os.Getenv(real.envVar)
		if bin == "" || image == "" {
			msg := fmt.Sprintf("real %s not configured (%s unset): run `make engines` (scripts/engines.sh) and source its env.sh", real.name, real.envVar)
			if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
				t.Errorf("%s, but HSBX_REQUIRE_ENGINES=1", msg)
			} else {
				t.Log("SKIP " + msg)
			}
			continue
		}
		tg := Target{Name: real.name, Bin: bin, Image: image, Env: os.Environ(), Rootless: strings.HasSuffix(real.name, "rootless"),
			GVisor: os.Getenv(real.gvisor)}
		tg.StateDir = sharedStateDir(t, tg.Rootless)
		ts = append(ts, tg)
	}
	return ts
}

// SSHTargets are the engines this machine reaches only over ssh
// (scripts/engines-remote.sh), each in a mount namespace of its own where
// no host path of this machine exists: docker (HSBX_IT_DOCKER_SSH, with
// HSBX_IT_SSH_PATH first on PATH for the ssh binary docker runs) and
// podman (HSBX_IT_PODMAN_SSH, its own ssh client: CONTAINER_SSHKEY and a
// HOME whose .ssh/known_hosts holds HSBX_IT_SSH_KNOWN_HOSTS). Each has a
// HOME of its own. Without them the test is skipped with a note, or fails
// under HSBX_REQUIRE_ENGINES=1 (CI).
func SSHTargets(t *testing.T) []Target {
	t.Helper()
	ts, ok := SSHTargetsIfConfigured(t)
	if !ok {
		t.SkipNow()
	}
	return ts
}

// SSHTargetsIfConfigured is SSHTargets for a suite that runs on several
// targets: ok is false (with a note logged, or an error under
// HSBX_REQUIRE_ENGINES=1) when the engines reached over ssh are not set up.
func SSHTargetsIfConfigured(t *testing.T) ([]Target, bool) {
	t.Helper()
	dockerHost, path, dockerBin := os.Getenv("HSBX_IT_DOCKER_SSH"), os.Getenv("HSBX_IT_SSH_PATH"), os.Getenv("HSBX_IT_DOCKER")
	podmanHost, key, known, podmanBin := os.Getenv("HSBX_IT_PODMAN_SSH"), os.Getenv("HSBX_IT_SSH_KEY"), os.Getenv("HSBX_IT_SSH_KNOWN_HOSTS"), os.Getenv("HSBX_IT_PODMAN")
	image := os.Getenv("HSBX_IT_IMAGE")
	if dockerHost == "" || path == "" || dockerBin == "" || podmanHost == "" || key == "" || known == "" || podmanBin == "" || image == "" {
		msg := "the engines reached over ssh are not configured (HSBX_IT_DOCKER_SSH, HSBX_IT_PODMAN_SSH, ... unset): run `make engines` (scripts/engines.sh) and source its env.sh"
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Fatalf("%s, but HSBX_REQUIRE_ENGINES=1", msg)
		}
		t.Log(msg)
		return nil, false
	}
	env := func(home string, set ...string) []string {
		var out []string
		for _, kv := range os.Environ() {
			switch k, v, _ := strings.Cut(kv, "="); k {
			case "DOCKER_HOST", "DOCKER_CONTEXT", "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINER_SSHKEY", "HOME":
			case "PATH":
				out = append(out, "PATH="+path+string(os.PathListSeparator)+v)
			default:
				out = append(out, kv)
			}
		}
		return append(append(out, "HOME="+home), set...)
	}
	var ts []Target
	for _, tg := range []struct {
		name, bin string
		set       []string
		gvisor    string
	}{
		{"docker-ssh", dockerBin, []string{"DOCKER_HOST=" + dockerHost}, os.Getenv("HSBX_IT_GVISOR_DOCKER_SSH")},
		// podman's remote client cannot choose a runtime (no --runtime).
		{"podman-ssh", podmanBin, []string{"CONTAINER_HOST=" + podmanHost, "CONTAINER_SSHKEY=" + key}, ""},
	} {
		home := t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte(known+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, Target{Name: tg.name, Bin: tg.bin, Image: image, Env: env(home, tg.set...), StateDir: sharedStateDir(t, false),
			Remote: true, GVisor: tg.gvisor})
	}
	return ts, true
}

// AnotherStateDir is the state dir of another host on tg's engine (a test
// of what two hosts do at once): one the engine's user can enter.
func (tg Target) AnotherStateDir(t *testing.T) string { return sharedStateDir(t, tg.Rootless) }

// sharedStateDir makes a state dir the engine's user can enter: for the
// rootless engine it is owned by that user (HSBX_IT_ROOTLESS_UID).
func sharedStateDir(t *testing.T, rootless bool) string {
	dir, err := os.MkdirTemp("", "hsbx-it-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if rootless {
		chownRootless(dir)
	}
	return dir
}

// chownRootless gives dir to the rootless engine's user
// (HSBX_IT_ROOTLESS_UID), mode 0755.
func chownRootless(dir string) {
	var uid, gid int
	if _, err := fmt.Sscanf(os.Getenv("HSBX_IT_ROOTLESS_UID")+":"+os.Getenv("HSBX_IT_ROOTLESS_GID"), "%d:%d", &uid, &gid); err == nil {
		_ = os.Chmod(dir, 0o755)
		_ = os.Chown(dir, uid, gid)
	}
}

// Open returns the Runtime for t, detected like hsbx does.
func (tg Target) Open(t *testing.T) runtime.Runtime { return tg.OpenWith(t, nil) }

// OpenWith is Open with a runner of the caller's (to log or count calls).
func (tg Target) OpenWith(t *testing.T, r *proc.Runner) runtime.Runtime {
	t.Helper()
	o := detect.Options{Runtime: tg.Bin, Engine: enginecli.Options{Env: tg.Env, Timeout: 60 * time.Second, Runner: r}, Kubernetes: tg.Kube}
	f, err := detect.Find(context.Background(), o)
	if err != nil {
		t.Fatalf("detect %s: %v", tg.Bin, err)
	}
	return detect.New(f, o)
}

// FakeKube is the fake kubectl (fakebin), with a state dir of its own.
func FakeKube(t *testing.T) Target {
	t.Helper()
	bin, err := proc.LookPath("kubectl")
	if err != nil || !strings.Contains(bin, "testscript-main") {
		t.Fatalf("fake kubectl not on PATH (%s, %v): call enginetest.Main from TestMain", bin, err)
	}
	dir := t.TempDir()
	return Target{Name: "fake-kubectl", Bin: bin, Image: "hsbx-busybox", Fake: true,
		Env:      append(os.Environ(), "FAKEENGINE_DIR="+filepath.Join(dir, "engine"), "FAKEENGINE_RUNTIMES=gvisor"),
		StateDir: filepath.Join(dir, "state"), StorageClass: "hsbx-local", GVisor: "gvisor"}
}

// Dialect is the dialect the target should be detected as.
func (tg Target) Dialect() runtime.Dialect {
	if strings.HasSuffix(tg.Name, "kubectl") {
		return runtime.Kubectl
	}
	if strings.Contains(tg.Name, "podman") {
		return runtime.Podman
	}
	return runtime.Docker
}

// built is one static build of a package per test process.
type built struct {
	once sync.Once
	path string
	err  error
}

var agentBuild, hostileBuild, probeBuild built

// build builds pkg statically (CGO_ENABLED=0, as `make build` does) once
// per test process and returns its path.
func (b *built) build(t testing.TB, pkg, name string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := TempDir("hsbx-agent-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// AgentBinary is hsbx built statically: the exec channel's agent for
// tests whose own binary is not static.
func AgentBinary(t testing.TB) string {
	t.Helper()
	return agentBuild.build(t, "github.com/hsbx/hsbx/cmd/hsbx", "hsbx")
}

// NetProbeBinary is the egress tests' client for inside a sandbox
// (testdata/netprobe): an unmodified net/http client, and the ways around
// the proxy a hostile process would try.
func NetProbeBinary(t testing.TB) string {
	t.Helper()
	return probeBuild.build(t, "github.com/hsbx/hsbx/internal/enginetest/testdata/netprobe", "netprobe")
}

// HostileAgentBinary is an agent that answers every copy out with an
// archive built to plant a link to a host file (testdata/hostileagent):
// what root in a sandbox could put at the agent's path.
func HostileAgentBinary(t testing.TB) string {
	t.Helper()
	return hostileBuild.build(t, "github.com/hsbx/hsbx/internal/enginetest/testdata/hostileagent", "hostile-agent")
}

// HostAddress is an IPv4 address of this host other than loopback: what
// a sandbox with a network reaches the host's own services at (its
// bridge's gateway routes to every local address), and what the egress
// tests' services listen on. A host with none skips the test.
func HostAddress(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no IPv4 address but loopback")
	return ""
}
