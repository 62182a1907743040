package kubectl_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/kubectl"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

// A Pod no node can take (here: its claim is missing) fails Start at once
// with the scheduler's reason, not after the wait's bound.
func TestUnschedulableFailsFast(t *testing.T) {
	tg := enginetest.FakeKube(t)
	rt, ok := tg.Open(t).(*kubectl.Runtime)
	if !ok {
		t.Fatal("the fake kubectl was not detected as kubectl")
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"held","labels":{"hsbx.key":"k"}},
 "spec":{"containers":[{"name":"sandbox","image":"hsbx-busybox","command":["sleep","infinity"]}],
  "volumes":[{"name":"c","persistentVolumeClaim":{"claimName":"nosuchclaim"}}]}}`
	cmd := exec.Command(tg.Bin, "create", "-f", "-", "-o", "json")
	cmd.Env, cmd.Stdin = tg.Env, strings.NewReader(pod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cs, err := rt.List(context.Background(), runtime.ListOptions{Labels: []string{"hsbx.key=k"}})
	if err != nil || len(cs) != 1 || cs[0].State != runtime.StateStarting {
		t.Fatalf("List: %+v %v (want one Pod, starting)", cs, err)
	}
	err = rt.Start(context.Background(), cs[0].ID)
	if err == nil || errors.Is(err, runtime.ErrTimeout) || !strings.Contains(err.Error(), `cannot be scheduled: 0/1 nodes are available: persistentvolumeclaim "nosuchclaim" not found`) {
		t.Errorf("Start: %v, want the scheduler's reason at once", err)
	}
}
