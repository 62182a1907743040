package detect

import "testing"

// A cache key's path is everything before its last two fields: a path
// may hold '|' itself, and another binary's verdict must never be taken
// for this one's earlier one.
func TestKeyPath(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"/usr/bin/docker|42|1795524519796989731", "/usr/bin/docker"},
		{"/opt/a|b/docker|42|17", "/opt/a|b/docker"},
		{"/usr/bin/docker|42", ""},
		{"nothing", ""},
		{"||", ""},
	} {
		if got := keyPath(tc.key); got != tc.want {
			t.Errorf("keyPath(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}
