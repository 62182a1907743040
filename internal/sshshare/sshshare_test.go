//go:build unix

package sshshare

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/environ"
)

// TestMain: the test binary is the stand-in when run as one.
func TestMain(m *testing.M) {
	if Invoked(os.Args[0], os.Getenv) {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeSSH is a directory with an ssh that prints its arguments and PATH.
func fakeSSH(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\"\necho \"PATH=$PATH\"\necho \"VARS=$HSBX_SSH_REAL$HSBX_SSH_CONTROL_DIR\"\n"
	if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The stand-in runs the real ssh with connection sharing first and the
// client's arguments after, with its own directory and variables gone
// from the environment; an env that has the stand-in already gets it once.
func TestStandInRunsTheRealSSH(t *testing.T) {
	sshDir := fakeSSH(t)
	state := filepath.Join(t.TempDir(), "state")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + sshDir + ":/usr/bin:/bin", "HOME=/nowhere"}
	got, err := Env(env, self, state, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(state, "ssh", "bin")
	ctl := ControlDir(state) // the test's temp dir is long: under /tmp
	t.Cleanup(func() { os.RemoveAll(ctl) })
	if path, _ := environ.Lookup(got, "PATH"); path != bin+":"+sshDir+":/usr/bin:/bin" {
		t.Fatalf("PATH = %q", path)
	}
	if r, _ := environ.Lookup(got, EnvReal); r != filepath.Join(sshDir, "ssh") {
		t.Fatalf("%s = %q", EnvReal, r)
	}
	for _, d := range []string{bin, ctl} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want a directory of mode 0700", d, fi, err)
		}
	}
	if to, err := os.Readlink(filepath.Join(bin, "ssh")); err != nil || to != self {
		t.Fatalf("the stand-in links to %q (%v), want %q", to, err, self)
	}
	again, err := Env(got, self, state, 90*time.Second)
	if err != nil || !slices.Equal(sortedCopy(again), sortedCopy(got)) {
		t.Fatalf("Env of its own env: %q %v, want %q", again, err, got)
	}

	cmd := exec.Command(filepath.Join(bin, "ssh"), "-o", "ConnectTimeout=30", "-T", "--", "me@box", "docker", "system", "dial-stdio")
	cmd.Env = got
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the stand-in: %v\n%s", err, out)
	}
	want := strings.Join([]string{"-o", "ControlMaster=auto", "-o", "ControlPath=" + ctl + "/%C", "-o", "ControlPersist=90",
		"-o", "ConnectTimeout=30", "-T", "--", "me@box", "docker", "system", "dial-stdio",
		"PATH=" + sshDir + ":/usr/bin:/bin", "VARS="}, "\n") + "\n"
	if string(out) != want {
		t.Fatalf("the real ssh got:\n%s\nwant:\n%s", out, want)
	}
}

// Where sharing cannot be set up, env comes back as it was, with why.
func TestStandInRefusals(t *testing.T) {
	self, _ := os.Executable()
	env := []string{"PATH=" + t.TempDir()}
	if got, err := Env(env, self, t.TempDir(), time.Minute); err == nil || !slices.Equal(got, env) {
		t.Fatalf("no ssh on PATH: %q %v", got, err)
	}
	env = []string{"PATH=" + fakeSSH(t)}
	if got, err := Env(env, "hsbx", t.TempDir(), time.Minute); err == nil || !slices.Equal(got, env) {
		t.Fatalf("a relative stand-in: %q %v", got, err)
	}
	if Invoked("/x/ssh", func(string) string { return "" }) || Invoked("/x/hsbx", func(string) string { return "x" }) {
		t.Fatal("Invoked without its variables, or under another name")
	}
}

// A state dir too long for a socket's path keeps its sockets in a
// directory of the user's own under /tmp instead.
func TestControlDirFits(t *testing.T) {
	long := "/Users/" + strings.Repeat("a", 40) + "/.local/state/hsbx"
	ctl := ControlDir(long)
	if len(ctl) > maxControlDir || !strings.HasPrefix(ctl, "/tmp/hsbx-ssh-") || ctl == ControlDir(long+"2") {
		t.Fatalf("control dir for a long state dir: %q", ctl)
	}
	if ctl := ControlDir("/home/me/.local/state/hsbx"); ctl != "/home/me/.local/state/hsbx/ssh/c" {
		t.Fatalf("control dir: %q", ctl)
	}
}

func sortedCopy(s []string) []string { c := slices.Clone(s); slices.Sort(c); return c }

// A state dir another local user owns is not used for the stand-in or its
// control sockets (privdir): env comes back unchanged, with why, and
// nothing is made there.
func TestStandInRefusesAForeignStateDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to give a directory to another user")
	}
	self, _ := os.Executable()
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, 65534, 65534); err != nil { // nobody's
		t.Fatal(err)
	}
	env := []string{"PATH=" + fakeSSH(t)}
	got, err := Env(env, self, state, time.Minute)
	if err == nil || !slices.Equal(got, env) {
		t.Fatalf("a state dir of another user's: %q %v, want env unchanged and an error", got, err)
	}
	t.Log(err)
	if _, err := os.Lstat(filepath.Join(state, "ssh")); !os.IsNotExist(err) {
		t.Fatalf("something was made in another user's directory: %v", err)
	}
}
