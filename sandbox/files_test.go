package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/record"
	"github.com/hsbx/hsbx/sandbox"
	"github.com/hsbx/hsbx/sandbox/files"
)

// The file operations on every engine, through the exec channel and as
// plain execs of the agent: binary content byte for byte, parents made,
// a relative path from the working directory, memory-backed (tmpfs)
// paths, modes, listing, the kinds of failure, removal, another user's
// permissions, and a watch that sees what a command does. On the fakes a
// sandbox's files are the host's: the test works in a temporary directory
// there, and does nothing as another user on the plain path (the fake
// engine cannot switch user).
func TestFiles(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.eachRoute(t, func(t *testing.T, route execRoute, m *sandbox.Manager) {
			spec := e.spec()
			if e.tg.Rootless {
				spec.Cwd = "/tmp" // /root is a host directory the test made: not the rootless root's
			}
			// Another user: the fake engine cannot switch, kubectl has
			// no --user (only the channel can there).
			userOK := route.channel || !e.tg.Fake && !e.kube()
			sb := m.Sandbox(e.key("files-"+route.name), spec)
			t.Cleanup(func() { _ = sb.Close(ctx) })
			dirs := []string{"/workspace/" + e.base + route.name, "/tmp/" + e.base + route.name}
			switch {
			case e.tg.Fake:
				dirs = []string{t.TempDir()}
			case e.tg.Rootless:
				// The key's host directories are made by the test (root
				// on the host, nobody in the rootless user namespace),
				// not by the rootless user hsbx would run as.
				dirs = dirs[1:]
			}
			sh := func(script string) string {
				if e.tg.Fake && !route.channel {
					return "" // the fake engine's shell has no wc, stat, ...
				}
				t.Helper()
				var out, errb bytes.Buffer
				if code, err := sb.Exec(ctx, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb}); code != 0 || err != nil {
					t.Fatalf("%s: %d %v %s", script, code, err, errb.String())
				}
				return strings.TrimSpace(out.String())
			}
			data := make([]byte, 1<<20+3)
			_, _ = rand.Read(data)
			for i := range 256 {
				data[i] = byte(i)
			}
			for _, dir := range dirs {
				p := dir + "/a/b/c.bin"
				if err := files.Of(sb).Write(ctx, p, bytes.NewReader(data), files.Options{Mode: 0o600}); err != nil {
					t.Fatalf("write %s: %v", p, err)
				}
				var got bytes.Buffer
				if err := files.Of(sb).Read(ctx, p, &got, files.Options{}); err != nil || !bytes.Equal(got.Bytes(), data) {
					t.Fatalf("read %s back: %d bytes of %d, %v", p, got.Len(), len(data), err)
				}
				if n := sh("wc -c < " + p); !e.tg.Fake && n != "1048579" {
					t.Errorf("a command in the sandbox sees %s bytes in %s", n, p)
				}
				ents, err := files.Of(sb).List(ctx, dir+"/a/b", files.Options{})
				if err != nil || len(ents) != 1 || ents[0].Name != "c.bin" || ents[0].Type != "file" || ents[0].Size != int64(len(data)) || ents[0].Mode != 0o600 {
					t.Errorf("list %s/a/b: %+v %v", dir, ents, err)
				}
				kinds := []struct {
					name string
					err  error
					want error
				}{
					{"read a missing file", files.Of(sb).Read(ctx, dir+"/none", &got, files.Options{}), fs.ErrNotExist},
					{"read a directory", files.Of(sb).Read(ctx, dir+"/a", &got, files.Options{}), files.ErrIsDir},
					{"read over the bound", files.Of(sb).Read(ctx, p, &got, files.Options{MaxBytes: 10}), files.ErrTooLarge},
					{"list a file", func() error { _, err := files.Of(sb).List(ctx, p, files.Options{}); return err }(), files.ErrNotDir},
					{"remove a full directory", files.Of(sb).Remove(ctx, dir+"/a", files.Options{}), files.ErrNotEmpty},
					{"write over the bound", files.Of(sb).Write(ctx, dir+"/big", bytes.NewReader(data), files.Options{MaxBytes: 10}), files.ErrTooLarge},
				}
				if userOK {
					kinds = append(kinds, struct {
						name string
						err  error
						want error
					}{"read root's 0600 file as nobody", files.Of(sb).Read(ctx, p, &got, files.Options{User: "nobody"}), fs.ErrPermission})
				}
				// Input that fails part-way (the caller's reader; hsbx
				// killed) leaves nothing, not half a file.
				half := io.MultiReader(bytes.NewReader(data[:5000]), failingReader{})
				if err := files.Of(sb).Write(ctx, dir+"/half", half, files.Options{}); err == nil {
					t.Errorf("a write whose input failed succeeded")
				}
				if _, err := files.Of(sb).List(ctx, dir+"/half", files.Options{}); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("a write whose input failed left %s/half: %v", dir, err)
				}
				for _, k := range kinds {
					var fe *files.Error
					if !errors.Is(k.err, k.want) || !errors.As(k.err, &fe) {
						t.Errorf("%s in %s: %v, want %v", k.name, dir, k.err, k.want)
					}
				}
				if err := files.Of(sb).Remove(ctx, dir+"/a", files.Options{Recursive: true}); err != nil {
					t.Fatal(err)
				}
				if _, err := files.Of(sb).List(ctx, dir+"/a", files.Options{}); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("after rm -r: %v", err)
				}
			}
			// Each went into the record of what ran, by the route taken.
			recs, err := record.Read(sandbox.RecordFile(e.tg.StateDir))
			kinds := map[string]int{}
			for _, r := range recs {
				if r.Sandbox == sb.Name() && strings.HasPrefix(r.Kind, "file ") {
					kinds[r.Kind]++
					want := map[bool]string{true: "channel", false: "engine"}[route.channel]
					if r.Via != want && r.Error == "" {
						t.Errorf("record %+v: via %q, want %q", r, r.Via, want)
					}
				}
			}
			if err != nil || kinds["file write"] == 0 || kinds["file read"] == 0 || kinds["file list"] == 0 || kinds["file remove"] == 0 {
				t.Errorf("the record of what ran holds %v (%v)", kinds, err)
			}
			if e.tg.Fake {
				return
			}
			// Relative to the working directory (/root), and as nobody:
			// owned by it.
			if err := files.Of(sb).Write(ctx, e.base+"rel.txt", strings.NewReader("rel\n"), files.Options{}); err != nil {
				t.Fatal(err)
			}
			if got := sh("cat " + path.Join(spec.Cwd, e.base+"rel.txt")); got != "rel" {
				t.Errorf("a relative path: %q in the working directory", got)
			}
			err = files.Of(sb).Write(ctx, "/tmp/"+e.base+"owned", strings.NewReader("x"), files.Options{User: "nobody"})
			var se *sandbox.SpecError
			switch {
			case !userOK && (!errors.As(err, &se) || se.Setting != "user"):
				t.Errorf("as nobody without a way to switch: %v, want the user refused", err)
			case !userOK:
			case err != nil:
				t.Fatal(err)
			default:
				if owner := sh("stat -c %u /tmp/" + e.base + "owned"); owner != "65534" {
					t.Errorf("written as nobody, owned by %s", owner)
				}
			}
			// A watch sees what a command does.
			wdir := "/tmp/" + e.base + "watch"
			sh("mkdir -p " + wdir)
			wctx, cancel := context.WithCancel(ctx)
			var mu sync.Mutex
			var seen []string
			ready := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- files.Of(sb).Watch(wctx, wdir, files.Options{Recursive: true}, func(ev files.Event) {
					if ev.Op == "watching" {
						close(ready)
						return
					}
					mu.Lock()
					seen = append(seen, ev.Op+" "+strings.TrimPrefix(ev.Path, wdir))
					mu.Unlock()
				})
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("watch ended before it began: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("no watch after 30s")
			}
			sh("echo x > " + wdir + "/f; mkdir " + wdir + "/d; sleep 0.3; echo y > " + wdir + "/d/g; rm " + wdir + "/f")
			want := []string{"created /f", "written /f", "created /d", "created /d/g", "written /d/g", "removed /f"}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				got := strings.Join(seen, ",")
				mu.Unlock()
				missing := ""
				for _, w := range want {
					if !strings.Contains(","+got+",", ","+w+",") {
						missing = w
					}
				}
				if missing == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("watch saw %q, not %q", got, missing)
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("watch ended by its context: %v", err)
			}
		})
	})
}

// failingReader fails as a caller's input can (a broken pipe).
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("the input broke") }
