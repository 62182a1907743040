package contract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

type target = enginetest.Target

// targets are the engines' targets and the kubectl runtime's: the fake
// kubectl always, the cluster when configured. Where a Pod differs by
// design (docs/kubernetes.md: stop deletes it; ids are UID/NAME; a Pod has
// no --network flag) the test says so with kube.
func targets(t *testing.T) []target {
	ts := append(enginetest.Targets(t), enginetest.FakeKube(t))
	if kt, ok := enginetest.KubeIfConfigured(t); ok {
		ts = append(ts, kt)
	}
	return ts
}

func kube(tg target) bool { return tg.Dialect() == runtime.Kubectl }

// each runs fn as a subtest per target, with a unique name prefix and
// removal of everything the test created.
func each(t *testing.T, fn func(t *testing.T, tg target, rt runtime.Runtime, prefix string)) {
	for _, tg := range targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			rt := tg.Open(t)
			prefix := fmt.Sprintf("hsbxct-%d-", time.Now().UnixNano()%1e9)
			t.Cleanup(func() {
				cs, _ := rt.List(context.Background(), runtime.ListOptions{Labels: []string{"hsbx-contract=" + prefix}})
				var ids []string
				for _, c := range cs {
					ids = append(ids, c.ID)
				}
				_ = rt.Remove(context.Background(), true, ids...)
			})
			fn(t, tg, rt, prefix)
		})
	}
}

func sandbox(tg target, prefix, name string) runtime.RunSpec {
	args := []string{"--init", "--network", "none"}
	if kube(tg) {
		args = []string{"--init"} // a Pod has no --network (hsbx refuses network = false there)
	}
	return runtime.RunSpec{
		Name:   prefix + name,
		Labels: map[string]string{"hsbx-contract": prefix, "hermes-agent": "1", "hermes-task-id": name},
		Args:   args,
		Image:  tg.Image,
		Cmd:    []string{"sleep", "infinity"},
	}
}

func TestIdentity(t *testing.T) {
	each(t, func(t *testing.T, tg target, rt runtime.Runtime, _ string) {
		ctx := context.Background()
		want := tg.Dialect()
		if rt.Dialect() != want {
			t.Fatalf("dialect %s, want %s", rt.Dialect(), want)
		}
		info, err := rt.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.ServerVersion == "" || info.Rootless != strings.HasSuffix(tg.Name, "rootless") {
			t.Errorf("info %+v", info)
		}
		v, err := rt.Version(ctx)
		if err != nil || v.Client == "" || v.Server == "" {
			t.Errorf("version %+v %v", v, err)
		}
	})
}

func TestRunListInspect(t *testing.T) {
	each(t, func(t *testing.T, tg target, rt runtime.Runtime, prefix string) {
		ctx := context.Background()
		before := time.Now().Add(-2 * time.Second)
		id, err := rt.Run(ctx, sandbox(tg, prefix, "a"))
		if err != nil {
			t.Fatal(err)
		}
		fullID := len(id) == 64
		if kube(tg) {
			fullID = strings.HasSuffix(id, "/"+prefix+"a") && len(id) == 37+len(prefix)+1 // UID/NAME
		}
		if !fullID {
			t.Fatalf("Run returned %q, want a full ID (kubectl: UID/NAME)", id)
		}
		cs, err := rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx-contract=" + prefix, "hermes-task-id=a"}})
		if err != nil || len(cs) != 1 || cs[0].ID != id || cs[0].State != runtime.StateRunning || cs[0].Name != prefix+"a" {
			t.Fatalf("List = %+v, %v", cs, err)
		}
		if cs[0].Labels["hermes-agent"] != "1" || cs[0].Created.Before(before) {
			t.Errorf("List entry %+v", cs[0])
		}
		// Status filter: a running container is not "exited".
		cs, err = rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx-contract=" + prefix}, Status: []runtime.State{runtime.StateExited}})
		if err != nil || len(cs) != 0 {
			t.Errorf("List exited = %+v, %v", cs, err)
		}
		got, err := rt.Inspect(ctx, id, prefix+"missing")
		if !errors.Is(err, runtime.ErrNotFound) || len(got) != 1 || got[0].ID != id {
			t.Fatalf("Inspect(present, missing) = %+v, %v", got, err)
		}
		var me *runtime.MissingError
		if !errors.As(err, &me) || len(me.IDs) != 1 || me.IDs[0] != prefix+"missing" {
			t.Errorf("MissingError %+v", err)
		}
		c := got[0]
		if c.State != runtime.StateRunning || c.Started.Before(before) || !c.Finished.IsZero() || c.Labels["hermes-task-id"] != "a" {
			t.Errorf("Inspect %+v", c)
		}
		// The same name again: the engine refuses, which is what makes creation race-free.
		if _, err := rt.Run(ctx, sandbox(tg, prefix, "a")); !errors.Is(err, runtime.ErrNameInUse) {
			t.Errorf("second Run with the same name: %v, want ErrNameInUse", err)
		}
		spec := sandbox(tg, prefix, "noimage")
		spec.Image = "hsbx-no-such-image:1"
		if _, err := rt.Run(ctx, spec); !errors.Is(err, runtime.ErrImageNotFound) {
			t.Errorf("Run with a missing image: %v, want ErrImageNotFound", err)
		}
	})
}

func TestExec(t *testing.T) {
	each(t, func(t *testing.T, tg target, rt runtime.Runtime, prefix string) {
		ctx := context.Background()
		spec := sandbox(tg, prefix, "x")
		// Names the engine's client reads too: the sandbox gets them, the
		// client keeps its own (its engine, its PATH and HOME, no proxy).
		nowhere := "unix:///hsbx-nowhere.sock"
		spec.Env = map[string]string{"HSBX_CT_SECRET": "s3cr3t-run", "DOCKER_HOST": nowhere, "CONTAINER_HOST": nowhere, "KUBECONFIG": "/hsbx-nowhere"}
		id, err := rt.Run(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		exec := func(env map[string]string, cmd ...string) (int, string, string, error) {
			var out, errb bytes.Buffer
			code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: cmd, Env: env, Stdout: &out, Stderr: &errb})
			return code, out.String(), errb.String(), err
		}
		for _, want := range []int{0, 1, 2, 125, 126, 127, 255} {
			code, _, _, err := exec(nil, "sh", "-c", fmt.Sprintf("exit %d", want))
			if err != nil || code != want {
				t.Errorf("exit %d: got %d, %v", want, code, err)
			}
		}
		code, out, errOut, err := exec(nil, "sh", "-c", "echo out; echo err >&2; exit 3")
		if err != nil || code != 3 || out != "out\n" || errOut != "err\n" {
			t.Errorf("streams: %d %q %q %v", code, out, errOut, err)
		}
		// Env values reach the container through the client's environment.
		code, out, _, err = exec(map[string]string{"HSBX_CT_EXEC": "s3cr3t-exec"}, "sh", "-c", "echo $HSBX_CT_SECRET $HSBX_CT_EXEC")
		if err != nil || code != 0 || out != "s3cr3t-run s3cr3t-exec\n" {
			t.Errorf("env: %d %q %v", code, out, err)
		}
		theirs := map[string]string{"PATH": "/hsbx-nowhere:/usr/bin:/bin", "HOME": "/hsbx-home", "ALL_PROXY": "http://127.0.0.1:9",
			"https_proxy": "http://127.0.0.1:9", "SSL_CERT_FILE": "/hsbx-nowhere.pem", "XDG_RUNTIME_DIR": "/hsbx-nowhere"}
		code, out, errOut, err = exec(theirs, "sh", "-c", "echo $DOCKER_HOST $CONTAINER_HOST $KUBECONFIG; echo $PATH $HOME $ALL_PROXY $https_proxy $SSL_CERT_FILE $XDG_RUNTIME_DIR")
		if want := nowhere + " " + nowhere + " /hsbx-nowhere\n/hsbx-nowhere:/usr/bin:/bin /hsbx-home http://127.0.0.1:9 http://127.0.0.1:9 /hsbx-nowhere.pem /hsbx-nowhere\n"; err != nil || code != 0 || out != want {
			t.Errorf("variables the client reads too: %d %q (stderr %q) %v, want %q", code, out, errOut, err, want)
		}
		// A command the runtime cannot start: the shell's status (docker
		// says 126 for all) and, from the engines, the exec channel's words
		// in place of the runtime's line (docker prints it on stdout).
		for _, c := range []struct {
			argv []string
			code int
			msg  string
		}{
			{[]string{"hsbx-no-such-command"}, 127, `hsbx: exec: "hsbx-no-such-command": executable file not found in $PATH`},
			{[]string{"/hsbx-no-such-dir/x", "a"}, 127, `hsbx: exec: "/hsbx-no-such-dir/x": no such file or directory`},
			{[]string{"/etc"}, 126, `hsbx: exec: "/etc": permission denied`},
		} {
			code, out, errOut, err := exec(nil, c.argv...)
			if err != nil || code != c.code {
				t.Errorf("%q: exit %d %v, want %d", c.argv, code, err, c.code)
			}
			if !kube(tg) && (out != "" || errOut != c.msg+"\n") {
				t.Errorf("%q: stdout %q stderr %q, want only %q on stderr", c.argv, out, errOut, c.msg)
			}
		}
		// StdoutDirect: the client writes to the file itself, nothing held:
		// a command's output, and the runtime's own line when it cannot
		// start one (docker prints it on stdout) as the engine printed it.
		direct := func(cmd ...string) (int, string, string) {
			f, err := os.CreateTemp(t.TempDir(), "stdout")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var errb bytes.Buffer
			code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: cmd, Stdout: f, StdoutDirect: true, Stderr: &errb})
			if err != nil {
				t.Fatalf("%q with StdoutDirect: %v", cmd, err)
			}
			out, _ := os.ReadFile(f.Name())
			return code, string(out), errb.String()
		}
		if code, out, _ := direct("sh", "-c", "echo direct; exit 3"); code != 3 || out != "direct\n" {
			t.Errorf("StdoutDirect: exit %d, stdout %q", code, out)
		}
		if code, out, errOut := direct("hsbx-no-such-command"); code != 126 && code != 127 {
			t.Errorf("StdoutDirect, a command that cannot start: exit %d (%q %q)", code, out, errOut)
		} else if tg.Dialect() == runtime.Docker && !strings.HasPrefix(out, "OCI runtime exec failed: ") {
			t.Errorf("StdoutDirect on docker: stdout %q, want the runtime's own line, not held", out)
		}
		// The runtime's words printed by a command with more after them are
		// the command's output, delivered intact with its own status.
		oci := `OCI runtime exec failed: exec failed: unable to start container process: exec: "x": executable file not found in $PATH: unknown`
		code, out, _, err = exec(nil, "sh", "-c", "echo '"+oci+"'; echo more; exit 126")
		if err != nil || code != 126 || out != oci+"\nmore\n" {
			t.Errorf("a command printing the runtime's line: %d %q %v", code, out, err)
		}
		// Output that only looks like an engine error is the command's: delivered intact.
		code, out, errOut, err = exec(nil, "sh", "-c", "echo 'Error: No such container: x' >&2; echo after >&2; echo done")
		if err != nil || code != 0 || errOut != "Error: No such container: x\nafter\n" || out != "done\n" {
			t.Errorf("engine-like stderr from the command: %d %q %q %v", code, out, errOut, err)
		}
		// Exec in a container that does not exist / is stopped: typed errors,
		// and the engine's message is in the error, not also on stderr.
		var missingErr bytes.Buffer
		if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: prefix + "missing", Cmd: []string{"true"}, Stderr: &missingErr}); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("exec in a missing container: %v", err)
		}
		if missingErr.Len() != 0 {
			t.Errorf("the engine's error reached the command's stderr too: %q", missingErr.String())
		}
		if err := rt.Stop(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		stopped := runtime.ErrNotRunning
		if !rt.Capabilities().StopKeeps {
			stopped = runtime.ErrNotFound // stopping a Pod deletes it: the capability says so, the engine shows it
		}
		if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"true"}}); !errors.Is(err, stopped) {
			t.Errorf("exec in a stopped container: %v, want %v", err, stopped)
		}
	})
}

func TestStopStartRemove(t *testing.T) {
	each(t, func(t *testing.T, tg target, rt runtime.Runtime, prefix string) {
		ctx := context.Background()
		id, err := rt.Run(ctx, sandbox(tg, prefix, "s"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Stop(ctx, id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		cs, err := rt.Inspect(ctx, id)
		switch {
		case kube(tg):
			// A Pod cannot be stopped and kept: Stop deleted it, and
			// Start of it says so (the caller makes a new one).
			if !errors.Is(err, runtime.ErrNotFound) || len(cs) != 0 {
				t.Fatalf("after Stop (Kubernetes: deleted): %+v %v", cs, err)
			}
			if err := rt.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
				t.Errorf("Start of a deleted Pod: %v", err)
			}
			if id, err = rt.Run(ctx, sandbox(tg, prefix, "s")); err != nil {
				t.Fatal(err)
			}
		case err != nil || cs[0].State != runtime.StateExited || cs[0].Finished.IsZero() || time.Since(cs[0].Finished) > time.Minute:
			t.Fatalf("after Stop: %+v %v", cs, err)
		default:
			if err := rt.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			if cs, _ := rt.Inspect(ctx, id); cs[0].State != runtime.StateRunning {
				t.Fatalf("after Start: %+v", cs)
			}
		}
		if err := rt.Start(ctx, prefix+"missing"); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Start missing: %v", err)
		}
		if err := rt.Stop(ctx, prefix+"missing", time.Second); !errors.Is(err, runtime.ErrNotFound) && !kube(tg) {
			t.Errorf("Stop missing: %v", err)
		}
		// A running container without force is refused and survives.
		if err := rt.Remove(ctx, false, id); err == nil {
			t.Errorf("Remove of a running container without force succeeded")
		}
		// A batch with a missing ID still removes the others (podman 4.3's
		// `rm -f a missing b` silently removes nothing).
		id2, err := rt.Run(ctx, sandbox(tg, prefix, "s2"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Remove(ctx, true, id, prefix+"missing", id2); err != nil {
			t.Fatalf("Remove batch: %v", err)
		}
		left, err := rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx-contract=" + prefix}})
		if err != nil || len(left) != 0 {
			t.Errorf("after Remove: %+v %v", left, err)
		}
		if err := rt.Remove(ctx, true, prefix+"missing"); err != nil {
			t.Errorf("Remove of a missing container: %v", err)
		}
	})
}

func TestUnreachable(t *testing.T) {
	for _, tg := range targets(t) {
		if !tg.Fake && tg.Name != "docker" && tg.Name != "kubectl" {
			continue // real podman is daemonless locally; its unreachable case is --remote, covered by the fake and captures
		}
		t.Run(tg.Name, func(t *testing.T) {
			tg.Env = append(tg.Env, "DOCKER_HOST=unix:///nonexistent/hsbx.sock", "CONTAINER_HOST=unix:///nonexistent/hsbx.sock")
			if kube(tg) {
				tg.Env = append(tg.Env, "KUBECONFIG="+unreachableKubeconfig(t))
				if tg.Fake {
					tg.Env = append(tg.Env, "FAKEENGINE_DOWN=1")
				}
			}
			rt := tg.Open(t)
			ctx := context.Background()
			if _, err := rt.List(ctx, runtime.ListOptions{}); !errors.Is(err, runtime.ErrUnreachable) {
				t.Errorf("List: %v", err)
			}
			if _, err := rt.Info(ctx); !errors.Is(err, runtime.ErrUnreachable) {
				t.Errorf("Info: %v", err)
			}
			if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: "x", Cmd: []string{"true"}}); !errors.Is(err, runtime.ErrUnreachable) {
				t.Errorf("Exec: %v", err)
			}
		})
	}
}

// unreachableKubeconfig is a kubeconfig whose server nothing listens on.
func unreachableKubeconfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A pull's progress reaches the caller's writer on either engine (docker
// draws it on stdout, podman on stderr), and the engine's final error line
// only the error. Fakes only: no registry is reachable from the machines
// the real engines run on here (their failure is in TestMissingImage...).
func TestPullProgress(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if !tg.Fake {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			tg.Env = append(append([]string{}, tg.Env...), "FAKEENGINE_REGISTRY=hsbx-pullable:1")
			rt := tg.Open(t)
			var progress strings.Builder
			if err := rt.Pull(context.Background(), "hsbx-pullable:1", &progress, time.Minute); err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{"fake-docker": "Pull complete", "fake-podman": "Copying blob"}[tg.Name]; !strings.Contains(progress.String(), want) {
				t.Errorf("progress %q, want %q in it", progress.String(), want)
			}
			progress.Reset()
			err := rt.Pull(context.Background(), "hsbx-unpullable:1", &progress, time.Minute)
			if err == nil || strings.Contains(progress.String(), "Error") {
				t.Errorf("a failed pull: %v; progress %q (the error line belongs to the error)", err, progress.String())
			}
		})
	}
}

// An exec session that inspect listed and that ended and went before
// LiveExecs asked about it is not running, and no error (podman answers
// "no such exec session"; measured on 4.3). Docker lists only running
// sessions, so LiveExecs takes inspect's word there.
func TestLiveExecsSessionGone(t *testing.T) {
	each(t, func(t *testing.T, tg target, rt runtime.Runtime, prefix string) {
		if !strings.Contains(tg.Name, "podman") {
			t.Skip("only podman keeps sessions that no longer run")
		}
		ctx := context.Background()
		id, err := rt.Run(ctx, sandbox(tg, prefix, "g"))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := rt.Inspect(ctx, id)
		if err != nil || len(cs) != 1 {
			t.Fatal(cs, err)
		}
		c := cs[0]
		c.ExecIDs = []string{strings.Repeat("ab", 32)}
		if live, err := rt.LiveExecs(ctx, c); err != nil || len(live) != 0 {
			t.Errorf("a session that is gone: live %v, %v", live, err)
		}
	})
}

// A remote podman keeps an exec session listed for minutes after it ended,
// and its client cannot ask which run (`container cleanup` is local only):
// LiveExecs counts the processes an exec started (`top`) instead, so an
// ended exec is not running and a running one is.
func TestLiveExecsRemotePodman(t *testing.T) {
	for _, tg := range enginetest.SSHTargets(t) {
		if tg.Dialect() != runtime.Podman {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			rt := tg.Open(t)
			id, err := rt.Run(ctx, runtime.RunSpec{Name: fmt.Sprintf("hsbxct-remote-%d", time.Now().UnixNano()%1e9),
				Labels: map[string]string{"hsbx-contract": "remote"}, Image: tg.Image, Args: []string{"--init", "--network", "none"}, Cmd: []string{"sleep", "300"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Remove(context.Background(), true, id) })
			if code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"true"}}); err != nil || code != 0 {
				t.Fatalf("exec: %d %v", code, err)
			}
			live := func() ([]string, []string) {
				t.Helper()
				cs, err := rt.Inspect(ctx, id)
				if err != nil || len(cs) != 1 {
					t.Fatalf("inspect: %+v %v", cs, err)
				}
				l, err := rt.LiveExecs(ctx, cs[0])
				if err != nil {
					t.Fatalf("LiveExecs: %v", err)
				}
				return l, cs[0].ExecIDs
			}
			if l, listed := live(); len(listed) == 0 || len(l) != 0 {
				t.Fatalf("after an exec that ended: live %v of listed %v, want none of at least one (podman lists it: the premise)", l, listed)
			}
			ectx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = rt.Exec(ectx, runtime.ExecSpec{ID: id, Cmd: []string{"sleep", "60"}})
			}()
			defer func() { stop(); <-done }()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				l, listed := live()
				if len(l) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("with an exec running: live %v of listed %v, want one", l, listed)
				}
			}
		})
	}
}
