package enginecli_test

import (
	"testing"

	"github.com/hsbx/hsbx/runtime/enginecli"
)

// `top ID pid ppid` read into the number of processes an exec started:
// those whose parent is outside the sandbox (0), PID 1 apart. The first
// row is podman 4.3's over ssh, captured with a detached `exec sleep`
// running beside init's child.
func TestParseTopExecs(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      int
		bad       bool
	}{
		{"one exec running (captured)", "PID         PPID\n1           0\n6           1\n7           0\n", 1, false},
		{"none", "PID PPID\n1 0\n6 1\n", 0, false},
		{"two, and their children", "PID PPID\n1 0\n9 0\n10 9\n12 0\n", 2, false},
		{"no header", "1 0\n", 0, true},
		{"a row of three", "PID PPID\n1 0 x\n", 0, true},
		{"not numbers", "PID PPID\na b\n", 0, true},
		{"empty", "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := enginecli.ParseTopExecs([]byte(tc.out))
			if tc.bad != (err != nil) || n != tc.want {
				t.Fatalf("ParseTopExecs(%q) = %d, %v", tc.out, n, err)
			}
		})
	}
}
