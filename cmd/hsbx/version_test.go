package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `hsbx version` says which build it is, from what the build recorded:
// a build in a git checkout names its commit (and +dirty for uncommitted
// changes), never a made-up number; a release's -X Version wins.
func TestVersionFromTheBuild(t *testing.T) {
	root := filepath.Join("..", "..")
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
			t.Fatalf("CI runs in a git checkout: %v", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))[:12]
	bin := filepath.Join(t.TempDir(), "hsbx")
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-buildvcs=true"}, rev},
		{[]string{"-buildvcs=true", "-ldflags", "-X github.com/hsbx/hsbx/internal/cli.Version=v9.8.7"}, "hsbx v9.8.7 ("},
	} {
		build := exec.Command("go", append(append([]string{"build"}, c.flags...), "-o", bin, "./cmd/hsbx")...)
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %q: %v: %s", c.flags, err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil || !strings.Contains(string(out), c.want) || strings.Contains(string(out), "0.1.0") {
			t.Errorf("build %q: hsbx version printed %q (%v), want it to contain %q", c.flags, out, err, c.want)
		}
	}
}
