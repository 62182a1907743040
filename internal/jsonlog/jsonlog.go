// Package jsonlog keeps logs of JSON records, one object a line, in files
// only this user can read (created 0600, opened without following a
// link: internal/privdir), rotated at a size: the file becomes FILE.1
// (replacing the one before), so at most twice the size is kept. A Log
// appends for one long-lived writer; Append for many short-lived ones
// (each process its own line, written with one write(2) on an O_APPEND
// file, so lines never interleave); Read reads both generations back.
package jsonlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hsbx/hsbx/internal/privdir"
)

// Log appends records to one file for one writer (rotating it at limit).
type Log struct {
	mu    sync.Mutex
	path  string
	limit int64
	f     *os.File
	size  int64
}

// Open opens (or makes) the log at path, rotated at limit bytes.
func Open(path string, limit int64) (*Log, error) {
	l := &Log{path: path, limit: limit}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, size, err := openAppend(l.path)
	if err != nil {
		return err
	}
	l.f, l.size = f, size
	return nil
}

func openAppend(path string) (*os.File, int64, error) {
	f, err := privdir.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// Write appends v (rotating first when the file is full).
func (l *Log) Write(v any) error {
	b, err := line(v)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("the log is closed")
	}
	if l.size+int64(len(b)) > l.limit {
		_ = l.f.Close()
		l.f = nil
		if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotating %s: %w", l.path, err)
		}
		if err := l.open(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return err
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func line(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Append appends line (one JSON object and its newline) to the log at
// path, rotated at limit bytes, for a writer among many processes: the
// file that grew past limit is rotated by the one process holding
// path.lock (the others append on, to whichever file the name holds:
// nothing is lost).
func Append(path string, limit int64, line []byte) error {
	f, size, err := openAppend(path)
	if err != nil {
		return err
	}
	_, err = f.Write(line)
	f.Close()
	if err == nil && size+int64(len(line)) > limit {
		if release, ok, lerr := privdir.TryLock(path + ".lock"); lerr == nil && ok {
			if fi, serr := os.Lstat(path); serr == nil && fi.Size() > limit {
				err = os.Rename(path, path+".1")
			}
			release()
		}
	}
	return err
}

// Read reads the records at path (the rotated file first) that keep
// accepts, skipping lines that are not JSON objects of T; a missing log
// is no records.
func Read[T any](path string, keep func(*T) bool) ([]T, error) {
	var out []T
	for _, p := range []string{path + ".1", path} {
		f, err := privdir.OpenFile(p, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("reading %s: %w", p, err)
		}
		recs, err := read(f, keep)
		f.Close()
		out = append(out, recs...)
		if err != nil {
			return out, fmt.Errorf("reading %s: %w", p, err)
		}
	}
	return out, nil
}

func read[T any](r io.Reader, keep func(*T) bool) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec T
		if json.Unmarshal(sc.Bytes(), &rec) == nil && keep(&rec) {
			out = append(out, rec)
		}
	}
	return out, sc.Err()
}
