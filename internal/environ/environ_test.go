package environ

import "testing"

func TestLookup(t *testing.T) {
	env := []string{"A=1", "B=x=y,z", "A=2", "EMPTY=", "NOEQ"}
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{{"A", "2", true}, {"B", "x=y,z", true}, {"EMPTY", "", true}, {"NOEQ", "", false}, {"C", "", false}} {
		if v, ok := Lookup(env, tc.key); v != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%q) = %q %v, want %q %v", tc.key, v, ok, tc.want, tc.ok)
		}
	}
}
