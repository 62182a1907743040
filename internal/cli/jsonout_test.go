package cli

import (
	"encoding/base64"
	"testing"
)

// --json keeps a stream's first --max-output bytes, as text when they are
// UTF-8, else base64. A cut through a multi-byte character drops only that
// character's first bytes; any other byte that is not UTF-8 makes the kept
// bytes base64. (`--max-output 4 -- printf 'a\377bcdefgh'` gave "a" as
// utf-8, hiding \377bc.)
func TestCaptureText(t *testing.T) {
	for _, tc := range []struct {
		in       string
		limit    int
		text     string
		encoding string
	}{
		{"hello", 10, "hello", "utf-8"},
		{"a\xffbcdefgh", 4, base64.StdEncoding.EncodeToString([]byte("a\xffbc")), "base64"},
		{"a\xff", 10, base64.StdEncoding.EncodeToString([]byte("a\xff")), "base64"},
		{"abcé", 4, "abc", "utf-8"},  // é cut after its lead byte
		{"ab€x", 4, "ab", "utf-8"},   // € (3 bytes) cut after 2
		{"abc€", 6, "abc€", "utf-8"}, // whole
		{"ab\xff\xfe\xfd", 4, base64.StdEncoding.EncodeToString([]byte("ab\xff\xfe")), "base64"}, // not a cut character
		{"\xe2\x82", 2, base64.StdEncoding.EncodeToString([]byte("\xe2\x82")), "base64"},         // not cut: the stream ends so
	} {
		c := &capture{limit: tc.limit}
		_, _ = c.Write([]byte(tc.in))
		text, enc := c.text()
		if text != tc.text || enc != tc.encoding {
			t.Errorf("%q (limit %d): %q %s, want %q %s", tc.in, tc.limit, text, enc, tc.text, tc.encoding)
		}
	}
}
