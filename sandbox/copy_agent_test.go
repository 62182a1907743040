package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// A memory-backed path (/tmp, and /workspace in a non-persistent sandbox)
// that docker's cp cannot reach is copied through hsbx's agent in a
// running sandbox, both ways, with cp's placement and the host's rules for
// what comes out; the engine's cp is not called. (Not on the fakes: their
// agent runs on this host, whose /tmp it would write.)
func TestCopyToMemoryPathsThroughTheAgent(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake || e.kube() {
			t.Skip("the fakes run the agent on this host; kubectl's cp reaches memory-backed paths itself")
		}
		ctx := context.Background()
		m := sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: t.TempDir(),
			Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}, Channel: true})
		spec := e.spec()
		spec.Persistent = false // /workspace is memory-backed too
		sb := m.Sandbox(e.key("memcp"), spec)
		t.Cleanup(func() { _ = sb.Close(ctx) })
		if _, err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		in, out := e.hostDir("in"), e.hostDir("out") // the rootless engine's user reads them too
		files := map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n", "sp ace,=.txt": "x"}
		for name, body := range files {
			must := os.MkdirAll(filepath.Join(in, "tree", filepath.Dir(name)), 0o755)
			if must != nil {
				t.Fatal(must)
			}
			if err := os.WriteFile(filepath.Join(in, "tree", name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		e.log.reset()
		for _, dst := range []string{"/tmp", "/workspace"} {
			if err := sb.Copies().In(ctx, filepath.Join(in, "tree", "a.txt"), dst+"/a.txt"); err != nil {
				t.Fatalf("file into %s: %v", dst, err)
			}
			if err := sb.Copies().In(ctx, filepath.Join(in, "tree"), dst); err != nil {
				t.Fatalf("tree into %s: %v", dst, err)
			}
			if err := sb.Copies().In(ctx, filepath.Join(in, "tree")+"/.", dst+"/merged"); err != nil {
				t.Fatalf("tree contents into %s/merged: %v", dst, err)
			}
			var got bytes.Buffer
			code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", "cat " + dst + "/a.txt " + dst + "/tree/sub/b.txt " + dst + "/merged/sub/b.txt"}, Stdout: &got})
			if err != nil || code != 0 || got.String() != "alpha\nbeta\nbeta\n" {
				t.Fatalf("%s as commands see it: %d %q %v", dst, code, got.String(), err)
			}
			back := filepath.Join(out, strings.TrimPrefix(dst, "/"))
			if err := sb.Copies().Out(ctx, dst+"/tree", back); err != nil {
				t.Fatalf("tree out of %s: %v", dst, err)
			}
			if got := readTree(t, back); !maps.Equal(got, files) {
				t.Errorf("tree out of %s:\n%v\nwant\n%v", dst, got, files)
			}
		}
		// What comes out keeps the host's rules: no link to the host's files.
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"ln", "-s", "/etc/passwd", "/tmp/tree/evil"}}); err != nil || code != 0 {
			t.Fatalf("ln: %d %v", code, err)
		}
		var lre *sandbox.LinksRefusedError
		if err := sb.Copies().Out(ctx, "/tmp/tree", filepath.Join(out, "evil")); !errors.As(err, &lre) {
			t.Fatalf("a link to /etc/passwd out of /tmp: %v, want LinksRefusedError", err)
		}
		if _, err := os.Lstat(filepath.Join(out, "evil", "evil")); err == nil {
			t.Fatal("the link to the host's /etc/passwd was made")
		}
		if e.rt.Dialect() == runtime.Docker {
			if slices.ContainsFunc(e.log.all(), func(l string) bool {
				return strings.Contains(l, " cp ") && (strings.Contains(l, ":/tmp") || strings.Contains(l, ":/workspace"))
			}) { // (the agent's own install is a cp to /)
				t.Errorf("docker's cp was called for memory-backed paths:\n%s", strings.Join(e.log.all(), "\n"))
			}
		}
	})
}

// Small copies go through the exec channel's agent when its channel is
// up (Config.CopyChannelMax): no engine call at all, and what lands in
// the sandbox, or on the host, is what the engine's cp makes — names,
// contents, modes, times, owners. Over the bound, a copy out the agent
// hands back, a missing path: the engine's cp, with its words.
func TestSmallCopiesGoThroughTheAgent(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes run the agent on this host: a copy through it would be made here")
		}
		ctx := context.Background()
		manager := func(bound int64) *sandbox.Manager {
			return sandbox.New(sandbox.Config{Runtime: e.rt, StateDir: e.tg.StateDir, CacheDir: t.TempDir(),
				Environ: e.tg.Env, StopGrace: 5 * time.Second, Warn: func(string) {}, Channel: true, CopyChannelMax: bound})
		}
		spec := e.spec()
		fast := manager(1<<20).Sandbox(e.key("fastcp"), spec)
		engine := manager(0).Sandbox(e.key("fastcp"), spec)
		t.Cleanup(func() { _ = fast.Close(ctx); _ = engine.Close(ctx) })
		if _, err := fast.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if code, err := fast.Exec(ctx, sandbox.Command{Argv: []string{"true"}}); err != nil || code != 0 { // opens the channel
			t.Fatalf("exec: %d %v", code, err)
		}
		// The engine's copy: its cp; in a Pod, tar through an exec.
		engineCopy := func(l string) bool { return strings.Contains(l, " cp ") }
		if e.kube() {
			engineCopy = func(l string) bool { return strings.Contains(l, " exec ") && strings.Contains(l, "tar -") }
		}
		ws := "/workspace" // as TestCopyInAndOut
		switch {
		case e.tg.Rootless:
			ws = "/var"
		case e.kube():
			ws = "/tmp"
		}
		in, out := e.hostDir("fastin"), e.hostDir("fastout")
		src := filepath.Join(in, "tree")
		files := map[string]string{"a.txt": "alpha\n", "run.sh": "#!/bin/sh\n", "sub/b": "beta", "sp ace,=.txt": ""}
		modes := map[string]os.FileMode{"a.txt": 0o640, "run.sh": 0o755, "sub/b": 0o600, "sp ace,=.txt": 0o666, "sub": 0o750, ".": 0o751}
		for name, body := range files {
			if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
			t.Fatal(err)
		}
		when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		var uid, gid int // the rootless engine's user reads them
		fmt.Sscanf(os.Getenv("HSBX_IT_ROOTLESS_UID")+":"+os.Getenv("HSBX_IT_ROOTLESS_GID"), "%d:%d", &uid, &gid)
		for _, name := range []string{"a.txt", "run.sh", "sub/b", "sp ace,=.txt", "link", "sub", "."} { // leaves first
			p := filepath.Join(src, name)
			if e.tg.Rootless {
				if err := os.Lchown(p, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
			if name == "link" {
				continue
			}
			if err := os.Chmod(p, modes[name]); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, when, when); err != nil {
				t.Fatal(err)
			}
		}

		// In: the agent, no engine call; the same as the engine's cp.
		e.log.reset()
		if err := fast.Copies().In(ctx, src, ws+"/viaagent"); err != nil {
			t.Fatal(err)
		}
		if calls := e.log.all(); len(calls) != 0 {
			t.Errorf("a small copy in made engine calls:\n%s", strings.Join(calls, "\n"))
		}
		if err := engine.Copies().In(ctx, src, ws+"/viaengine"); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(e.log.all(), engineCopy) {
			t.Errorf("the engine's copy made no cp call:\n%s", strings.Join(e.log.all(), "\n"))
		}
		listing := func(dir string) string {
			t.Helper()
			var b bytes.Buffer
			// name, mode, owner, kind; times for all but links (engines
			// differ there) and, in a Pod, directories (busybox's tar, which
			// makes the engine's copy there, leaves them the time of the copy)
			script := `cd "$1" && find . -exec stat -c '%n|%a|%u:%g|%F|%Y' {} + | sed '/symbolic link/s/|[0-9]*$//' | sort`
			if e.kube() {
				script = strings.Replace(script, "| sort", "| sed '/directory/s/|[0-9]*$//' | sort", 1)
			}
			code, err := fast.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script, "sh", dir}, Stdout: &b})
			if err != nil || code != 0 {
				t.Fatalf("listing %s: %d %v", dir, code, err)
			}
			return b.String()
		}
		got, want := listing(ws+"/viaagent"), listing(ws+"/viaengine")
		if got != want {
			t.Errorf("the agent's copy in:\n%s\nthe engine's:\n%s", got, want)
		}
		if !strings.Contains(got, "./sub|750|0:0|directory") || !strings.Contains(got, "./run.sh|755|0:0|regular file|"+fmt.Sprint(when.Unix())) ||
			!strings.Contains(got, "./sp ace,=.txt|666|") {
			t.Errorf("modes, owners or times not kept:\n%s", got)
		}

		// Out: the agent, no engine call; a file, a tree, a tree's contents.
		e.log.reset()
		if err := fast.Copies().Out(ctx, ws+"/viaagent", filepath.Join(out, "tree")); err != nil {
			t.Fatal(err)
		}
		if err := fast.Copies().Out(ctx, ws+"/viaagent/sub/b", filepath.Join(out, "b")); err != nil {
			t.Fatal(err)
		}
		if err := fast.Copies().Out(ctx, ws+"/viaagent/.", filepath.Join(out, "contents")); err != nil {
			t.Fatal(err)
		}
		var ar bytes.Buffer
		if err := fast.Copies().OutArchive(ctx, ws+"/viaagent/sub", &ar); err != nil {
			t.Fatal(err)
		}
		if calls := e.log.all(); len(calls) != 0 {
			t.Errorf("small copies out made engine calls:\n%s", strings.Join(calls, "\n"))
		}
		for _, d := range []string{"tree", "contents"} {
			if got := readTree(t, filepath.Join(out, d)); !maps.Equal(got, files) {
				t.Errorf("%s out:\n%v\nwant\n%v", d, got, files)
			}
			if l, err := os.Readlink(filepath.Join(out, d, "link")); err != nil || l != "a.txt" {
				t.Errorf("%s out: the link: %q %v", d, l, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(out, "b")); err != nil || string(b) != "beta" {
			t.Errorf("a file out: %q %v", b, err)
		}
		if fi, err := os.Stat(filepath.Join(out, "tree", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 || !fi.ModTime().Equal(when) {
			t.Errorf("run.sh out: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Join(out, "tree", "sub")); err != nil || !fi.ModTime().Equal(when) {
			t.Errorf("sub out: %v %v", fi, err)
		}
		if names, contents := untar(t, &ar); !slices.Equal(names, []string{"sub", "sub/b"}) || contents["sub/b"] != "beta" {
			t.Errorf("the archive out: %v %v", names, contents)
		}

		// A stream in (`hsbx cp - :DIR`), several entries at its top: the
		// agent when it is small, the engine's cp when it is not.
		stream := func(names ...string) *bytes.Buffer {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for _, n := range names {
				size := int64(len(n))
				if strings.HasPrefix(n, "big") {
					size = 2 << 20
				}
				if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
					t.Fatal(err)
				}
				_, _ = tw.Write([]byte(n))
				_, _ = tw.Write(make([]byte, size-int64(len(n))))
			}
			_ = tw.Close()
			return &b
		}
		e.log.reset()
		if err := fast.Copies().InArchive(ctx, ws+"/viaagent/sub", stream("s1", "s2")); err != nil {
			t.Fatal(err)
		}
		if calls := e.log.all(); len(calls) != 0 {
			t.Errorf("a small stream in made engine calls:\n%s", strings.Join(calls, "\n"))
		}
		if err := fast.Copies().InArchive(ctx, ws+"/viaagent/sub", stream("big1", "s3")); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(e.log.all(), engineCopy) {
			t.Errorf("a stream over the bound made no engine copy:\n%s", strings.Join(e.log.all(), "\n"))
		}
		var ls bytes.Buffer
		if code, err := fast.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", `cd "$1" && cat s1 s2 s3 && wc -c < big1`, "sh", ws + "/viaagent/sub"}, Stdout: &ls}); err != nil || code != 0 ||
			strings.TrimSpace(ls.String()) != "s1s2s32097152" { // (no newlines in them)
			t.Errorf("the streams in: %d %v %q", code, err, ls.String())
		}

		// Over the bound, both ways: the engine's cp.
		big := filepath.Join(in, "big.bin")
		sum := bigFile(t, big, 2<<20)
		e.log.reset()
		if err := fast.Copies().In(ctx, big, ws+"/big.bin"); err != nil {
			t.Fatal(err)
		}
		if err := fast.Copies().Out(ctx, ws+"/big.bin", filepath.Join(out, "big.bin")); err != nil {
			t.Fatal(err)
		}
		if n := len(slices.DeleteFunc(e.log.all(), func(l string) bool { return !engineCopy(l) })); n != 2 {
			t.Errorf("copies over the bound: %d cp calls, want 2:\n%s", n, strings.Join(e.log.all(), "\n"))
		}
		if fileSum(t, filepath.Join(out, "big.bin")) != sum {
			t.Error("the big file came back different")
		}

		// A path that is not there: the engine's error, the same either way.
		errFast := fast.Copies().Out(ctx, ws+"/nothing", filepath.Join(out, "nothing"))
		errEngine := engine.Copies().Out(ctx, ws+"/nothing", filepath.Join(out, "nothing"))
		if errFast == nil || errors.Is(errFast, runtime.ErrNoSuchPath) != errors.Is(errEngine, runtime.ErrNoSuchPath) {
			t.Errorf("a missing path out: %v, the engine's way: %v", errFast, errEngine)
		}
		errFast = fast.Copies().In(ctx, src, ws+"/no/such/dir")
		errEngine = engine.Copies().In(ctx, src, ws+"/no/such/dir")
		if errFast == nil || errors.Is(errFast, runtime.ErrNoSuchPath) != errors.Is(errEngine, runtime.ErrNoSuchPath) {
			t.Errorf("into a missing directory: %v, the engine's way: %v", errFast, errEngine)
		}
	})
}

// The sandbox's agent is the sandbox's: root there can replace it (hsbx
// runs what is at its path). On every engine, an agent that answers a
// copy out with an archive built to plant a link to a host file — a file,
// the same name again as a link climbing out of the destination, a hard
// link to that name — gets the copy refused and named, and the host file
// stays as it was, whatever is then written through what was copied.
func TestCopyOutFromAHostileAgent(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.managerWith(func(c *sandbox.Config) { c.Agent, c.CopyChannelMax = enginetest.HostileAgentBinary(t), 1<<20 })
		sb := m.Sandbox(e.key("hostile"), e.spec())
		t.Cleanup(func() { _, _ = sb.Down(ctx); _ = sb.Close(ctx) })
		if _, err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"mkdir", "-p", "/srv/src"}}); err != nil || code != 0 {
			t.Fatalf("mkdir: %d %v", code, err)
		}
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		if err := os.WriteFile(outside, []byte("host file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(base, "dest")
		err := sb.Copies().Out(ctx, "/srv/src", dst)
		var lr *sandbox.LinksRefusedError
		if !errors.As(err, &lr) || !strings.Contains(err.Error(), "h =>") {
			t.Fatalf("cp out from a hostile agent: %v, want the hard link h refused and named", err)
		}
		if st, lerr := os.Lstat(filepath.Join(dst, "h")); lerr == nil && !st.Mode().IsRegular() {
			t.Errorf("h is a %v", st.Mode().Type())
		}
		for _, p := range []string{"h", "a/b/c/f"} {
			if f, oerr := os.OpenFile(filepath.Join(dst, p), os.O_WRONLY|os.O_APPEND, 0); oerr == nil {
				_, _ = f.WriteString("x\n")
				_ = f.Close()
			}
		}
		if b, _ := os.ReadFile(outside); string(b) != "host file\n" {
			t.Fatalf("the host file outside the destination changed: %q", b)
		}
	})
}
