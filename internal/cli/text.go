package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// safe makes a value from the outside (a task name, a container name, an
// engine's message) harmless in human-readable output: control characters
// (C0, DEL, C1: escape sequences, newlines that would split a row),
// bidirectional overrides and invalid UTF-8 are written as Go-style
// escapes, so nothing a sandbox's labels hold can colour the terminal, set
// its title or forge a row. JSON output escapes on its own.
func safe(s string) string {
	clean := true
	for i, r := range s {
		if unsafeRune(r) || (r == utf8.RuneError && !validAt(s, i)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// safeText is safe for a message that may hold several lines (an engine's
// multi-line error): each line made safe on its own, blank ones dropped,
// continuation lines indented under the first — deeper than hsbx's own
// "  hint:" lines, so an engine's text cannot pass for one.
func safeText(s string) string {
	var out []string
	for line := range strings.SplitSeq(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, safe(strings.TrimRight(line, " \t")))
		}
	}
	return strings.Join(out, "\n    ")
}

func unsafeRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f
}

// validAt reports whether the RuneError at byte i of s is a literal U+FFFD
// rather than an invalid byte.
func validAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 3
}
