package wire

import (
	"strconv"
	"unicode/utf8"
)

// The CLI's side of a command through a holder — one Start written, one
// Hello and one Exit read — in JSON that encoding/json writes and reads
// the same, without it: in a process that lives for one command,
// encoding/json's first use of each type (reflection over its fields)
// cost a tenth of a millisecond of a 3.5 ms exec. The long-lived holder
// and agent keep encoding/json.

// EncodeStart returns st as JSON that encoding/json decodes to what it
// decodes from json.Marshal(st) (invalid UTF-8 becomes U+FFFD, as there).
func EncodeStart(st Start) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"argv":`...)
	b = appendStrings(b, st.Argv)
	if len(st.Env) > 0 {
		b = appendStrings(append(b, `,"env":`...), st.Env)
	}
	b = appendField(b, "dir", st.Dir)
	if st.Stdin {
		b = append(b, `,"stdin":true`...)
	}
	b = appendField(b, "marker", st.Marker)
	if len(st.FDs) > 0 {
		b = appendStrings(append(b, `,"fds":`...), st.FDs)
	}
	b = appendField(b, "session", st.Session)
	b = appendField(b, "script", st.Script)
	b = appendField(b, "op", st.Op)
	b = appendField(b, "user", st.User)
	if st.SessionIdleMS != 0 {
		b = strconv.AppendInt(append(b, `,"session_idle_ms":`...), st.SessionIdleMS, 10)
	}
	return append(b, '}')
}

// appendField appends ,"name":"v" unless v is empty (omitempty).
func appendField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(append(append(b, `,"`...), name...), `":`...), v)
}

// appendStrings appends a JSON array of ss (null for a nil slice, as
// json.Marshal writes it).
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte { return AppendJSONString(b, s) }

// AppendJSONString appends s as a JSON string that encoding/json reads
// as s (invalid UTF-8 as U+FFFD, as json.Marshal writes it), without its
// reflection: for a short-lived process's one record.
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// DecodeHello parses a Hello payload. It accepts what json.Marshal
// writes, and what it accepts encoding/json reads the same; anything it
// is not sure of (a key that only differs in case from a field's, a
// repeated field, a value of the wrong type) is an error.
func DecodeHello(p []byte, h *Hello) error {
	*h = Hello{}
	d := &scan{p: p}
	err := d.object(0, []string{"proto", "build", "down", "dead_after_ms", "agent_since_ms"}, func(key string) error {
		var err error
		switch key {
		case "proto":
			h.Proto, err = d.int()
		case "build":
			h.Build, err = d.str()
		case "down":
			h.Down, err = d.bool()
		case "dead_after_ms":
			h.DeadAfterMS, err = d.int64()
		case "agent_since_ms":
			h.AgentSinceMS, err = d.int64()
		}
		return err
	})
	return d.done(THello, err)
}

// DecodeExit parses an Exit payload, as DecodeHello does a Hello.
func DecodeExit(p []byte, e *Exit) error {
	*e = Exit{}
	d := &scan{p: p}
	err := d.object(0, []string{"code", "killed", "error", "not_delivered", "write_failed", "write_error", "broken_pipe", "session", "failed", "exhausted", "no_shell", "no_user", "stdout_bytes", "stderr_bytes", "stdin_bytes"}, func(key string) error {
		var err error
		switch key {
		case "code":
			e.Code, err = d.int()
		case "killed":
			e.Killed, err = d.int()
		case "error":
			e.Error, err = d.str()
		case "not_delivered":
			e.NotDelivered, err = d.bool()
		case "write_failed":
			e.WriteFailed, err = d.str()
		case "write_error":
			e.WriteError, err = d.str()
		case "broken_pipe":
			e.BrokenPipe, err = d.bool()
		case "session":
			e.Session, err = d.sessionNote()
		case "failed":
			e.Failed, err = d.str()
		case "exhausted":
			e.Exhausted, err = d.bool()
		case "no_shell":
			e.NoShell, err = d.bool()
		case "no_user":
			e.NoUser, err = d.bool()
		case "stdout_bytes":
			e.StdoutBytes, err = d.int64()
		case "stderr_bytes":
			e.StderrBytes, err = d.int64()
		case "stdin_bytes":
			e.StdinBytes, err = d.int64()
		}
		return err
	})
	return d.done(TExit, err)
}

func (d *scan) sessionNote() (*SessionNote, error) {
	if d.null() {
		return nil, nil
	}
	n := &SessionNote{}
	err := d.object(1, []string{"id", "new", "reset", "ended"}, func(key string) error {
		var err error
		switch key {
		case "id":
			n.ID, err = d.str()
		case "new":
			n.New, err = d.bool()
		case "reset":
			n.Reset, err = d.str()
		case "ended":
			n.Ended, err = d.str()
		}
		return err
	})
	return n, err
}
