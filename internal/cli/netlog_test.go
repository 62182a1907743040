package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
)

// netlog's table shows what the sandbox asked for escaped: a host name
// with a terminal's escape sequence or a newline cannot colour the
// terminal or forge a row.
func TestNetlogTableEscapes(t *testing.T) {
	var b bytes.Buffer
	writeNetlog(&b, []egress.Record{
		{Time: time.Unix(0, 0), Method: "CONNECT", Host: "evil\x1b[31m.com\nTIME allowed", Port: 443, Reason: "no entry of the allow-list names evil\x1b[31m.com"},
		{Time: time.Unix(0, 0), Method: "GET", Host: "192.0.2.7", Port: 80, Allowed: true, Rule: "192.0.2.0/24", BytesOut: 10, BytesIn: 20},
		{Time: time.Unix(0, 0), Method: "CONNECT", Host: "a.example.com", Port: 443, Allowed: true, Rule: "*.example.com", Error: "connection refused"},
		{Time: time.Unix(0, 0), Method: "POST", Host: "api.example.com", Port: 443, Allowed: true, Rule: "api.example.com", Secrets: []string{"API_KEY"}},
	}, true)
	out := b.String()
	if strings.ContainsAny(out, "\x1b") || strings.Count(out, "\n") != 5 {
		t.Fatalf("not escaped:\n%s", out)
	}
	for _, want := range []string{"refused", "allowed", "192.0.2.7:80", "192.0.2.0/24", "failed", "connection refused", "brokered", "(secrets: API_KEY)"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing:\n%s", want, out)
		}
	}
}
