// Package record is the record of what ran: one line for every command
// hsbx runs in a sandbox (exec, run, a file operation), appended by the
// process that ran it to a file under the state dir that only this user
// can read (internal/jsonlog: 0600, no link followed, rotated at MaxSize).
// It holds who, what, where, how it ended and the bytes each way — the
// names of -e variables, never their values. Nothing in a sandbox writes
// to it: it is on the host, and what a record says comes from hsbx.
package record

import (
	"strconv"
	"time"

	"github.com/hsbx/hsbx/internal/jsonlog"
	"github.com/hsbx/hsbx/internal/wire"
)

// FileName is the record's file in the state dir (FileName.1 the
// generation before).
const FileName = "ran.jsonl"

// MaxSize is where the record is rotated: at most twice this is kept.
const MaxSize = 8 << 20

// maxArgv bounds the argv (or script line) a record keeps, in bytes.
const maxArgv = 4 << 10

// Record is one command. Bytes are -1 when hsbx did not see them (the
// engine client wrote the output itself).
type Record struct {
	Time     time.Time `json:"time"`
	Duration int64     `json:"duration_ms"`
	Host     string    `json:"host"`
	UID      int       `json:"uid"`
	PID      int       `json:"pid"`
	Profile  string    `json:"profile"`
	Task     string    `json:"task"`
	Sandbox  string    `json:"sandbox"`
	// Kind: "exec", "run", or "file read", "file write", "file list",
	// "file remove", "file watch".
	Kind    string   `json:"kind"`
	Argv    []string `json:"argv,omitempty"`    // exec's, clipped
	Script  string   `json:"script,omitempty"`  // run's first line, clipped
	Session string   `json:"session,omitempty"` // run's
	Path    string   `json:"path,omitempty"`    // a file operation's
	Env     []string `json:"env,omitempty"`     // the names given, sorted
	User    string   `json:"user,omitempty"`    // the sandbox user asked for
	// Via: "channel" (hsbx's agent) or "engine" (the engine's exec).
	Via      string `json:"via"`
	ExitCode int    `json:"exit_code"` // -1: none (Error says why)
	TimedOut bool   `json:"timed_out,omitempty"`
	Killed   bool   `json:"killed,omitempty"` // interrupted: a signal, a broken pipe
	Error    string `json:"error,omitempty"`
	BytesIn  int64  `json:"bytes_in"`
	BytesOut int64  `json:"bytes_out"`
	BytesErr int64  `json:"bytes_err"`
}

// Append adds r to the record at path.
func Append(path string, r Record) error {
	return jsonlog.Append(path, MaxSize, Encode(r))
}

// Read reads the record at path (both generations, oldest first).
func Read(path string) ([]Record, error) {
	return jsonlog.Read(path, func(r *Record) bool { return r.Kind != "" })
}

// Clip keeps the first of ss up to maxArgv bytes in all, the last one
// cut and marked with "…" when it does not fit.
func Clip(ss []string) []string {
	var out []string
	n := 0
	for _, s := range ss {
		if n+len(s) > maxArgv {
			out = append(out, ClipString(s, maxArgv-n))
			break
		}
		out = append(out, s)
		n += len(s)
	}
	return out
}

// ClipString cuts s to at most n bytes (on a rune's start), marking a
// cut with "…".
func ClipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:max(n, 0)] + "…"
}

// Encode writes r as one JSON line, as encoding/json would read it, with
// none of its reflection (a warm exec is 3–4 ms; json.Marshal's first
// use of a type costs a tenth of one).
func Encode(r Record) []byte {
	b := make([]byte, 0, 256)
	str := func(name, v string, always bool) {
		if v == "" && !always {
			return
		}
		b = append(append(append(b, ',', '"'), name...), '"', ':')
		b = wire.AppendJSONString(b, v)
	}
	num := func(name string, v int64) {
		b = append(append(append(b, ',', '"'), name...), '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	list := func(name string, vs []string) {
		if len(vs) == 0 {
			return
		}
		b = append(append(append(b, ',', '"'), name...), `":[`...)
		for i, v := range vs {
			if i > 0 {
				b = append(b, ',')
			}
			b = wire.AppendJSONString(b, v)
		}
		b = append(b, ']')
	}
	flag := func(name string, v bool) {
		if v {
			b = append(append(append(b, ',', '"'), name...), `":true`...)
		}
	}
	b = append(b, `{"time":`...)
	b = wire.AppendJSONString(b, r.Time.UTC().Format(time.RFC3339Nano))
	num("duration_ms", r.Duration)
	str("host", r.Host, true)
	num("uid", int64(r.UID))
	num("pid", int64(r.PID))
	str("profile", r.Profile, true)
	str("task", r.Task, true)
	str("sandbox", r.Sandbox, true)
	str("kind", r.Kind, true)
	list("argv", r.Argv)
	str("script", r.Script, false)
	str("session", r.Session, false)
	str("path", r.Path, false)
	list("env", r.Env)
	str("user", r.User, false)
	str("via", r.Via, true)
	num("exit_code", int64(r.ExitCode))
	flag("timed_out", r.TimedOut)
	flag("killed", r.Killed)
	str("error", r.Error, false)
	num("bytes_in", r.BytesIn)
	num("bytes_out", r.BytesOut)
	num("bytes_err", r.BytesErr)
	return append(b, '}', '\n')
}
