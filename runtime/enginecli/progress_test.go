package enginecli

import (
	"bytes"
	"testing"
)

func TestErrorLineFilter(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"podman's progress, then its error", []string{"Trying to pull a:1...\nGetting image source signatures\nCopying blob 0123 done\n", "Error: initializing source docker://a:1: no such host\n"},
			"Trying to pull a:1...\nGetting image source signatures\nCopying blob 0123 done\n"},
		{"byte by byte", []string{"C", "o", "p", "y\n", "E", "r", "r", "o", "r", ":", " ", "x", "\n", "d", "o", "n", "e\n"}, "Copy\ndone\n"},
		{"bars redrawn with \\r pass at once", []string{"Copying blob 10%\r", "Copying blob 50%\r", "Copying blob done\n"}, "Copying blob 10%\rCopying blob 50%\rCopying blob done\n"},
		{"an Error-like word inside a line passes", []string{"writing Error: x\n"}, "writing Error: x\n"},
		{"a line that only starts like the prefix passes", []string{"Err", "ands\n"}, "Errands\n"},
		{"an empty line", []string{"\n\n"}, "\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			f := newErrorLineFilter(&b, "Error: ")
			for _, w := range c.writes {
				if n, err := f.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			if b.String() != c.want {
				t.Errorf("got %q, want %q", b.String(), c.want)
			}
		})
	}
}
