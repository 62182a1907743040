package wire

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
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

// scan reads JSON from p.
type scan struct {
	p []byte
	i int
}

var errSyntax = errors.New("not the JSON expected")

// maxDepth bounds how deeply an unknown value may nest.
const maxDepth = 64

func (d *scan) done(t Type, err error) error {
	if err == nil {
		d.ws()
		if d.i != len(d.p) {
			err = errSyntax
		}
	}
	if err != nil {
		return fmt.Errorf("bad %s frame: %w", t, err)
	}
	return nil
}

func (d *scan) ws() {
	for d.i < len(d.p) {
		switch d.p[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space (0 at the end).
func (d *scan) peek() byte {
	d.ws()
	if d.i < len(d.p) {
		return d.p[d.i]
	}
	return 0
}

func (d *scan) lit(s string) bool {
	if d.peek() == s[0] && bytes.HasPrefix(d.p[d.i:], []byte(s)) {
		d.i += len(s)
		return true
	}
	return false
}

// null consumes a null; a null leaves a field as it is, as encoding/json
// does.
func (d *scan) null() bool { return d.lit("null") }

// object reads an object, calling field for each of the keys known, with
// the scanner at its value; the values of other keys are skipped. A nil
// field skips the whole object.
func (d *scan) object(depth int, known []string, field func(key string) error) error {
	if d.peek() != '{' {
		return errSyntax
	}
	d.i++
	seen := make([]bool, len(known))
	for first := true; ; first = false {
		if d.peek() == '}' && first {
			d.i++
			return nil
		}
		key, err := d.str()
		if err != nil {
			return err
		}
		if d.peek() != ':' {
			return errSyntax
		}
		d.i++
		k := knownKey(known, key)
		switch {
		case field == nil: // a value skipped: any keys
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		case k >= 0 && seen[k]:
			return fmt.Errorf("%q twice", key)
		case k >= 0:
			seen[k] = true
			if !d.null() {
				if err := field(key); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
		case !plainKey(known, key):
			return fmt.Errorf("key %q is too like a field's", key)
		default:
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func knownKey(known []string, key string) int {
	for i, k := range known {
		if k == key {
			return i
		}
	}
	return -1
}

// plainKey says an unknown key is surely not one encoding/json would take
// for a known field (it matches them ignoring case, Unicode's too).
func plainKey(known []string, key string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] >= utf8.RuneSelf {
			return false
		}
	}
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return false
		}
	}
	return true
}

// skip reads past one value of any kind.
func (d *scan) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	switch d.peek() {
	case '"':
		_, err := d.str()
		return err
	case '{':
		return d.object(depth, nil, nil)
	case '[':
		d.i++
		if d.peek() == ']' {
			d.i++
			return nil
		}
		for {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return nil
			default:
				return errSyntax
			}
		}
	case 't':
		return d.want(d.lit("true"))
	case 'f':
		return d.want(d.lit("false"))
	case 'n':
		return d.want(d.null())
	default:
		_, err := d.number()
		return err
	}
}

func (d *scan) want(ok bool) error {
	if !ok {
		return errSyntax
	}
	return nil
}

func (d *scan) bool() (bool, error) {
	switch {
	case d.lit("true"):
		return true, nil
	case d.lit("false"):
		return false, nil
	}
	return false, errSyntax
}

// number reads a JSON number; integer says it has no fraction or
// exponent.
func (d *scan) number() (s string, err error) {
	d.ws()
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.p) && d.p[d.i] >= '0' && d.p[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.p) && d.p[d.i] == '-' {
		d.i++
	}
	intStart := d.i
	if n := digits(); n == 0 || (n > 1 && d.p[intStart] == '0') {
		return "", errSyntax
	}
	if d.i < len(d.p) && d.p[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return "", errSyntax
		}
	}
	if d.i < len(d.p) && (d.p[d.i] == 'e' || d.p[d.i] == 'E') {
		d.i++
		if d.i < len(d.p) && (d.p[d.i] == '+' || d.p[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return "", errSyntax
		}
	}
	return string(d.p[start:d.i]), nil
}

func (d *scan) integer(bits int) (int64, error) {
	s, err := d.number()
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("number %s is not an integer that fits", s)
	}
	return n, nil
}

func (d *scan) int() (int, error) {
	n, err := d.integer(strconv.IntSize)
	return int(n), err
}

func (d *scan) int64() (int64, error) { return d.integer(64) }

// str reads a string, with encoding/json's repairs: invalid UTF-8 and
// unpaired surrogates become U+FFFD.
func (d *scan) str() (string, error) {
	if d.peek() != '"' {
		return "", errSyntax
	}
	d.i++
	var b []byte
	for {
		if d.i >= len(d.p) {
			return "", errSyntax
		}
		c := d.p[d.i]
		switch {
		case c == '"':
			d.i++
			return string(b), nil
		case c < 0x20:
			return "", errSyntax
		case c == '\\':
			if d.i+1 >= len(d.p) {
				return "", errSyntax
			}
			switch e := d.p[d.i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := u4(d.p[d.i:])
				if r < 0 {
					return "", errSyntax
				}
				d.i += 6
				if utf16.IsSurrogate(r) {
					if r2 := utf16.DecodeRune(r, u4(d.p[d.i:])); r2 != utf8.RuneError {
						d.i += 6
						b = utf8.AppendRune(b, r2)
						continue
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return "", errSyntax
			}
			d.i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.p[d.i:])
			b = utf8.AppendRune(b, r) // U+FFFD for a bad byte
			d.i += size
		}
	}
}

// u4 decodes \uXXXX at the start of p; -1 if it is not there.
func u4(p []byte) rune {
	if len(p) < 6 || p[0] != '\\' || p[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range p[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
