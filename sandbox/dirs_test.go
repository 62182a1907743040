package sandbox

import (
	"path/filepath"
	"testing"
)

// Where the hsbx command keeps state and cache, per OS and environment.
func TestDefaultDirs(t *testing.T) {
	for _, c := range []struct {
		goos string
		env  []string
		want string
	}{
		{"linux", []string{"XDG_STATE_HOME=/x", "HOME=/h"}, filepath.Join("/x", "hsbx")},
		{"linux", []string{"HOME=/h", "LOCALAPPDATA=/l"}, filepath.Join("/h", ".local/state", "hsbx")},
		{"linux", nil, ""},
		{"windows", []string{"LOCALAPPDATA=/l", "HOME=/h"}, filepath.Join("/l", "hsbx", "state")},
		{"windows", []string{"XDG_STATE_HOME=/x", "LOCALAPPDATA=/l"}, filepath.Join("/x", "hsbx")},
		{"windows", []string{"HOME=/h"}, filepath.Join("/h", ".local/state", "hsbx")},
		{"darwin", []string{"LOCALAPPDATA=/l", "HOME=/h"}, filepath.Join("/h", ".local/state", "hsbx")},
	} {
		if got := xdgDir(c.goos, c.env, "XDG_STATE_HOME", ".local/state", "state"); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.goos, c.env, got, c.want)
		}
	}
}
