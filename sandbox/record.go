package sandbox

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/record"
)

// The record of what ran (internal/record): each Exec, session run and
// file operation appends one line to StateDir/ran.jsonl when it ends,
// unless Config.NoRecord. A record that cannot be written is said once a
// Manager (Config.Warn) and never fails the command.

// execStats is what a command's route saw of it for its record: the way
// it went and the bytes each way (-1: not seen by hsbx).
type execStats struct {
	via          string
	in, out, err int64
}

// plain takes the plain path's counts: the output through watch's
// writers (a terminal's is the client's own: not seen), the input only
// when there was none.
func (st *execStats) plain(c Command, stdout, stderr io.Writer) {
	st.via = "engine"
	if w, ok := stdout.(*watchWriter); ok {
		st.out = w.n.Load()
	} else if c.Stdout == nil {
		st.out = 0
	}
	if w, ok := stderr.(*watchWriter); ok {
		st.err = w.n.Load()
	} else if c.Stderr == nil {
		st.err = 0
	}
	if c.Stdin == nil && !c.Interactive {
		st.in = 0
	}
}

// RecordFile is the record of what ran under stateDir.
func RecordFile(stateDir string) string { return filepath.Join(stateDir, record.FileName) }

// recordExec appends the record of c, an Exec that began at began.
func (s *Sandbox) recordExec(c Command, began time.Time, code int, err error) {
	r := s.newRecord(began, code, err)
	r.Kind, r.User = "exec", c.User
	if st := c.stats; st != nil {
		r.Via, r.BytesIn, r.BytesOut, r.BytesErr = st.via, st.in, st.out, st.err
	}
	if q := c.session; q != nil {
		r.Kind, r.Session = "run", q.name
		line, _, _ := strings.Cut(q.text, "\n")
		r.Script = record.ClipString(line, 4<<10)
		if q.op != "" {
			return // a session's list or close: hsbx's own, not a command
		}
	} else {
		r.Argv = record.Clip(c.Argv)
	}
	r.Env = slices.Sorted(maps.Keys(c.Env))
	var ie *InterruptedError
	if errors.As(err, &ie) {
		r.TimedOut = errors.Is(ie.Cause, ErrCommandTimeout)
		r.Killed = !r.TimedOut
	}
	s.appendRecord(r)
}

func (s *Sandbox) newRecord(began time.Time, code int, err error) record.Record {
	host, _ := os.Hostname()
	r := record.Record{Time: began, Duration: time.Since(began).Milliseconds(), Host: host, UID: os.Getuid(), PID: os.Getpid(),
		Profile: s.key.Profile, Task: s.key.Task, Sandbox: s.name, ExitCode: code}
	if err != nil {
		r.ExitCode, r.Error = -1, record.ClipString(err.Error(), 1<<10)
	}
	return r
}

func (s *Sandbox) appendRecord(r record.Record) {
	if err := record.Append(RecordFile(s.m.c.StateDir), r); err != nil {
		s.m.recordWarn.Do(func() {
			s.m.c.Warn("the record of what ran could not be written (" + err.Error() + "): this process's commands are not in it")
		})
	}
}
