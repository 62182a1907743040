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
