package egress

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

// LogMax is the size at which the network log is rotated: the current
// file becomes LOG.1 (replacing the one before), so at most twice this
// is kept.
const LogMax = 4 << 20

// Log appends records, one JSON object a line, to a file only this user
// can read (created 0600, opened without following a link).
type Log struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64
}

// OpenLog opens (or makes) the network log at path.
func OpenLog(path string) (*Log, error) {
	l := &Log{path: path}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, err := privdir.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the network log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("opening the network log: %w", err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write appends rec (rotating first when the file is full).
func (l *Log) Write(rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("the network log is closed")
	}
	if l.size+int64(len(b)) > LogMax {
		_ = l.f.Close()
		l.f = nil
		if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotating the network log: %w", err)
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

// ReadLog reads the records at path (the rotated file first), skipping
// lines that are not records; a missing log is no records.
func ReadLog(path string) ([]Record, error) {
	var out []Record
	for _, p := range []string{path + ".1", path} {
		f, err := privdir.OpenFile(p, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("reading the network log: %w", err)
		}
		recs, err := readRecords(f)
		f.Close()
		out = append(out, recs...)
		if err != nil {
			return out, fmt.Errorf("reading the network log: %w", err)
		}
	}
	return out, nil
}

func readRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Method != "" {
			out = append(out, rec)
		}
	}
	return out, sc.Err()
}
