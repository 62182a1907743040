package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// hostDir is a directory the engine's user can read and write (the
// rootless engine's user cannot enter root's temp dirs).
func (e *env) hostDir(name string) string {
	d := filepath.Join(e.tg.StateDir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if e.tg.Rootless {
		var uid, gid int
		fmt.Sscanf(os.Getenv("HSBX_IT_ROOTLESS_UID")+":"+os.Getenv("HSBX_IT_ROOTLESS_GID"), "%d:%d", &uid, &gid)
		if err := os.Chown(d, uid, gid); err != nil {
			e.t.Fatal(err)
		}
	}
	return d
}

// bigFile writes n bytes that do not compress, returning their sha256.
func bigFile(t *testing.T, p string, n int) [32]byte {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	h := sha256.New()
	for written := 0; written < n; written += len(block) {
		for i := 0; i < len(block); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8; j++ {
				block[i+j] = byte(v >> (8 * j))
			}
		}
		b := block[:min(len(block), n-written)]
		f.Write(b)
		h.Write(b)
	}
	return [32]byte(h.Sum(nil))
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return [32]byte(h.Sum(nil))
}

// tree makes a directory tree with awkward names and returns its files
// relative to root, with contents.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{
		"a.txt":                   "alpha\n",
		"sub/b, with=comma.txt":   "beta\n",
		"sub/deeper/c":            strings.Repeat("gamma\n", 1000),
		"sub/deeper/ünïcode name": "delta\n",
		".hidden":                 "",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "empty"), 0o755)
	return files
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			got[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return got
}

// Copy in and out: a big file (200 MB under make soak, 24 MB in the
// gate: well past every buffer on the way) and a directory tree, into a running and
// a stopped sandbox (and out of both), as paths and as tar streams, on every
// engine; a stopped sandbox stays stopped, and what was copied into it is
// there when it runs.
func TestCopyInAndOut(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.skipOnKube("this test copies into a stopped sandbox, and stopping deletes a Pod; copies on Kubernetes are TestClusterCopyHostPaths and TestClusterCopyStreams")
		ctx := context.Background()
		sb := e.manager().Sandbox(e.key("copy"), e.spec())
		t.Cleanup(func() { sb.Down(ctx) })
		in, out := e.hostDir("in"), e.hostDir("out")
		size := enginetest.Count(24<<20, 200<<20)
		sum := bigFile(t, filepath.Join(in, "big.bin"), size)
		files := tree(t, filepath.Join(in, "tree"))

		// The rootless engine's container root cannot write the per-key
		// /workspace these tests (running as host root) make; a rootless
		// user's own hsbx makes it theirs. Its image layer is writable.
		ws := "/workspace"
		if e.tg.Rootless {
			ws = "/var"
		}

		// Copying in creates the sandbox.
		if err := sb.Copies().In(ctx, filepath.Join(in, "big.bin"), ws+"/"); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "tree"), ws+"/"); err != nil {
			t.Fatal(err)
		}
		if !e.tg.Fake { // the fake's exec runs on the host: only cp sees its files
			got, err := sb.Output(ctx, "sh", "-c", "wc -c < $0/big.bin; cat $0/tree/sub/deeper/c | wc -l; ls -A $0/tree", ws)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d\n1000\n.hidden\na.txt\nempty\nsub\n", size); strings.Join(strings.Fields(string(got)), "\n")+"\n" != want {
				t.Errorf("in the sandbox:\n%s\nwant\n%s", got, want)
			}
		}
		if err := sb.Copies().Out(ctx, ws+"/big.bin", filepath.Join(out, "big.bin")); err != nil {
			t.Fatal(err)
		}
		if fileSum(t, filepath.Join(out, "big.bin")) != sum {
			t.Errorf("the %d MB file came back different", size>>20)
		}

		// Stopped: copies work and leave it stopped.
		if _, err := sb.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "tree", "a.txt"), ws+"/stopped.txt"); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "big.bin"), ws+"/big-stopped.bin"); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "tree")+"/.", ws+"/tree-stopped"); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().Out(ctx, ws+"/tree", filepath.Join(out, "tree")); err != nil {
			t.Fatal(err)
		}
		if got := readTree(t, filepath.Join(out, "tree")); !maps.Equal(got, files) {
			t.Errorf("tree out of a stopped sandbox:\n%v\nwant\n%v", got, files)
		}
		if _, err := os.Stat(filepath.Join(out, "tree", "empty")); err != nil {
			t.Errorf("the empty directory did not come back: %v", err)
		}
		var arch bytes.Buffer
		if err := sb.Copies().OutArchive(ctx, ws+"/stopped.txt", &arch); err != nil {
			t.Fatal(err)
		}
		if names, contents := untar(t, &arch); !slices.Equal(names, []string{"stopped.txt"}) || contents["stopped.txt"] != "alpha\n" {
			t.Errorf("archive of the file copied into the stopped sandbox: %v %q", names, contents)
		}
		if st := state(t, e, sb); st == runtime.StateRunning {
			t.Errorf("copies started the stopped sandbox (state %s)", st)
		}

		// What went into the stopped sandbox is there once it runs.
		if _, err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().Out(ctx, ws+"/big-stopped.bin", filepath.Join(out, "big-stopped.bin")); err != nil {
			t.Fatal(err)
		}
		if fileSum(t, filepath.Join(out, "big-stopped.bin")) != sum {
			t.Error("the 200 MB file copied into the stopped sandbox came back different")
		}
		if err := sb.Copies().Out(ctx, ws+"/tree-stopped", filepath.Join(out, "tree-stopped")); err != nil {
			t.Fatal(err)
		}
		if got := readTree(t, filepath.Join(out, "tree-stopped")); !maps.Equal(got, files) {
			t.Errorf("tree copied into the stopped sandbox:\n%v\nwant\n%v", got, files)
		}
		if !e.tg.Fake {
			got, err := sb.Output(ctx, "sh", "-c", "wc -c < $0/big-stopped.bin; ls -A $0/tree-stopped", ws)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d\n.hidden\na.txt\nempty\nsub\n", size); strings.Join(strings.Fields(string(got)), "\n")+"\n" != want {
				t.Errorf("in the sandbox after its start:\n%s\nwant\n%s", got, want)
			}
		}

		// A tar stream in, into a running sandbox.
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "streamed/x=1,2.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
		tw.Write([]byte("xyz"))
		tw.Close()
		if err := sb.Copies().InArchive(ctx, ws, &tb); err != nil {
			t.Fatal(err)
		}
		arch.Reset()
		if err := sb.Copies().OutArchive(ctx, ws+"/streamed", &arch); err != nil {
			t.Fatal(err)
		}
		if _, contents := untar(t, &arch); contents["streamed/x=1,2.txt"] != "xyz" {
			t.Errorf("streamed file: %q", contents)
		}

		// Errors name the cause.
		if err := sb.Copies().Out(ctx, ws+"/nonexistent", filepath.Join(out, "x")); !errors.Is(err, runtime.ErrNoSuchPath) {
			t.Errorf("copying out a missing path: %v, want ErrNoSuchPath", err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "nonexistent"), ws+"/"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("copying in a missing host path: %v, want ErrNotExist", err)
		}
		e.log.reset()
		err := sb.Copies().In(ctx, filepath.Join(in, "tree", "a.txt"), "/tmp/a.txt")
		if e.rt.Dialect() == runtime.Docker && !errors.Is(err, sandbox.ErrMemoryPath) {
			t.Errorf("copying into /tmp on docker: %v, want ErrMemoryPath", err)
		}
		if e.rt.Dialect() == runtime.Podman && err != nil {
			t.Errorf("copying into /tmp of a running sandbox on podman: %v", err)
		}
		if e.rt.Dialect() == runtime.Docker && slices.ContainsFunc(e.log.all(), func(l string) bool { return strings.Contains(l, " cp ") }) {
			t.Errorf("a refused copy ran the engine's cp:\n%s", strings.Join(e.log.all(), "\n"))
		}

		none := e.manager().Sandbox(e.key("copy-none"), e.spec())
		if err := none.Copies().Out(ctx, "/workspace", out); !errors.Is(err, sandbox.ErrNoSandbox) {
			t.Errorf("copying out of a task without a sandbox: %v, want ErrNoSandbox", err)
		}
		if ls, _ := e.manager().List(ctx, e.key("copy-none").Scope(), false, nil); slices.ContainsFunc(ls, func(l sandbox.Listing) bool { return l.Task == e.key("copy-none").Task }) {
			t.Error("copying out of a task without a sandbox made one")
		}
	})
}

func state(t *testing.T, e *env, sb *sandbox.Sandbox) runtime.State {
	t.Helper()
	cs, err := e.rt.List(context.Background(), runtime.ListOptions{Labels: sb.Key().Filters()})
	if err != nil || len(cs) != 1 {
		t.Fatalf("listing the sandbox: %v %v", cs, err)
	}
	return cs[0].State
}

func untar(t *testing.T, r io.Reader) ([]string, map[string]string) {
	t.Helper()
	var names []string
	contents := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, contents
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			contents[h.Name] = string(b)
		}
	}
}

// The review's cp out: a sandbox's /workspace/abs -> /etc/passwd arrived
// on the host as a link to the host's /etc/passwd, a tree with root -> /
// arrived with that link, and podman kept nested escaping links. Now no
// link that points outside what was copied is made on the host; the rest
// arrives, the refused ones are named, and a sparse file stays sparse.
func TestCopyOutKeepsLinksInside(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fakes' shell cannot make links or sparse files in a sandbox")
		}
		ctx := context.Background()
		sb := e.shared(t, false)
		w := "/cptest-" + e.base + "/w" // the sandbox is shared: this test's own
		script := `set -e; mkdir -p ` + w + `/sub/deep; cd ` + w + `; echo hi > f
ln -s /etc/passwd abs; ln -s / root; ln -s ../../.. sub/deep/up; ln -s ../f sub/rel; ln f hard
dd if=/dev/zero of=sparse bs=1 count=0 seek=67108864 2>/dev/null`
		var errb bytes.Buffer
		if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stderr: &errb}); err != nil || code != 0 {
			t.Fatalf("making the tree: %d %v %s", code, err, errb.String())
		}
		for _, src := range []string{w, w + "/."} {
			dst := filepath.Join(e.hostDir("cp-links-out"), fmt.Sprint(len(src)))
			err := sb.Copies().Out(ctx, src, dst)
			var le *sandbox.LinksRefusedError
			if e.kube() && !errors.As(err, &le) && err != nil && strings.Contains(err.Error(), "unexpected EOF") {
				// kubectl exec can end a long stream early (kubernetes
				// issue 124571; seen here once on a loaded machine):
				// hsbx says the copy stopped. Reading is safe to repeat.
				t.Logf("%s: kubectl's stream ended early (%v): once more", src, err)
				dst += "-again"
				err = sb.Copies().Out(ctx, src, dst)
			}
			if !errors.As(err, &le) || len(le.Refused) != 3 {
				t.Fatalf("%s: want 3 links refused, got %v", src, err)
			}
			for _, w := range []string{"abs -> /etc/passwd", "root -> /", "up -> ../../.."} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q not named in %v", src, w, err)
				}
			}
			_ = filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type()&os.ModeSymlink != 0 {
					to, rerr := filepath.EvalSymlinks(p)
					if rerr == nil && !strings.HasPrefix(to, dst+"/") {
						t.Errorf("%s: %s resolves to %s on the host", src, p, to)
					}
				}
				return nil
			})
			if b, err := os.ReadFile(filepath.Join(dst, "sub", "rel")); err != nil || string(b) != "hi\n" {
				t.Errorf("%s: the inside link: %q %v", src, b, err)
			}
			if b, err := os.ReadFile(filepath.Join(dst, "hard")); err != nil || string(b) != "hi\n" {
				t.Errorf("%s: the hard link: %q %v", src, b, err)
			}
			fi, err := os.Stat(filepath.Join(dst, "sparse"))
			if err != nil || fi.Size() != 64<<20 {
				t.Fatalf("%s: sparse file: %v %v", src, fi, err)
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 > 1<<20 {
				t.Errorf("%s: a 64 MiB hole took %d bytes of the host's disk", src, st.Blocks*512)
			}
		}
	})
}

// A relative sandbox path means one thing everywhere: it is taken from the
// sandbox's working directory (Spec.Cwd), where a command runs — for
// exec's WorkDir (the OCI runtime refused a relative one: "Cwd must be an
// absolute path", 126) and for both directions of a copy (the engines'
// cp took it from /).
func TestRelativePathsFromTheWorkingDirectory(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.tg.Fake {
			t.Skip("the fake's exec runs on the host; testscript paths_relative checks the argv on the fakes")
		}
		ctx := context.Background()
		spec := e.spec()
		spec.Cwd = "/var" // the image layer: writable for a rootless engine's root too
		sb := e.manager().Sandbox(e.key("relative"), spec)
		t.Cleanup(func() { sb.Down(ctx) })
		if out, err := sb.Output(ctx, "sh", "-c", "mkdir -p sub && pwd"); err != nil || string(out) != "/var\n" {
			t.Fatalf("pwd: %q %v", out, err)
		}
		var pwd bytes.Buffer
		code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"pwd"}, WorkDir: "sub", Stdout: &pwd})
		if err != nil || code != 0 || pwd.String() != "/var/sub\n" {
			t.Errorf("pwd with WorkDir sub: %q %d %v, want /var/sub", pwd.String(), code, err)
		}
		in := e.hostDir("relative-in")
		if err := os.WriteFile(filepath.Join(in, "f.txt"), []byte("relative\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := sb.Copies().In(ctx, filepath.Join(in, "f.txt"), "sub/f.txt"); err != nil {
			t.Fatal(err)
		}
		if out, err := sb.Output(ctx, "cat", "/var/sub/f.txt"); err != nil || string(out) != "relative\n" {
			t.Errorf("copied in to sub/f.txt: /var/sub/f.txt holds %q %v", out, err)
		}
		back := filepath.Join(e.hostDir("relative-out"), "back.txt")
		if err := sb.Copies().Out(ctx, "sub/f.txt", back); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(back); err != nil || string(b) != "relative\n" {
			t.Errorf("copied out of sub/f.txt: %q %v", b, err)
		}
	})
}
