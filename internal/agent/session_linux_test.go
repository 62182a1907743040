package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The sessions directory is used only when it is this user's alone: one
// squatted by another user, left open to others, or planted as a link is
// refused (the keeper's socket and the scripts' pipes never go there).
func TestSessionsBaseRefusesOthersDirectories(t *testing.T) {
	name := sessionsDirPrefix + strconv.Itoa(os.Geteuid())
	for _, tc := range []struct {
		what, want string
		plant      func(t *testing.T, path string)
	}{
		{"a link", "not a directory", func(t *testing.T, path string) {
			if err := os.Symlink(t.TempDir(), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"open to others", "open to other users", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"another user's", "belongs to another user", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a directory to another user")
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			dir := t.TempDir()
			tc.plant(t, filepath.Join(dir, name))
			t.Setenv(SessionsDirVar, dir)
			base, err := sessionsBase()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sessionsBase with %s in place: %q, %v", tc.what, base, err)
			}
		})
	}
	// Its own, private: taken.
	dir := t.TempDir()
	t.Setenv(SessionsDirVar, dir)
	if base, err := sessionsBase(); err != nil || base != filepath.Join(dir, name) {
		t.Fatalf("a fresh dir: %q, %v", base, err)
	}
}
