package agentbin

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// The agents hsbx carries are what `make agents` makes from this tree:
// rebuilt here with the same Go release and compared byte for byte, so a
// change to the agent (or what it imports) that was not followed by
// `make agents` fails the build.
func TestEmbeddedAgentsAreFresh(t *testing.T) {
	if v := goruntime.Version(); v != Toolchain() {
		msg := "the embedded agents were built with " + Toolchain() + ", this test runs on " + v + ": they can only be compared by the same release"
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Fatal(msg + " (CI must use it; or run `make agents` and commit internal/agentbin)")
		}
		t.Skip(msg)
	}
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err != nil || strings.TrimSpace(string(out)) != Toolchain() {
		t.Fatalf("the go on PATH is %q (%v), not %s that runs this test", strings.TrimSpace(string(out)), err, Toolchain())
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "build.sh", "go", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	for _, p := range Platforms() {
		a, err := For(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, "agent-"+strings.ReplaceAll(p, "/", "-")+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, a.Bytes) {
			t.Errorf("the embedded agent for %s is stale (%d bytes; this tree builds %d): run `make agents` and commit internal/agentbin", p, len(a.Bytes), len(fresh))
		}
		sum, err := os.ReadFile(filepath.Join(dir, "agent-"+strings.ReplaceAll(p, "/", "-")+".sha256"))
		if d, derr := Digest(p); err != nil || derr != nil || strings.TrimSpace(string(sum)) != d || d != a.Digest {
			t.Errorf("the embedded digest for %s is stale or damaged: run `make agents` and commit internal/agentbin", p)
		}
	}
}

// Each embedded agent is a static executable for its platform.
func TestEmbeddedAgentsAreStatic(t *testing.T) {
	want := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	got := Platforms()
	if len(got) != len(want) {
		t.Fatalf("platforms %v, want %d", got, len(want))
	}
	for _, p := range got {
		a, err := For(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(a.Bytes))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.Machine != want[p] || f.Type != elf.ET_EXEC {
			t.Errorf("%s: machine %s type %s", p, f.Machine, f.Type)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", p)
			}
		}
		// Decompressed anew each time (nothing keeps the megabytes), the
		// same bytes, named by the digest recorded beside them.
		if again, _ := For(p); again == a || !bytes.Equal(again.Bytes, a.Bytes) || len(a.Digest) != 64 {
			t.Errorf("%s: kept, or not the same bytes again, or digest %q", p, a.Digest)
		}
		if d, err := Digest(p); err != nil || d != a.Digest {
			t.Errorf("%s: recorded digest %q (%v), the bytes' %q", p, d, err, a.Digest)
		}
	}
}

func TestNoAgentForOtherPlatforms(t *testing.T) {
	for _, p := range []string{"", "linux", "windows/amd64", "linux/386", "linux/../amd64", "linux/amd64/x", "darwin/arm64"} {
		_, err := For(p)
		var ne *NoAgentError
		if !errors.As(err, &ne) {
			t.Errorf("For(%q): %v, want a NoAgentError", p, err)
		}
	}
}
