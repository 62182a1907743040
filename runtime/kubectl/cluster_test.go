package kubectl_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/kubectl"
)

// calls counts and records the kubectl calls a runtime makes.
type calls struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	argv []string
}

func (c *calls) runner() *proc.Runner {
	return &proc.Runner{Log: slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

func (c *calls) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for line := range strings.Lines(string(p)) {
		if strings.Contains(line, `msg="engine call"`) {
			c.argv = append(c.argv, line)
		}
	}
	return c.buf.Write(p)
}

func (c *calls) reset() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.argv
	c.argv = nil
	return out
}

func open(t *testing.T) (enginetest.Target, *kubectl.Runtime, *calls) {
	tg := enginetest.Kube(t)
	c := &calls{}
	rt, ok := tg.OpenWith(t, c.runner()).(*kubectl.Runtime)
	if !ok {
		t.Fatalf("%s was not detected as kubectl", tg.Bin)
	}
	c.reset()
	return tg, rt, c
}

func spec(tg enginetest.Target, name string) runtime.RunSpec {
	return runtime.RunSpec{
		Name: name,
		// Values a label cannot hold: kept exactly in annotations.
		Labels: map[string]string{"hermes-agent": "1", "hsbx.task": name + "/with,commas=and=equals", "hsbx.nonce": "n" + name},
		Env:    map[string]string{"SANDBOX_SECRET": "s3cr3t-value"},
		Args:   []string{"--init", "-w", "/root", "--cap-drop", "ALL", "--cap-add", "CHOWN", "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=64m", "--memory", "256m", "--cpus", "0.5"},
		Image:  tg.Image, Cmd: []string{"sleep", "infinity"},
	}
}

func TestClusterRunListInspect(t *testing.T) {
	tg, rt, c := open(t)
	ctx := context.Background()
	id, err := rt.Run(ctx, spec(tg, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if uid, name, _ := strings.Cut(id, "/"); len(uid) != 36 || name != "a" {
		t.Fatalf("id %q, want UID/NAME", id)
	}
	if n := len(c.reset()); n < 2 {
		t.Errorf("Run made %d calls; want a create and at least one get", n)
	}
	cs, err := rt.List(ctx, runtime.ListOptions{Labels: []string{"hermes-agent=1", "hsbx.task=a/with,commas=and=equals"}})
	if err != nil || len(cs) != 1 || cs[0].ID != id || cs[0].State != runtime.StateRunning || cs[0].Labels["hsbx.task"] != "a/with,commas=and=equals" {
		t.Fatalf("List = %+v, %v", cs, err)
	}
	if cs, _ := rt.List(ctx, runtime.ListOptions{Labels: []string{"hsbx.task=a/with,commas=and=OTHER"}}); len(cs) != 0 {
		t.Errorf("a value equal only in its label form matched: %+v", cs)
	}
	got, err := rt.Inspect(ctx, id, "missing")
	var me *runtime.MissingError
	if !errors.As(err, &me) || len(got) != 1 || got[0].ID != id || me.IDs[0] != "missing" {
		t.Fatalf("Inspect(present, missing) = %+v, %v", got, err)
	}
	if got[0].Started.IsZero() || got[0].Created.IsZero() || got[0].Image != tg.Image {
		t.Errorf("Inspect %+v", got[0])
	}
	if _, err := rt.Run(ctx, spec(tg, "a")); !errors.Is(err, runtime.ErrNameInUse) {
		t.Errorf("second Run with the same name: %v, want ErrNameInUse", err)
	}
	// The hardening reached the Pod.
	out, err := exec.Command(tg.Bin, "get", "pod", "a", "-n", tg.Kube.Namespace, "-o", "jsonpath={.spec.containers[0].securityContext}{.spec.automountServiceAccountToken}").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"allowPrivilegeEscalation":false`) || !strings.Contains(string(out), `"drop":["ALL"]`) ||
		!strings.Contains(string(out), "RuntimeDefault") || !strings.HasSuffix(string(out), "false") {
		t.Errorf("pod security: %s %v", out, err)
	}
	// Inside: no capabilities beyond those added, /tmp memory-backed, the env value there.
	var o, e bytes.Buffer
	code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", `grep CapEff /proc/self/status; grep ' /tmp ' /proc/mounts | cut -d' ' -f3; echo "$SANDBOX_SECRET"; pwd`}, Stdout: &o, Stderr: &e})
	if err != nil || code != 0 || !strings.Contains(o.String(), "CapEff:\t0000000000000001") || !strings.Contains(o.String(), "tmpfs\ns3cr3t-value\n/root") {
		t.Errorf("inside the Pod: %q %q %d %v", o.String(), e.String(), code, err)
	}
	// A missing image fails with ErrImageNotFound and leaves no Pod.
	bad := spec(tg, "noimage")
	bad.Image = "hsbx-no-such-image:1"
	if _, err := rt.Run(ctx, bad); !errors.Is(err, runtime.ErrImageNotFound) {
		t.Errorf("Run with a missing image: %v, want ErrImageNotFound", err)
	}
	if cs, _ := rt.Inspect(ctx, "noimage"); len(cs) != 0 {
		t.Errorf("a failed Run left %+v", cs)
	}
}

func TestClusterExec(t *testing.T) {
	tg, rt, c := open(t)
	ctx := context.Background()
	id, err := rt.Run(ctx, spec(tg, "x"))
	if err != nil {
		t.Fatal(err)
	}
	hostile := "it's $(id) `x` \"q\"\nline2 ,=ü"
	cases := []struct {
		name             string
		s                runtime.ExecSpec
		code             int
		stdout, stderr   string
		interactiveInput string
	}{
		{name: "ok", s: runtime.ExecSpec{Cmd: []string{"echo", "hi"}}, stdout: "hi\n"},
		{name: "status passes through", s: runtime.ExecSpec{Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, code: 3, stdout: "out\n", stderr: "err\n"},
		{name: "kubectl's words from the command are the command's", s: runtime.ExecSpec{Cmd: []string{"sh", "-c", "echo 'command terminated with exit code 5' >&2; exit 5"}}, code: 5, stderr: "command terminated with exit code 5\n"},
		{name: "missing command", s: runtime.ExecSpec{Cmd: []string{"no-such-cmd-hsbx"}}, code: 127},
		{name: "env values exact, never on argv", s: runtime.ExecSpec{Cmd: []string{"sh", "-c", `printf %s "$V"`}, Env: map[string]string{"V": hostile}}, stdout: hostile},
		{name: "workdir", s: runtime.ExecSpec{Cmd: []string{"pwd"}, WorkDir: "/tmp"}, stdout: "/tmp\n"},
		{name: "stdin after env", s: runtime.ExecSpec{Cmd: []string{"sh", "-c", `cat; printf %s "$V"`}, Env: map[string]string{"V": "v"}, Interactive: true}, interactiveInput: "in\n", stdout: "in\nv"},
	}
	for _, tc := range cases {
		var o, e bytes.Buffer
		tc.s.ID, tc.s.Stdout, tc.s.Stderr = id, &o, &e
		if tc.interactiveInput != "" {
			tc.s.Stdin = strings.NewReader(tc.interactiveInput)
		}
		c.reset()
		code, err := rt.Exec(ctx, tc.s)
		if err != nil || code != tc.code || o.String() != tc.stdout || (tc.code != 127 && e.String() != tc.stderr) {
			t.Errorf("%s: exit %d (want %d), stdout %q (want %q), stderr %q (want %q), err %v", tc.name, code, tc.code, o.String(), tc.stdout, e.String(), tc.stderr, err)
		}
		for _, a := range c.reset() {
			if strings.Contains(a, "s3cr3t") || (tc.s.Env != nil && strings.Contains(a, "line2")) {
				t.Errorf("%s: an env value on kubectl's argv: %s", tc.name, a)
			}
		}
	}
	// A Pod that is gone: ErrNotFound, not a status.
	if _, err := rt.Exec(ctx, runtime.ExecSpec{ID: "u/no-such-pod", Cmd: []string{"true"}}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("exec into a missing Pod: %v", err)
	}
	// LiveExecs sees a command that runs (by its marker), from any host.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sleep", "3"}, Env: map[string]string{runtime.ExecMarker: "tok123"}})
	}()
	cs, _ := rt.Inspect(ctx, id)
	if len(cs) != 1 || len(cs[0].ExecIDs) == 0 {
		t.Fatalf("a running Pod must count as in use until asked: %+v", cs)
	}
	var live []string
	for range 20 {
		if live, err = rt.LiveExecs(ctx, cs[0]); err != nil || len(live) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(live) != 1 || live[0] != "tok123" {
		t.Errorf("LiveExecs during a command = %v, %v", live, err)
	}
	<-done
	if live, err := rt.LiveExecs(ctx, cs[0]); err != nil || len(live) != 0 {
		t.Errorf("LiveExecs after = %v, %v", live, err)
	}
}

// A Pod is deleted only by its uid: one made again under the same name
// (another process's fresh sandbox, a squatter) survives Remove and Stop
// of the old id.
func TestClusterRemoveIsPinnedToTheUID(t *testing.T) {
	tg, rt, _ := open(t)
	ctx := context.Background()
	old, err := rt.Run(ctx, spec(tg, "s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, false, old); err == nil {
		t.Error("Remove without force removed a running Pod")
	}
	if err := rt.Stop(ctx, old, time.Second); err != nil {
		t.Fatal(err)
	}
	if cs, err := rt.Inspect(ctx, old); !errors.Is(err, runtime.ErrNotFound) || len(cs) != 0 {
		t.Fatalf("after Stop: %+v %v", cs, err)
	}
	squat := spec(tg, "s")
	squat.Labels = map[string]string{"squatter": "1"}
	newID, err := rt.Run(ctx, squat)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, true, old); err != nil {
		t.Errorf("Remove of a gone id: %v", err)
	}
	if err := rt.Stop(ctx, old, time.Second); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stop of a gone id: %v", err)
	}
	if cs, err := rt.Inspect(ctx, newID); err != nil || len(cs) != 1 || cs[0].State != runtime.StateRunning {
		t.Fatalf("the new Pod of that name did not survive: %+v %v", cs, err)
	}
	if cs, _ := rt.Inspect(ctx, old); len(cs) != 0 {
		t.Errorf("the old id resolves to the new Pod: %+v", cs)
	}
}

// Finished Pods go in a constant number of calls; a running one among
// them stays.
func TestClusterRemoveFinishedInOneDelete(t *testing.T) {
	tg, rt, c := open(t)
	ctx := context.Background()
	var ids []string
	for _, n := range []string{"f1", "f2", "f3", "alive"} {
		id, err := rt.Run(ctx, spec(tg, n))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if n != "alive" {
			_, _ = rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", "kill $(pidof sleep)"}})
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		cs, err := rt.Inspect(ctx, ids[:3]...)
		exited := 0
		for _, c := range cs {
			if c.State == runtime.StateExited {
				exited++
			}
		}
		if err == nil && exited == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Pods did not finish: %+v %v", cs, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// A running Pod that copied a finished one's nonce is not selected.
	imp := spec(tg, "impostor")
	imp.Labels["hsbx.nonce"] = "nf1"
	impostor, err := rt.Run(ctx, imp)
	if err != nil {
		t.Fatal(err)
	}
	c.reset()
	err = rt.Remove(ctx, false, ids...)
	if err == nil || !strings.Contains(err.Error(), "alive") {
		t.Errorf("Remove without force of a running Pod among them: %v", err)
	}
	made := c.reset()
	if len(made) != 3 {
		t.Errorf("Remove of 3 finished Pods made %d calls, want 3 (get, one delete, wait):\n%s", len(made), strings.Join(made, ""))
	}
	cs, _ := rt.Inspect(ctx, append(ids, impostor)...)
	if len(cs) != 2 || cs[0].ID != ids[3] || cs[1].ID != impostor {
		t.Errorf("left: %+v; want only the running Pods", cs)
	}
}

// Tar streams in and out of a running Pod, memory-backed paths included
// (kubectl reaches them through the Pod, unlike docker cp).
func TestClusterCopyStreams(t *testing.T) {
	tg, rt, _ := open(t)
	ctx := context.Background()
	id, err := rt.Run(ctx, spec(tg, "cp"))
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	body := strings.Repeat("data, with = and ü\n", 5000)
	_ = tw.WriteHeader(&tar.Header{Name: "d ir/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "d ir/f,=.txt", Mode: 0o644, Size: int64(len(body))})
	_, _ = tw.Write([]byte(body))
	_ = tw.Close()
	if err := rt.CopyIn(ctx, id, "/tmp", &in); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rt.CopyOut(ctx, id, "/tmp/d ir", &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	found := false
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == "d ir/f,=.txt" {
			b, _ := io.ReadAll(tr)
			found = string(b) == body
		}
	}
	if !found {
		t.Error("the file did not come back out with its content")
	}
	if err := rt.CopyOut(ctx, id, "/no/such/path", io.Discard); !errors.Is(err, runtime.ErrNoSuchPath) {
		t.Errorf("copy out of a missing path: %v", err)
	}
}

// Host paths in and out with docker cp's rules: into an existing
// directory, as a new name, a directory's contents with "/.".
func TestClusterCopyHostPaths(t *testing.T) {
	tg, rt, _ := open(t)
	ctx := context.Background()
	id, err := rt.Run(ctx, spec(tg, "hp"))
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	tree := filepath.Join(host, "tree")
	for _, f := range []string{"a b/c,=.txt", "ü/.dot", "empty/"} {
		p := filepath.Join(tree, f)
		if strings.HasSuffix(f, "/") {
			_ = os.MkdirAll(p, 0o755)
			continue
		}
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("content of "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh := func(script string) string {
		var o, e bytes.Buffer
		code, err := rt.Exec(ctx, runtime.ExecSpec{ID: id, Cmd: []string{"sh", "-c", script}, Stdout: &o, Stderr: &e})
		if err != nil || code != 0 {
			t.Fatalf("%s: %d %v %s", script, code, err, e.String())
		}
		return o.String()
	}
	if err := rt.CopyTo(ctx, id, tree, "/tmp"); err != nil { // into an existing dir
		t.Fatal(err)
	}
	if err := rt.CopyTo(ctx, id, tree, "/tmp/renamed"); err != nil { // as a new name
		t.Fatal(err)
	}
	if err := rt.CopyTo(ctx, id, tree+"/.", "/tmp/contents"); err != nil { // its contents
		t.Fatal(err)
	}
	if err := rt.CopyTo(ctx, id, filepath.Join(tree, "a b", "c,=.txt"), "/tmp/file.txt"); err != nil { // a file, renamed
		t.Fatal(err)
	}
	got := sh(`cat "/tmp/tree/a b/c,=.txt" "/tmp/renamed/ü/.dot" "/tmp/contents/a b/c,=.txt" /tmp/file.txt; [ -d /tmp/contents/empty ] && stat -c %u "/tmp/tree/a b/c,=.txt"`)
	want := "content of a b/c,=.txtcontent of ü/.dotcontent of a b/c,=.txtcontent of a b/c,=.txt0\n"
	if got != want {
		t.Errorf("in the Pod: %q, want %q", got, want)
	}
	if err := rt.CopyTo(ctx, id, tree, "/no/such/dir/x"); !errors.Is(err, runtime.ErrNoSuchPath) {
		t.Errorf("copy into a missing parent: %v", err)
	}
	if err := rt.CopyTo(ctx, id, filepath.Join(host, "missing"), "/tmp"); !errors.Is(err, runtime.ErrNoSuchPath) {
		t.Errorf("copy of a missing host path: %v", err)
	}
	out := t.TempDir()
	if err := rt.CopyFrom(ctx, id, "/tmp/tree", out); err != nil { // into an existing dir
		t.Fatal(err)
	}
	if err := rt.CopyFrom(ctx, id, "/tmp/tree", filepath.Join(out, "new")); err != nil { // as a new name
		t.Fatal(err)
	}
	if err := rt.CopyFrom(ctx, id, "/tmp/tree/.", filepath.Join(out, "flat")); err != nil { // contents
		t.Fatal(err)
	}
	if err := rt.CopyFrom(ctx, id, "/tmp/file.txt", filepath.Join(out, "f")); err != nil { // a file
		t.Fatal(err)
	}
	for _, p := range []string{"tree/a b/c,=.txt", "new/a b/c,=.txt", "flat/a b/c,=.txt", "f"} {
		if b, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(b) != "content of a b/c,=.txt" {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(out, "flat", "empty")); err != nil || !st.IsDir() {
		t.Errorf("the empty dir did not come out: %v", err)
	}
	if err := rt.CopyFrom(ctx, id, "/no/such", out); !errors.Is(err, runtime.ErrNoSuchPath) {
		t.Errorf("copy out of a missing path: %v", err)
	}
}

func count(argvs []string, sub string) int {
	n := 0
	for _, a := range argvs {
		if strings.Contains(a, sub) {
			n++
		}
	}
	return n
}
