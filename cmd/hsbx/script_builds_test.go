package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/rogpeppe/go-internal/testscript"
)

// An older hsbx, built from the repository's history once per test
// process: the other side of the version-skew scenarios. Each is a
// command that sets a variable to the binary and a condition that says
// whether it builds here (without the history it is false, or an error
// under HSBX_REQUIRE_ENGINES=1: CI must run those scenarios).
type olderBuild struct {
	env, what  string // the variable the command sets; what it is, for errors
	text, path string // built from just before the commit that added text to path
	sameProto  bool   // with its wire.Proto set to this build's
	once       sync.Once
	bin        string
	err        error
}

// cond is the build's testscript condition.
func (o *olderBuild) cond() (bool, error) {
	o.once.Do(func() { o.bin, o.err = buildBefore(o.text, o.path, o.sameProto) })
	if o.err != nil && os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
		return false, fmt.Errorf("building %s: %w", o.what, o.err)
	}
	return o.err == nil, nil
}

// cmd is the build's testscript command (no arguments): it sets o.env.
func (o *olderBuild) cmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: takes no arguments")
	}
	if ok, err := o.cond(); !ok {
		ts.Fatalf("building %s: %v (guard the script with its condition)", o.what, err)
	}
	ts.Setenv(o.env, o.bin)
}

// buildBefore builds hsbx statically as it was just before the first
// commit that added text to path (git log -S), from the repository's
// history, in a temp dir removed when the tests end.
func buildBefore(text, path string, sameProto bool) (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	out, err := exec.Command("git", "-C", root, "log", "-S", text, "--format=%H", "--", path).Output()
	commits := strings.Fields(string(out))
	if err != nil || len(commits) == 0 {
		return "", fmt.Errorf("no commit adds %q to %s in the history (%v)", text, path, err)
	}
	before := commits[len(commits)-1] + "^"
	dir, err := enginetest.TempDir("hsbx-old-")
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, before, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v: %s", before, err, out)
	}
	if sameProto {
		wf := filepath.Join(dir, "internal", "wire", "wire.go")
		b, err := os.ReadFile(wf)
		if err != nil {
			return "", err
		}
		re := regexp.MustCompile(`(?m)^const Proto = \d+$`)
		if !re.Match(b) {
			return "", fmt.Errorf("%s: no const Proto to set", wf)
		}
		b = re.ReplaceAll(b, []byte(fmt.Sprintf("const Proto = %d", wire.Proto)))
		if err := os.WriteFile(wf, b, 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "hsbx")
	build := exec.Command("go", "build", "-o", bin, "./cmd/hsbx")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v: %s", before, err, out)
	}
	return bin, nil
}

// cgo-hsbx: set CGOHSBX to this tree's hsbx built as a plain `go build`
// makes it where a C compiler is (cgo on: dynamically linked), once per
// test process (guarded by the [cgo] condition).
func cgoHsbxCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: cgo-hsbx")
	}
	if ok, err := haveCgoHsbx(); !ok {
		ts.Fatalf("building hsbx with cgo: %v (guard the script with [cgo])", err)
	}
	ts.Setenv("CGOHSBX", cgoBin)
}

// haveCgoHsbx is the [cgo] condition: hsbx builds with cgo here (a C
// compiler is installed). Without one it is false, or an error under
// HSBX_REQUIRE_ENGINES=1 (CI must build the way `go install` does).
func haveCgoHsbx() (bool, error) {
	cgoOnce.Do(func() {
		dir, err := enginetest.TempDir("hsbx-cgo-")
		if err != nil {
			errCgo = err
			return
		}
		cgoBin = filepath.Join(dir, "hsbx")
		build := exec.Command("go", "build", "-o", cgoBin, "./cmd/hsbx")
		build.Dir = filepath.Join("..", "..")
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := build.CombinedOutput(); err != nil {
			errCgo = fmt.Errorf("go build with CGO_ENABLED=1: %v: %s", err, out)
			return
		}
		f, err := elf.Open(cgoBin)
		if err != nil {
			errCgo = err
			return
		}
		defer f.Close()
		if !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
			errCgo = errors.New("the cgo build is not dynamically linked: the scenario would prove nothing")
		}
	})
	if errCgo != nil && os.Getenv("HSBX_REQUIRE_ENGINES") == "1" {
		return false, errCgo
	}
	return errCgo == nil, nil
}

// python3 is a Python 3 interpreter that runs with PATH holding only the
// test's bin dir: the system's first (a pyenv shim is a bash script).
func python3() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("python3")
	return p
}

var (
	// old-hsbx / [oldhsbx]: before the exec channel's protocol became
	// this one (the commit that set wire.Proto to its value).
	oldHsbx = &olderBuild{env: "OLDHSBX", what: "the previous protocol's hsbx",
		text: fmt.Sprintf("const Proto = %d", wire.Proto), path: "internal/wire/wire.go"}
	// precopy-agent / [precopyagent]: before the agent had the copy modes
	// (copy-in, copy-out) — an older build, made to speak this protocol
	// (its wire.Proto set to this one's: the frames it uses are the same).
	preCopyAgent = &olderBuild{env: "PRECOPYAGENT", what: "hsbx from before the agent's copy modes",
		text: `"copy-out"`, path: "internal/agent", sameProto: true}
)

var (
	cgoOnce sync.Once
	cgoBin  string
	errCgo  error
)
