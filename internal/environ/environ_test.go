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

// TestGetterIsLookup: the map Getter reads agrees with Lookup, the last
// entry winning.
func TestGetterIsLookup(t *testing.T) {
	env := []string{"A=1", "B=x=y,z", "A=2", "EMPTY=", "NOEQ", "=v"}
	get := Getter(env)
	for _, key := range []string{"A", "B", "EMPTY", "NOEQ", "C", ""} {
		v1, ok1 := Lookup(env, key)
		v2, ok2 := get(key)
		if v1 != v2 || ok1 != ok2 {
			t.Errorf("%q: Getter %q %v, Lookup %q %v", key, v2, ok2, v1, ok1)
		}
	}
}
