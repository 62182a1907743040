package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain task-1.0":          "plain task-1.0",
		"two\nlines":              `two\x0alines`,
		"esc\x1b[31mRED":          `esc\x1b[31mRED`,
		"title\x1b]0;pwned\x07":   `title\x1b]0;pwned\x07`,
		"c1\u009bcsi":             `c1\x9bcsi`,
		"del\x7f":                 `del\x7f`,
		"bidi\u202eevil":          `bidi\u202eevil`,
		"bad\xffutf8":             `bad\xffutf8`,
		"back\\slash\n":           `back\\slash\x0a`,
		"unicode é 😀 \uFFFD fine": "unicode é 😀 \uFFFD fine",
		"tab\there":               `tab\x09here`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzSafe(f *testing.F) {
	f.Add("two\nlines\x1b[0m")
	f.Fuzz(func(t *testing.T, s string) {
		out := safe(s)
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("safe(%q) = %q keeps %U", s, out, r)
			}
		}
		// safeText: only its own line breaks, each followed by the indent.
		text := safeText(s)
		for i, line := range strings.Split(text, "\n") {
			if i > 0 && !strings.HasPrefix(line, "    ") {
				t.Fatalf("safeText(%q) = %q: line %d is not indented", s, text, i)
			}
			for _, r := range line {
				if unsafeRune(r) {
					t.Fatalf("safeText(%q) = %q keeps %U", s, text, r)
				}
			}
		}
	})
}

// /dev/null is a character device but not a terminal: `hsbx shell
// </dev/null` must not ask the engine for a TTY.
func TestDevNullIsNotATerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("isTerminal(/dev/null) = true")
	}
}

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"one line":                       "one line",
		"first\nsecond":                  "first\n    second",
		"first\r\nsecond\n\n  third  \n": "first\n    second\n      third",
		"esc\x1b[31m\nhint: fake\x07":    `esc\x1b[31m` + "\n    " + `hint: fake\x07`,
		"\n\nlead":                       "lead",
		"tab\there\nx\ry":                `tab\x09here` + "\n    " + `x\x0dy`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// The third review's keeper: a process in the sandbox answering `info`
// on a session's socket with a shell name holding a title sequence, a
// screen clear and a forged row. session ls escaped the CWD column only;
// now every column is the sandbox's word, escaped.
func TestSessionTableEscapesEveryColumn(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	hostile := "\x1b]0;pwned\x07\x1b[2J\nforged  /bin/sh  false  0s  /"
	var b strings.Builder
	err := writeSessions(&b, []sandbox.SessionInfo{{Name: "a\x1b[31mred", Shell: hostile, Cwd: "/tmp\r\nrow", LastUsed: now.UnixMilli()}}, now)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r") || strings.Count(out, "\n") != 2 {
		t.Errorf("session ls wrote the sandbox's bytes raw (%d lines):\n%q", strings.Count(out, "\n"), out)
	}
}
