package channel

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// failingStart is an engine that cannot start the agent and says so where
// docker does: on the exec's stdout, status 126.
type failingStart struct {
	runtime.Runtime
	got runtime.ExecSpec
}

func (f *failingStart) CallTimeout() time.Duration { return 5 * time.Second }

func (f *failingStart) Exec(_ context.Context, s runtime.ExecSpec) (int, error) {
	f.got = s
	_, _ = io.WriteString(s.Stdout, "OCI runtime exec failed: exec failed: unable to start container process: exec: \"/.hsbx-agent-0\": permission denied: unknown\n")
	return 126, nil
}

// The agent's stdout goes to the engine client as it is (no start hold:
// no pipe and copying goroutine in between for every chunk of output),
// and the engine's words there still name why the agent did not start.
func TestStartNamesTheEnginesWordsOnStdout(t *testing.T) {
	rt := &failingStart{}
	_, err := start(context.Background(), Agent{Runtime: rt, ID: "c1"}, []string{"/.hsbx-agent-0", "agent"})
	if err == nil {
		t.Fatal("the agent's start failed, yet start returned a channel")
	}
	if !rt.got.StdoutDirect {
		t.Error("the agent's exec holds its stdout back: StdoutDirect is not set")
	}
	if _, ok := rt.got.Stdout.(*os.File); !ok {
		t.Errorf("the agent's stdout is a %T, not the pipe itself", rt.got.Stdout)
	}
	for _, want := range []string{"exit 126", "OCI runtime exec failed", "permission denied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// headReader keeps words, never frames.
func TestHeadReaderText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"OCI runtime exec failed: x\nmore\n", "OCI runtime exec failed: x"},
		{"\x01\x00\x00\x00\x00\x00\x00\x00\x10{\"proto\":3}", ""},
		{"", ""},
		{"bad \xff utf-8\n", ""},
	} {
		h := &headReader{r: strings.NewReader(tc.in), got: make(chan struct{})}
		_, _ = io.ReadAll(h)
		if got := h.text(); got != tc.want {
			t.Errorf("text of %q = %q, want %q", tc.in, got, tc.want)
		}
	}
}
