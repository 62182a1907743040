// Package sshshare makes the docker client's calls to an engine it
// reaches over ssh (DOCKER_HOST=ssh://..., a context with an ssh host)
// share one ssh connection. Each docker call runs `ssh HOST docker system
// dial-stdio` afresh: a key exchange and a login, about 230 ms on a
// loopback sshd and more across a network, so a cold `up` of five calls
// paid it five times. hsbx puts a stand-in first on the client's PATH — its
// own binary under the name ssh — which runs the real ssh with OpenSSH's
// connection sharing (ControlMaster=auto, a control socket in the state
// dir, ControlPersist): the first call logs in, and the calls after it,
// from this process and every other of the user's, open a session on the
// same connection in a few milliseconds.
//
// podman's remote client speaks ssh itself (Go's, not the ssh binary) and
// is not helped; kubectl does not use ssh.
package sshshare

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/proc"
)

const (
	// Name is the stand-in's name: docker runs "ssh" from its PATH.
	Name = "ssh"
	// EnvReal names the real ssh for the stand-in.
	EnvReal = "HSBX_SSH_REAL"
	// EnvControl names the control sockets' directory.
	EnvControl = "HSBX_SSH_CONTROL_DIR"
	// EnvPersist is how long the shared connection stays after its last
	// session, in seconds (ssh's ControlPersist).
	EnvPersist = "HSBX_SSH_PERSIST"
)

// maxControlDir bounds the control directory's path: a unix socket's path
// has room for about 104 bytes (macOS; 108 on Linux), and ssh adds "/",
// %C's 40 hex digits and, while it makes the socket, a 17-byte suffix.
const maxControlDir = 104 - 1 - 40 - 17 - 1

// Applies reports whether a docker client reaching its engine at addr
// (runtime.Location's Address) runs ssh for each call: an ssh:// host.
func Applies(addr string) bool { return strings.HasPrefix(addr, "ssh://") }

// Invoked reports whether the program was started as the stand-in: under
// the name ssh, with the variables Env sets.
func Invoked(argv0 string, getenv func(string) string) bool {
	return filepath.Base(argv0) == Name && getenv(EnvReal) != "" && getenv(EnvControl) != ""
}

// Env is env for an engine client whose docker calls should share an ssh
// connection: the stand-in (exe, a program that calls Main when Invoked)
// first on PATH, and the real ssh, the control directory under stateDir
// and persist in the stand-in's variables. When sharing cannot be set up,
// env comes back as it was with the reason (hsbx logs it and goes on
// without).
func Env(env []string, exe, stateDir string, persist time.Duration) ([]string, error) {
	bin := filepath.Join(stateDir, "ssh", "bin")
	path, _ := environ.Lookup(env, "PATH")
	path = withoutDir(path, bin) // an env that has the stand-in already
	realSSH, err := proc.LookPathIn(Name, path)
	if err != nil {
		return env, fmt.Errorf("no ssh on PATH for the stand-in to run: %w", err)
	}
	if exe == "" || !filepath.IsAbs(exe) {
		return env, fmt.Errorf("the stand-in %q is not an absolute path", exe)
	}
	ctl := ControlDir(stateDir)
	if len(ctl) > maxControlDir {
		return env, fmt.Errorf("the control socket's directory %s is longer than a socket's path allows (%d bytes)", ctl, maxControlDir)
	}
	for _, d := range []string{bin, ctl} {
		pd, err := privdir.Open(d, privdir.Options{Create: true, Private: true})
		if err != nil {
			return env, fmt.Errorf("the stand-in's directory: %w", err)
		}
		_ = pd.Close()
	}
	if err := link(exe, filepath.Join(bin, Name)); err != nil {
		return env, err
	}
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", EnvReal, EnvControl, EnvPersist:
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PATH="+bin+string(os.PathListSeparator)+path, EnvReal+"="+realSSH, EnvControl+"="+ctl,
		EnvPersist+"="+fmt.Sprint(int(persist.Seconds()))), nil
}

// ControlDir is where the control sockets live: the state dir's ssh/c, or,
// when that is too long for a socket's path (a long home on macOS), a
// directory of the user's own under /tmp, one per state dir (privdir
// refuses one another user made first).
func ControlDir(stateDir string) string {
	ctl := filepath.Join(stateDir, "ssh", "c")
	if len(ctl) <= maxControlDir {
		return ctl
	}
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join("/tmp", fmt.Sprintf("hsbx-ssh-%d", os.Getuid()), hex.EncodeToString(sum[:4]))
}

// link makes name a symbolic link to exe, replacing one to elsewhere
// (another hsbx binary) in one rename.
func link(exe, name string) error {
	if cur, err := os.Readlink(name); err == nil && cur == exe {
		return nil
	}
	tmp := fmt.Sprintf("%s.new%d", name, os.Getpid())
	_ = os.Remove(tmp)
	if err := os.Symlink(exe, tmp); err != nil {
		return fmt.Errorf("the stand-in's link: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("the stand-in's link: %w", err)
	}
	return nil
}

// withoutDir is the PATH list without dir.
func withoutDir(path, dir string) string {
	parts := filepath.SplitList(path)
	parts = slices.DeleteFunc(parts, func(p string) bool { return filepath.Clean(p) == dir })
	return strings.Join(parts, string(os.PathListSeparator))
}

// Argv is what the stand-in runs: the real ssh, sharing one connection per
// destination through a socket in the control directory, then the
// client's own arguments (ssh takes the first value of an option, so
// these win over the user's ssh configuration; the connection itself is
// made with everything else the user configured).
func Argv(getenv func(string) string, args []string) ([]string, error) {
	realSSH, ctl, persist := getenv(EnvReal), getenv(EnvControl), getenv(EnvPersist)
	if realSSH == "" || ctl == "" {
		return nil, errors.New("hsbx's ssh stand-in: " + EnvReal + " or " + EnvControl + " is unset")
	}
	if persist == "" {
		persist = "60"
	}
	return append([]string{realSSH, "-o", "ControlMaster=auto", "-o", "ControlPath=" + filepath.Join(ctl, "%C"),
		"-o", "ControlPersist=" + persist}, args...), nil
}
