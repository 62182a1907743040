package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/cparchive"
)

// tree makes files (name -> content; "name/" a directory, "name@target" a
// link) under dir.
func tree(t *testing.T, dir string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f)
		switch {
		case strings.HasSuffix(f, "/"):
			must(t, os.MkdirAll(p, 0o755))
		case strings.Contains(f, "@"):
			name, target, _ := strings.Cut(f, "@")
			must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			must(t, os.Symlink(target, filepath.Join(dir, name)))
		default:
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, []byte("content of "+f), 0o644))
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// listing is every path under dir with what it is.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+"@"+l)
		case fi.IsDir():
			out = append(out, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			out = append(out, rel+"="+string(b))
		}
		return nil
	})
	return strings.Join(out, " ")
}

// Copies through the agent place files as `docker cp SRC ID:DST` does.
func TestCopyThroughTheAgentPlacesAsDockerCp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		src        string // under the source dir
		dst        string // under the destination dir
		before     []string
		want, fail string
	}{
		{"file into a dir", "f", "d", []string{"d/"}, "d/ d/f=content of f", ""},
		{"file as a new name", "f", "g", nil, "g=content of f", ""},
		{"file over a file", "f", "g", []string{"g"}, "g=content of f", ""},
		{"dir into a dir", "dir", "d", []string{"d/"}, "d/ d/dir/ d/dir/a=content of dir/a d/dir/l@a d/dir/sub/ d/dir/sub/b=content of dir/sub/b", ""},
		{"dir as a new name", "dir", "new", nil, "new/ new/a=content of dir/a new/l@a new/sub/ new/sub/b=content of dir/sub/b", ""},
		{"dir contents into a dir", "dir/.", "d", []string{"d/", "d/old"}, "d/ d/a=content of dir/a d/l@a d/old=content of d/old d/sub/ d/sub/b=content of dir/sub/b", ""},
		{"dir contents to a new dir", "dir/.", "new", nil, "new/ new/a=content of dir/a new/l@a new/sub/ new/sub/b=content of dir/sub/b", ""},
		{"dir over a file", "dir", "g", []string{"g"}, "", "cannot copy a directory"},
		{"file to a missing dir", "f", "missing/", nil, "", "no such directory"},
		{"missing parent", "f", "no/such/g", nil, "", "no such directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			tree(t, src, "f", "dir/a", "dir/sub/b", "dir/l@a")
			tree(t, dst, tc.before...)
			var buf bytes.Buffer
			must(t, cparchive.Archive(&buf, src+"/"+tc.src))
			err := TarIn(&buf, dst+"/"+tc.dst)
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("TarIn: %v, want %q", err, tc.fail)
				}
				return
			}
			must(t, err)
			if got := listing(t, dst); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// An archive cannot write outside where it is extracted: not through
// "..", nor through a link it made first.
func TestTarInStaysInside(t *testing.T) {
	for _, entries := range [][]*tar.Header{
		{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/../../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/out", Typeflag: tar.TypeSymlink, Linkname: "../../.."}, {Name: "x/out/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		outside := t.TempDir()
		dst := filepath.Join(outside, "a", "b")
		must(t, os.MkdirAll(dst, 0o755))
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			must(t, tw.WriteHeader(h))
		}
		must(t, tw.Close())
		if err := TarIn(&buf, dst); err == nil {
			t.Errorf("%s: no error", entries[len(entries)-1].Name)
		}
		matches, _ := filepath.Glob(filepath.Join(outside, "*", "escape"))
		m2, _ := filepath.Glob(filepath.Join(outside, "escape"))
		if len(matches)+len(m2) > 0 {
			t.Fatalf("written outside: %v %v", matches, m2)
		}
	}
}

// Whatever the archive, TarIn writes nothing outside the directory it
// extracts into, and does not panic.
func FuzzTarIn(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "x/l", Typeflag: tar.TypeSymlink, Linkname: "../.."})
	_ = tw.WriteHeader(&tar.Header{Name: "x/l/e", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = tw.Close()
	f.Add(buf.Bytes(), "d")
	f.Add(buf.Bytes(), "new/")
	f.Fuzz(func(t *testing.T, archive []byte, dst string) {
		if strings.ContainsAny(dst, "\x00") || strings.Contains(dst, "..") || strings.HasPrefix(dst, "/") {
			return
		}
		outside := t.TempDir()
		inside := filepath.Join(outside, "in")
		must(t, os.MkdirAll(filepath.Join(inside, "d"), 0o755))
		_ = TarIn(bytes.NewReader(archive), filepath.Join(inside, dst))
		ents, _ := os.ReadDir(outside)
		if len(ents) != 1 || ents[0].Name() != "in" {
			t.Fatalf("written beside the destination: %v", ents)
		}
	})
}

// TestTarInKeepsAStreamsNames: an archive with several entries at its top
// (as `hsbx cp - :DIR` may stream) lands in an existing directory under
// their own names, as `docker cp - ID:DIR` puts them.
func TestTarInKeepsAStreamsNames(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range []string{"a", "ab/", "ab/x", "b"} {
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(name))}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		}
		must(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, _ = tw.Write([]byte(name))
		}
	}
	must(t, tw.Close())
	dst := t.TempDir()
	must(t, TarIn(&b, dst+"/"))
	if got, want := listing(t, dst), "a=a ab/ ab/x=ab/x b=b"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// An archive streamed in (cp - :DIR) may hold what TarIn does not make:
// fifos, devices and sparse files are passed over and named, after the
// rest is copied; an entry whose parents have no entries of their own
// gets them, as the engines' cp makes them.
func TestTarInNamesWhatItDoesNotMake(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []tar.Header{
		{Name: "in/fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		{Name: "in/tty", Typeflag: tar.TypeChar, Mode: 0o644, Devmajor: 5},
		{Name: "in/disk", Typeflag: tar.TypeBlock, Mode: 0o644, Devmajor: 8},
		{Name: "deep/er/file", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
	}
	for _, h := range entries {
		must(t, tw.WriteHeader(&h))
		if h.Size > 0 {
			_, err := tw.Write([]byte("ok"))
			must(t, err)
		}
	}
	must(t, tw.Close())
	// A GNU sparse entry of 50 GB (a header and no data: all hole), as
	// GNU tar writes one, appended by hand (archive/tar writes none).
	raw := buf.Bytes()[:buf.Len()-1024] // without the end-of-archive blocks
	sparse := sparseHeader(t, "in/big", 50<<30)
	raw = append(append(append([]byte{}, raw...), sparse...), make([]byte, 1024)...)

	dst := t.TempDir()
	err := TarIn(bytes.NewReader(raw), dst+"/")
	var nc *NotCopiedError
	if !errors.As(err, &nc) || len(nc.Entries) != 4 {
		t.Fatalf("TarIn: %v, want the fifo, the two devices and the sparse file named", err)
	}
	for _, want := range []string{"in/fifo (a fifo)", "in/tty (a character device)", "in/disk (a block device)", "in/big (a sparse file)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	if got := listing(t, dst); got != "deep/ deep/er/ deep/er/file=ok" {
		t.Errorf("what was made:\n%s", got)
	}
}

// sparseHeader is a GNU tar header block of an old-style sparse file of
// size bytes that holds no data at all.
func sparseHeader(t *testing.T, name string, size int64) []byte {
	t.Helper()
	var h [512]byte
	copy(h[0:], name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], "00000000000\x00") // no data stored
	copy(h[136:], "00000000000\x00")
	h[156] = 'S'
	copy(h[257:], "ustar  \x00") // GNU magic and version
	// realsize (the file's size) at 483, as 11 octal digits and a NUL.
	copy(h[483:], fmt.Sprintf("%011o\x00", size))
	for i := 148; i < 156; i++ {
		h[i] = ' '
	}
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
	return h[:]
}
