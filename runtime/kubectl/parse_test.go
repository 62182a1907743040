package kubectl

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
)

const captures = "../../testdata/kube/kubectl-v1.34.4"

type capture struct {
	stdout, stderr []byte
	exit           int
}

func load(t *testing.T, name string) capture {
	t.Helper()
	base := filepath.Join(captures, name)
	code, err := os.ReadFile(base + ".exit")
	if err != nil {
		t.Fatalf("%s: %v (re-run scripts/capture-kube.sh)", name, err)
	}
	c := capture{}
	c.exit, _ = strconv.Atoi(strings.TrimSpace(string(code)))
	c.stdout, _ = os.ReadFile(base + ".stdout")
	c.stderr, _ = os.ReadFile(base + ".stderr")
	return c
}

func TestParsePodsCaptured(t *testing.T) {
	none, err := ParsePods(load(t, "get_none").stdout)
	if err != nil || len(none) != 0 {
		t.Fatalf("get_none: %v %v", none, err)
	}
	cs, err := ParsePods(load(t, "get_label").stdout)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]runtime.Container{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	for name, want := range map[string]runtime.State{"cap-run": runtime.StateRunning, "cap-done": runtime.StateExited, "cap-bad-image": runtime.StateCreated} {
		c, ok := byName[name]
		if !ok {
			t.Fatalf("%s missing from %v", name, cs)
		}
		if c.State != want {
			t.Errorf("%s: state %s, want %s", name, c.State, want)
		}
		if uid, pn, _ := strings.Cut(c.ID, "/"); len(uid) != 36 || pn != name || c.Labels["hsbx.task"] != name || c.Labels["hermes-agent"] != "1" || c.Image == "" || c.Created.IsZero() {
			t.Errorf("%s: %+v", name, c)
		}
	}
	if c := byName["cap-run"]; c.Started.IsZero() || !c.Finished.IsZero() {
		t.Errorf("running pod times: %+v", c)
	}
	if c := byName["cap-done"]; c.Started.IsZero() || c.Finished.IsZero() || c.Finished.Before(c.Started) {
		t.Errorf("finished pod times: %+v", c)
	}
	one, err := ParsePods(load(t, "get_one").stdout)
	if err != nil || len(one) != 1 || one[0].Name != "cap-run" || one[0].ID != byName["cap-run"].ID {
		t.Errorf("get_one: %v %v", one, err)
	}
	created, err := ParsePods(load(t, "create_run").stdout)
	if err != nil || len(created) != 1 || created[0].ID != byName["cap-run"].ID {
		t.Errorf("create -o json gives the pod and its uid: %v %v", created, err)
	}
	reason, msg, err := Waiting(load(t, "get_one").stdout)
	if err != nil || reason != "" {
		t.Errorf("running pod waiting: %q %q %v", reason, msg, err)
	}
}

func TestAnnotationsKeepExactValues(t *testing.T) {
	out := `{"kind":"Pod","metadata":{"name":"p","uid":"u","labels":{"hsbx.task":"a_b","other":"x"},"annotations":{"hsbx.task":"a/b","unrelated":"y"}},"status":{"phase":"Running"}}`
	cs, err := ParsePods([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Labels["hsbx.task"] != "a/b" || cs[0].Labels["other"] != "x" || cs[0].Labels["unrelated"] != "" {
		t.Errorf("labels %v", cs[0].Labels)
	}
}

func TestExecStatusCaptured(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		kind error
	}{
		{"exec_ok", 0, nil},
		{"exec_exit3", 3, nil},
		{"exec_words", 1, nil}, // the command's own "exit code 7" line is not the last
		{"exec_not_found", 127, nil},
		{"exec_missing", -1, runtime.ErrNotFound},
		{"exec_done", -1, runtime.ErrNotRunning},
		{"down_get", -1, runtime.ErrUnreachable},
		{"down_no_config", -1, runtime.ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, tc.name)
			code, err := ExecStatus(c.exit, string(c.stderr))
			if code != tc.code || !errors.Is(err, tc.kind) || (tc.kind == nil) != (err == nil) {
				t.Errorf("ExecStatus(%d, %q) = %d, %v; want %d, %v", c.exit, c.stderr, code, err, tc.code, tc.kind)
			}
		})
	}
}

func TestClassifyCaptured(t *testing.T) {
	for name, want := range map[string]error{
		"get_missing": runtime.ErrNotFound, "delete_missing": runtime.ErrNotFound,
		"create_exists": runtime.ErrNameInUse, "down_get": runtime.ErrUnreachable,
		"create_unknown_runtime_class": runtime.ErrNoOCIRuntime,
	} {
		c := load(t, name)
		if got := Classify(c.exit, string(c.stderr)); !errors.Is(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// The cluster's RuntimeClasses (none on the capture's): a complete list.
func TestParseRuntimeClassesCaptured(t *testing.T) {
	c := load(t, "get_runtimeclasses")
	o, err := ParseRuntimeClasses(c.stdout)
	if err != nil || !o.Complete || len(o.Names) != 0 || o.Has("gvisor") {
		t.Fatalf("%+v %v", o, err)
	}
	o, err = ParseRuntimeClasses([]byte(`{"kind":"List","items":[{"metadata":{"name":"runsc"}},{"metadata":{"name":"gvisor"}}]}`))
	if err != nil || strings.Join(o.Names, ",") != "gvisor,runsc" || !o.Has("gvisor") {
		t.Fatalf("%+v %v", o, err)
	}
	if _, err := ParseRuntimeClasses([]byte(`{"kind":"Pod"}`)); err == nil {
		t.Fatal("a Pod read as a list of RuntimeClasses")
	}
}

func FuzzParseRuntimeClasses(f *testing.F) {
	b, _ := os.ReadFile(filepath.Join(captures, "get_runtimeclasses.stdout"))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, err := ParseRuntimeClasses(b); err == nil && !o.Complete {
			t.Fatalf("a parsed list that is not complete: %+v", o)
		}
	})
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"default": "default", "a/b c": "a_b_c", "-x-": "x", "": "",
		strings.Repeat("a", 70): strings.Repeat("a", 63), "ü": "",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParsePods(f *testing.F) {
	for _, n := range []string{"get_none", "get_label", "get_one", "create_run"} {
		b, _ := os.ReadFile(filepath.Join(captures, n+".stdout"))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ParsePods(b)
		if err == nil {
			for _, c := range cs {
				if c.ID == "" || c.Name == "" {
					t.Fatalf("a container without id or name: %+v", c)
				}
			}
		}
	})
}

func FuzzExecStatus(f *testing.F) {
	for _, n := range []string{"exec_exit3", "exec_words", "exec_not_found", "exec_missing", "down_get"} {
		b, _ := os.ReadFile(filepath.Join(captures, n+".stderr"))
		f.Add(1, string(b))
	}
	f.Fuzz(func(t *testing.T, code int, stderr string) {
		n, err := ExecStatus(code, stderr)
		// A command that could not start is the shell's 127 or 126 (the
		// runtime's line read by startfail); otherwise the status is kubectl's.
		if err == nil && n != code && n != 127 && n != 126 {
			t.Fatalf("status %d from exit %d without an error", n, code)
		}
		if code == 0 && (n != 0 || err != nil) {
			t.Fatalf("exit 0 read as %d, %v", n, err)
		}
		_ = LabelValue(stderr)
	})
}
