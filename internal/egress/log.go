package egress

import (
	"fmt"

	"github.com/hsbx/hsbx/internal/jsonlog"
)

// LogMax is the size at which the network log is rotated: the current
// file becomes LOG.1 (replacing the one before), so at most twice this
// is kept.
const LogMax = 4 << 20

// Log appends records, one JSON object a line, to a file only this user
// can read (internal/jsonlog).
type Log struct{ l *jsonlog.Log }

// OpenLog opens (or makes) the network log at path.
func OpenLog(path string) (*Log, error) {
	l, err := jsonlog.Open(path, LogMax)
	if err != nil {
		return nil, fmt.Errorf("opening the network log: %w", err)
	}
	return &Log{l: l}, nil
}

// Write appends rec (rotating first when the file is full).
func (l *Log) Write(rec Record) error { return l.l.Write(rec) }

// Close closes the file.
func (l *Log) Close() error { return l.l.Close() }

// ReadLog reads the records at path (the rotated file first), skipping
// lines that are not records; a missing log is no records.
func ReadLog(path string) ([]Record, error) {
	recs, err := jsonlog.Read(path, func(r *Record) bool { return r.Method != "" })
	if err != nil {
		return recs, fmt.Errorf("reading the network log: %w", err)
	}
	return recs, nil
}
