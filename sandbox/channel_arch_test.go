package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/agentbin"
	"github.com/hsbx/hsbx/sandbox"
)

// The agent is chosen by the platform the engine reports: an arm64 engine
// gets the arm64 agent hsbx carries, one hsbx carries none for gets the
// plain path with the reason said — never a binary that cannot run.
func TestChannelAgentFollowsTheEnginePlatform(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if !e.tg.Fake {
			t.Skip("the fakes report any platform (FAKEENGINE_ARCH); the real engines are this host's, covered by every channel test")
		}
		for _, tc := range []struct{ arch, want string }{
			{"arm64", "arm64"}, {"riscv64", "hsbx carries no exec channel agent for linux/riscv64"},
		} {
			t.Run(tc.arch, func(t *testing.T) {
				ctx := context.Background()
				rt := e.openWith([]string{"FAKEENGINE_ARCH=" + tc.arch})
				m := sandbox.New(sandbox.Config{Runtime: rt, StateDir: e.tg.StateDir, CacheDir: t.TempDir(),
					Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}, Channel: true})
				sb := m.Sandbox(e.key("plat-"+tc.arch), e.spec())
				t.Cleanup(func() { _ = sb.Close(ctx) })
				res, err := sb.Ensure(ctx)
				if err != nil {
					t.Fatal(err)
				}
				e.log.reset()
				var out bytes.Buffer
				if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"echo", "ran"}, Stdout: &out}); err != nil || code != 0 || out.String() != "ran\n" {
					t.Fatalf("exec: %d %q %v", code, out.String(), err)
				}
				calls := strings.Join(e.log.all(), "\n")
				if tc.want == "arm64" {
					a, err := agentbin.For("linux/arm64")
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(calls, "/.hsbx-agent-"+a.Digest[:16]+" agent") {
						t.Fatalf("the arm64 agent was not started:\n%s", calls)
					}
					// The fake runs it on this host: with qemu-user registered
					// (scripts/engines.sh), the real arm64 agent serves.
					if !qemuArm64(t) {
						return
					}
					if st := sb.ChannelStatus(res.ID); st != "up" {
						t.Fatalf("the arm64 agent under qemu: channel %q", st)
					}
					out.Reset()
					e.log.reset()
					code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "cat; exit 3"}, Stdin: strings.NewReader("through arm64\n"), Stdout: &out})
					if err != nil || code != 3 || out.String() != "through arm64\n" || strings.Contains(strings.Join(e.log.all(), "\n"), "cat; exit 3") {
						t.Fatalf("through the arm64 agent: %d %q %v\n%s", code, out.String(), err, e.log.all())
					}
					return
				}
				if st := sb.ChannelStatus(res.ID); !strings.Contains(st, tc.want) || strings.Contains(calls, "hsbx-agent") {
					t.Fatalf("status %q, calls:\n%s", st, calls)
				}
			})
		}
	})
}

// qemuArm64 reports whether this host runs arm64 binaries (qemu-user
// registered with binfmt_misc, as scripts/engines.sh does); without it the
// test notes so, or fails under HSBX_REQUIRE_ENGINES=1.
func qemuArm64(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-aarch64")
	if err == nil && strings.HasPrefix(string(b), "enabled") {
		return true
	}
	msg := "qemu-user is not registered for arm64 (binfmt_misc): run scripts/engines.sh"
	if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
		t.Fatalf("%s, but HSBX_REQUIRE_ENGINES=1", msg)
	}
	t.Log("SKIP " + msg)
	return false
}

// A sandbox of another architecture (an arm64 image run through qemu-user
// on this amd64 machine) gets the exec channel: the agent is picked by the
// engine's platform, so it runs natively beside the emulated command.
func TestChannelInForeignArchSandbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		image := os.Getenv("HSBX_IT_IMAGE_ARM64")
		switch {
		case e.tg.Fake || e.kube():
			t.Skip("an arm64 image on the real engines (the fakes' arm64 agent: TestChannelAgentFollowsTheEnginePlatform)")
		case image == "" || !qemuArm64(t):
			if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
				t.Fatal("HSBX_IT_IMAGE_ARM64 unset: run scripts/engines.sh, but HSBX_REQUIRE_ENGINES=1")
			}
			t.Skip("HSBX_IT_IMAGE_ARM64 unset: run scripts/engines.sh")
		}
		ctx := context.Background()
		m := sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}, Channel: true})
		spec := e.spec()
		spec.Image = image
		sb := m.Sandbox(e.key("arm64"), spec)
		t.Cleanup(func() { _ = sb.Close(ctx) })
		res, err := sb.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"uname", "-m"}, Stdout: &out}); err != nil || code != 0 || out.String() != "aarch64\n" {
			t.Fatalf("uname -m in the arm64 sandbox: %d %q %v", code, out.String(), err)
		}
		if st := sb.ChannelStatus(res.ID); st != "up" {
			t.Fatalf("channel %q in the arm64 sandbox", st)
		}
		e.log.reset()
		ie := interruptStarted(t, 2*time.Second, func(wait time.Duration, out io.Writer) error {
			_, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo up; sleep 60"}, Timeout: wait, Stdout: out})
			return err
		})
		if ie.Killed < 1 {
			t.Fatalf("a timeout in the arm64 sandbox: %v", ie)
		}
		if calls := strings.Join(e.log.all(), "\n"); strings.Contains(calls, "sleep 60") {
			t.Fatalf("the command took the plain path:\n%s", calls)
		}
	})
}
