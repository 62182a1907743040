package enginecli

import (
	"strings"
)

// Rule maps a message fragment (matched case-insensitively) to a sentinel.
type Rule struct {
	Fragment string
	Kind     error
}

// Match returns the Kind of the first rule whose fragment occurs in msg.
func Match(rules []Rule, msg string) error {
	low := strings.ToLower(msg)
	for _, r := range rules {
		if strings.Contains(low, r.Fragment) {
			return r.Kind
		}
	}
	return nil
}

// FirstLine returns the first non-blank line of s, trimmed.
func FirstLine(s string) string {
	for line := range strings.Lines(s) {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}
