package detect

import "testing"

func TestNear(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"dokcer", "docker", true}, {"dockr", "docker", true}, {"dockerr", "docker", true}, {"docekr", "docker", true},
		{"podmna", "podman", true}, {"podma", "podman", true}, {"docker", "docker", false}, {"dkr", "docker", false},
		{"podman", "docker", false}, {"", "docker", false}, {"xocker", "docker", true}, {"ocker", "docker", true},
	} {
		if got := near(tc.a, tc.b) && tc.a != tc.b; got != tc.want {
			t.Errorf("near(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
