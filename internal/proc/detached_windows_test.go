package proc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// On Windows a detached process (the exec channel's holder) starts with
// no console and lives on: here, this test binary started detached writes
// a file that this process then reads.
func TestStartDetachedRunsOnWindows(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tempDir(t), "ran")
	env := append(os.Environ(), "HSBX_DETACHED_OUT="+out)
	if _, err := StartDetached([]string{self, "-test.run=^TestDetachedHelper$"}, env); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(out); err == nil && string(b) == "ok" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached process did not run within 20s")
		}
	}
}

// TestDetachedHelper is the detached process of the test above.
func TestDetachedHelper(t *testing.T) {
	out := os.Getenv("HSBX_DETACHED_OUT")
	if out == "" {
		t.Skip("run by TestStartDetachedRunsOnWindows")
	}
	if err := os.WriteFile(out+".tmp", []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
}

// tempDir is t.TempDir without its cleanup's verdict: Wine (where these
// tests run in CI) lacks the call Go's RemoveAll makes on Windows.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "hsbx-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}
