package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// hermesFilters are the `ps` filters the Hermes backend's reuse probe uses
// for (profile, task) without an egress proxy: sandbox.HermesContract's
// filtered rows with Hermes's values.
func hermesFilters(profile, task string) []string {
	var fs []string
	for _, row := range sandbox.HermesContract {
		if !row.Filtered {
			continue
		}
		v := map[string]string{
			sandbox.LabelAgent: "1", sandbox.LabelTask: sandbox.SanitizeLabel(task),
			sandbox.LabelProfile: sandbox.SanitizeLabel(profile), sandbox.LabelEgress: "off",
		}[row.Label]
		fs = append(fs, row.Label+"="+v)
	}
	return fs
}

// An hsbx-made sandbox is found by exactly the filters Hermes uses, so a
// Hermes process attaches to it instead of making a duplicate.
func TestHermesFindsHsbxSandbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		res, err := e.manager().Sandbox(e.key("found"), e.spec()).Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs := hermesFilters("hsbx-test", e.key("found").Task)
		if len(fs) != 4 {
			t.Fatalf("Hermes filters on 4 labels, the contract lists %d: %v", len(fs), fs)
		}
		cs, err := e.rt.List(ctx, runtime.ListOptions{Labels: fs})
		if err != nil || len(cs) != 1 || cs[0].ID != res.ID {
			t.Fatalf("Hermes's probe %v finds %+v (%v), want exactly %s", fs, cs, err, res.ID)
		}
	})
}

// runHermesShaped makes a container the way the Hermes backend does: a
// hermes-<8 hex> name, Hermes's labels, no hsbx.* labels.
func runHermesShaped(t *testing.T, e *env, profileLabel, taskLabel string) string {
	t.Helper()
	name := fmt.Sprintf("hermes-%08x", time.Now().UnixNano()&0xffffffff)
	id, err := e.rt.Run(context.Background(), runtime.RunSpec{Name: name, Image: e.tg.Image, Cmd: []string{"sleep", "infinity"},
		Labels: map[string]string{"hermes-agent": "1", "hermes-task-id": taskLabel, "hermes-profile": profileLabel, "hermes-egress": "off"},
		Args:   e.airgap("--init")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rt.Remove(context.Background(), true, id) })
	return id
}

// A Hermes-made sandbox whose labels name the key unambiguously is this
// sandbox: attached to (running), started (stopped), listed, torn down.
func TestHermesMadeSandboxIsAdopted(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.spec()
		spec.Network = e.kube() // air-gapped Pods are refused
		k := sandbox.Key{Profile: "hsbx-test", Task: e.base + "adopt"}
		id := runHermesShaped(t, e, "hsbx-test", k.Task)
		m := e.manager()
		res, err := m.Sandbox(k, spec).Ensure(ctx)
		if err != nil || res.ID != id || res.Action != sandbox.Reused {
			t.Fatalf("Ensure next to a Hermes sandbox: %+v %v, want reuse of %s", res, err, id)
		}
		var out bytes.Buffer
		code, err := m.Sandbox(k, spec).Exec(ctx, sandbox.Command{Argv: []string{"hostname"}, Stdout: &out})
		host := strings.TrimSpace(out.String()) // a container's short id; a Pod's name
		if err != nil || code != 0 || host == "" || (!strings.HasPrefix(id, host) && !strings.HasSuffix(id, "/"+host)) {
			t.Fatalf("exec ran in %q (%d %v), want the Hermes sandbox %.12s", out.String(), code, err, id)
		}
		ls, err := m.List(ctx, sandbox.Scope{Profile: "hsbx-test"}, false, nil)
		if err != nil || !slices.ContainsFunc(ls, func(l sandbox.Listing) bool { return l.ID == id && l.Task == k.Task }) {
			t.Errorf("ls does not show the adopted sandbox: %+v %v", ls, err)
		}
		if e.kube() {
			// Stopping deletes a Pod: there is nothing to start again.
			gone, err := m.Sandbox(k, spec).Down(ctx)
			if err != nil || len(gone.Containers) != 1 || gone.Containers[0].ID != id {
				t.Fatalf("Down: %+v %v", gone, err)
			}
			return
		}
		if err := e.rt.Stop(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		res, err = e.manager().Sandbox(k, spec).Ensure(ctx)
		if err != nil || res.ID != id || res.Action != sandbox.Started {
			t.Fatalf("Ensure of the stopped Hermes sandbox: %+v %v", res, err)
		}
		gone, err := m.Sandbox(k, spec).Down(ctx)
		if err != nil || len(gone.Containers) != 1 || gone.Containers[0].ID != id {
			t.Fatalf("Down: %+v %v", gone, err)
		}
	})
}

// Where Hermes's sanitizer changed the task ("a/b" and "a_b" share labels),
// hsbx never attaches: it warns once, naming the container, and keeps its
// own sandbox.
func TestAmbiguousHermesSandboxIsNotAdopted(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		k := sandbox.Key{Profile: "hsbx-test", Task: e.base + "amb/x"}
		id := runHermesShaped(t, e, "hsbx-test", sandbox.SanitizeLabel(k.Task))
		var warnings []string
		m := sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(), Environ: e.tg.Env,
			StopGrace: 5 * time.Second, Warn: func(s string) {
				if strings.Contains(s, "Hermes-made") {
					warnings = append(warnings, s)
				}
			}})
		res, err := m.Sandbox(k, e.spec()).Ensure(ctx)
		if err != nil || res.ID == id {
			t.Fatalf("Ensure attached to an ambiguous Hermes sandbox: %+v %v", res, err)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], id[:12]) || !strings.Contains(warnings[0], "will not attach") {
			t.Errorf("warnings %q, want one naming %.12s", warnings, id)
		}
		m.Sandbox(k, e.spec()).Down(ctx)
		m.Sandbox(k, e.spec()).Ensure(ctx)
		if len(warnings) != 1 {
			t.Errorf("warned again: %q", warnings)
		}
		if cs, err := e.rt.Inspect(ctx, id); err != nil || cs[0].State != runtime.StateRunning {
			t.Errorf("the Hermes sandbox was touched: %+v %v", cs, err)
		}
	})
}

// network = false (TERMINAL_DOCKER_NETWORK=false) is an air-gapped sandbox
// (on Kubernetes: a Pod its NetworkPolicy keeps off the network, proved
// when it was made), and an existing networked one is refused, never
// silently reused.
func TestNetworkOff(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		spec := e.spec()
		spec.Network = false
		res, err := e.manager().Sandbox(e.key("airgap"), spec).Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := e.rt.Inspect(ctx, res.ID)
		if err != nil || cs[0].NetworkMode != "none" {
			t.Fatalf("NetworkMode %q (%v), want none", cs[0].NetworkMode, err)
		}
		if e.tg.Rootless {
			return // rootless podman here cannot make a networked sandbox at all (no /dev/net/tun)
		}
		on := e.spec()
		on.Network, on.Explicit = true, map[string]bool{"network": true}
		if _, err := e.manager().Sandbox(e.key("netted"), on).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = e.manager().Sandbox(e.key("netted"), spec).Ensure(ctx)
		var se *sandbox.SpecError
		if !errors.As(err, &se) || se.Setting != "network" {
			t.Fatalf("a networked sandbox reused with network off: %v", err)
		}
		_, err = e.manager().Sandbox(e.key("netted"), spec).Exec(ctx, sandbox.Command{Argv: []string{"true"}})
		if !errors.As(err, &se) {
			t.Fatalf("exec in a networked sandbox with network off: %v", err)
		}
	})
}

// TERMINAL_SANDBOX_DIR: the persistent dirs in Hermes's layout, so both
// tools see the same files for a task.
func TestSandboxDirLayout(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("/workspace and /root are the Pod's own emptyDirs; a Pod cannot bind the host's sandbox dir")
		ctx := context.Background()
		spec := e.spec()
		spec.SandboxDir = filepath.Join(e.tg.StateDir, "hermes-sandboxes")
		spec.Network = false // one run on every engine (rootless here cannot network)
		task := e.base + "files"
		if err := os.MkdirAll(filepath.Join(spec.SandboxDir, "docker", task, "workspace"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spec.SandboxDir, "docker", task, "workspace", "from-hermes"), []byte("hi\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if e.tg.Rootless {
			chownTree(t, spec.SandboxDir)
		}
		sb := e.manager().Sandbox(sandbox.Key{Profile: "hsbx-test", Task: task}, spec)
		var out bytes.Buffer
		if _, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"cat", "/workspace/from-hermes"}, Stdout: &out}); err != nil || out.String() != "hi\n" {
			if !e.tg.Fake { // the fakes have no files; the run argv is checked below
				t.Fatalf("/workspace does not show Hermes's file: %q %v", out.String(), err)
			}
		}
		want := "-v " + filepath.Join(spec.SandboxDir, "docker", task, "workspace") + ":/workspace -v " + filepath.Join(spec.SandboxDir, "docker", task, "home") + ":/root"
		if n := count(e.log.all(), want); n != 1 {
			t.Errorf("run argv without %q: %v", want, e.log.all())
		}
	})
}

func TestSandboxDirName(t *testing.T) {
	for task, want := range map[string]string{
		"plain-task_1.0": "plain-task_1.0",
		"":               "default",
		"a:b":            "a_b-" + sha12("a:b"),
		"a_b":            "a_b",
		"..":             "task-" + sha12(".."),
		"x.":             "x-" + sha12("x."),
		"é":              "task-" + sha12("é"),
	} {
		if got := sandbox.TaskDirName(task); got != want {
			t.Errorf("TaskDirName(%q) = %q, want %q", task, got, want)
		}
	}
	long := strings.Repeat("a", 129)
	if got := sandbox.TaskDirName(long); len(got) != 128 || !strings.HasSuffix(got, "-"+sha12(long)) {
		t.Errorf("long task: %q", got)
	}
}

func sha12(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

// chownTree gives dir to the rootless engine's user, who must enter it.
func chownTree(t *testing.T, dir string) {
	var uid, gid int
	if _, err := fmt.Sscanf(os.Getenv("HSBX_IT_ROOTLESS_UID")+":"+os.Getenv("HSBX_IT_ROOTLESS_GID"), "%d:%d", &uid, &gid); err != nil {
		t.Fatalf("rootless uid: %v", err)
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, gid) })
}

// The shared container key: Hermes's profile label, one sandbox for every
// profile that names the key, distinct from any profile's own.
func TestSharedContainerKey(t *testing.T) {
	sc := sandbox.Scope{Profile: "room-a", Shared: "gateway/rooms"}
	if got, want := sc.HermesProfile(), "gateway_rooms-"+sha12("gateway/rooms"); got != want {
		t.Errorf("HermesProfile = %q, want %q", got, want)
	}
	long := sandbox.Scope{Shared: strings.Repeat("k", 80)}.HermesProfile()
	if len(long) != 50+1+12 {
		t.Errorf("long shared key label %q", long)
	}
	a := sandbox.Key{Profile: "room-a", Task: "t", Shared: "gw"}
	b := sandbox.Key{Profile: "room-b", Task: "t", Shared: "gw"}
	own := sandbox.Key{Profile: "gw", Task: "t"}
	if a.Hash() != b.Hash() || a.Name() != b.Name() || a.Hash() == own.Hash() {
		t.Errorf("shared key identity: %s %s %s", a.Hash(), b.Hash(), own.Hash())
	}
	if !a.Scope().Contains(b.Labels()) || own.Scope().Contains(a.Labels()) || a.Scope().Contains(own.Labels()) {
		t.Errorf("scopes: a holds b's %v; own holds a's; a holds own's", b.Labels())
	}
}

// The s6-overlay rule: an image whose entrypoint is /init gets no --init
// and an exec /run, as the Hermes backend does.
func TestS6ImageGetsNoInit(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("kubectl cannot inspect the nodes' images, so s6-overlay images are not recognised")
		ctx := context.Background()
		image := e.tg.Image
		environ := []string{}
		if e.tg.Fake {
			environ = append(environ, "FAKEENGINE_IMAGE_ENTRYPOINT="+image+"=/init")
		} else {
			image = s6Image(t, e)
		}
		spec := e.spec()
		spec.Image, spec.Network = image, false
		m := sandbox.New(sandbox.Config{Runtime: e.openWith(environ), StateDir: e.tg.StateDir, CacheDir: e.t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}})
		res, err := m.Sandbox(e.key("s6"), spec).Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		runs := []string{}
		for _, l := range e.log.all() {
			if strings.Contains(l, " run ") {
				runs = append(runs, l)
			}
		}
		if len(runs) != 1 || strings.Contains(runs[0], "--init") || !strings.Contains(runs[0], "/run:rw,exec,nosuid") {
			t.Fatalf("run for an s6 image: %v", runs)
		}
		if cs, err := e.rt.Inspect(ctx, res.ID); err != nil || cs[0].State != runtime.StateRunning {
			t.Errorf("s6 sandbox not running: %+v %v", cs, err)
		}
	})
}

// s6Image commits an image of the target's busybox whose entrypoint is
// /init (a script that execs its arguments), once per target.
func s6Image(t *testing.T, e *env) string {
	name := "localhost/hsbx-s6-test"
	tmp := fmt.Sprintf("hsbx-s6-build-%d", time.Now().UnixNano())
	if out, err := runEngine(e, "run", "--name", tmp, "--network", "none", e.tg.Image, "sh", "-c", `printf '#!/bin/sh\nexec "$@"\n' > /init && chmod +x /init`); err != nil {
		t.Fatalf("building the s6 image: %v %s", err, out)
	}
	defer runEngine(e, "rm", "-f", tmp)
	if out, err := runEngine(e, "commit", "--change", `ENTRYPOINT ["/init"]`, tmp, name); err != nil {
		t.Fatalf("commit: %v %s", err, out)
	}
	return name
}
