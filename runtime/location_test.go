package runtime

import "testing"

// A local engine reaches every host path; a remote one those under a
// shared directory only (a directory, not a name prefix).
func TestLocationReaches(t *testing.T) {
	mac := Location{Remote: true, Shared: []string{"/Users/me", "/private/folders/"}}
	for _, tc := range []struct {
		loc  Location
		path string
		want bool
	}{
		{Location{}, "/anything", true},
		{Location{Remote: true}, "/anything", false},
		{Location{Remote: true, Shared: []string{"/"}}, "/anything", true},
		{mac, "/Users/me", true},
		{mac, "/Users/me/src/x", true},
		{mac, "/Users/meg", false},
		{mac, "/Users", false},
		{mac, "/private/folders/ab/c", true},
		{mac, "/tmp/x", false},
	} {
		if got := tc.loc.Reaches(tc.path); got != tc.want {
			t.Errorf("%+v Reaches(%q) = %v, want %v", tc.loc, tc.path, got, tc.want)
		}
	}
	if s := mac.String(); s != "remote; shared with this machine: /Users/me, /private/folders/" {
		t.Errorf("String() = %q", s)
	}
}
