// Command archive writes a release archive the same way every time: the
// given files under one top directory, sorted, owned by root, with one
// fixed time (SOURCE_DATE_EPOCH: the commit's) and fixed modes, as a
// .tar.gz (gzip without a name or time) or a .zip. `make release` uses it
// (scripts/release.sh); two runs on one commit give the same bytes.
//
//	go run ./scripts/archive -o hsbx-v1-linux-amd64.tar.gz -dir hsbx-v1-linux-amd64 -epoch 1700000000 FILE...
package main

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "the archive to write: NAME.tar.gz or NAME.zip")
	dir := flag.String("dir", "", "the top directory inside the archive")
	epoch := flag.Int64("epoch", 0, "every entry's time, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	flag.Parse()
	if *out == "" || *dir == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: archive -o OUT.tar.gz|OUT.zip -dir TOP -epoch SECONDS FILE...")
		os.Exit(2)
	}
	if err := write(*out, *dir, time.Unix(*epoch, 0).UTC(), flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "archive: %v\n", err)
		_ = os.Remove(*out)
		os.Exit(1)
	}
}

// entry is one file of the archive.
type entry struct {
	name string // inside the top directory
	path string // on disk
	mode int64
}

func write(out, top string, mtime time.Time, files []string) error {
	var es []entry
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", f)
		}
		mode := int64(0o644)
		if fi.Mode()&0o111 != 0 {
			mode = 0o755
		}
		name := filepath.Base(f) // an absolute path (the binary) goes at the top
		if !filepath.IsAbs(f) {
			name = filepath.ToSlash(filepath.Clean(f)) // docs/cli.md stays docs/cli.md
		}
		es = append(es, entry{name: name, path: f, mode: mode})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	switch {
	case strings.HasSuffix(out, ".tar.gz"):
		err = writeTarGz(f, top, mtime, es)
	case strings.HasSuffix(out, ".zip"):
		err = writeZip(f, top, mtime, es)
	default:
		err = fmt.Errorf("%s: want .tar.gz or .zip", out)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeTarGz(w io.Writer, top string, mtime time.Time, es []entry) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression) // no name, no time: the header's are zero
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	dirHdr := &tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(dirHdr); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, e := range es {
		if d := path.Dir(e.name); d != "." && !dirs[d] {
			dirs[d] = true
			hdr := &tar.Header{Name: path.Join(top, d) + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		b, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: path.Join(top, e.name), Typeflag: tar.TypeReg, Mode: e.mode, Size: int64(len(b)),
			ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, top string, mtime time.Time, es []entry) error {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestCompression)
	})
	for _, e := range es {
		b, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		hdr := &zip.FileHeader{Name: path.Join(top, e.name), Method: zip.Deflate, Modified: mtime}
		hdr.SetMode(os.FileMode(e.mode))
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := fw.Write(b); err != nil {
			return err
		}
	}
	return zw.Close()
}
