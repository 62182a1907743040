package cli

import (
	"os"
	"testing"
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
