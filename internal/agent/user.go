//go:build linux

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A command run as another user (wire.Start.User, the engine's --user):
// the name, uid, "name:group" or "uid:gid" looked up in the sandbox's own
// /etc/passwd and /etc/group, with the engines' (runc's) rules — a uid the
// passwd file does not list is taken as it is, with gid 0 and HOME /; a
// name it does not list is an error naming it; the user's supplementary
// groups are those /etc/group lists it in. The agent needs to be root to
// become anyone but itself.

// maxID bounds a uid or gid: what fits the kernel's 32 bits, less the
// (uid_t)-1 that means "no change".
const maxID = 1<<32 - 2

// execUser is who a command runs as.
type execUser struct {
	uid, gid uint32
	groups   []uint32
	home     string
}

// NoUserError says a user or group is not in the sandbox, or not one the
// agent may become.
type NoUserError struct{ Msg string }

func (e *NoUserError) Error() string { return e.Msg }

// lookupUser resolves spec with the passwd and group files at passwdPath
// and groupPath (a missing file lists no one).
func lookupUser(spec, passwdPath, groupPath string) (execUser, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || hasGroup && group == "" || strings.ContainsAny(spec, "\x00\n") {
		return execUser{}, &NoUserError{Msg: fmt.Sprintf("%q is not a user: give NAME, UID, NAME:GROUP or UID:GID", spec)}
	}
	u := execUser{home: "/"}
	uid, numeric := parseID(name)
	found := false
	err := eachLine(passwdPath, func(f []string) bool {
		if len(f) < 7 {
			return false
		}
		id, ok := parseID(f[2])
		if !ok || f[0] != name && (!numeric || id != uid) {
			return false
		}
		gid, gok := parseID(f[3])
		if !gok {
			return false
		}
		u.uid, u.gid, u.home, name, found = id, gid, f[5], f[0], true
		return true
	})
	if err != nil {
		return execUser{}, fmt.Errorf("reading the sandbox's users: %w", err)
	}
	switch {
	case !found && !numeric:
		return execUser{}, &NoUserError{Msg: fmt.Sprintf("unable to find user %s: no matching entries in passwd file", name)}
	case !found:
		u.uid = uid
	}
	if hasGroup {
		gid, gnum := parseID(group)
		gfound := false
		err := eachLine(groupPath, func(f []string) bool {
			if len(f) < 3 {
				return false
			}
			id, ok := parseID(f[2])
			if ok && (f[0] == group || gnum && id == gid) {
				u.gid, gfound = id, true
				return true
			}
			return false
		})
		if err != nil {
			return execUser{}, fmt.Errorf("reading the sandbox's groups: %w", err)
		}
		switch {
		case !gfound && !gnum:
			return execUser{}, &NoUserError{Msg: fmt.Sprintf("unable to find group %s: no matching entries in group file", group)}
		case !gfound:
			u.gid = gid
		}
	}
	if found {
		err := eachLine(groupPath, func(f []string) bool {
			if len(f) < 4 {
				return false
			}
			id, ok := parseID(f[2])
			if ok && id != u.gid && containsWord(f[3], name) {
				u.groups = append(u.groups, id)
			}
			return false
		})
		if err != nil {
			return execUser{}, fmt.Errorf("reading the sandbox's groups: %w", err)
		}
	}
	return u, nil
}

// credential is how the agent starts a process as u: nil when u is who
// the agent already is (no change, no privilege needed); an error when
// the agent, not root, would have to become someone else.
func (u execUser) credential(spec string) (*syscall.Credential, error) {
	if os.Geteuid() == int(u.uid) && os.Getegid() == int(u.gid) && len(u.groups) == 0 {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, &NoUserError{Msg: fmt.Sprintf("hsbx's agent runs as uid %d here and cannot become user %q (uid %d): only a sandbox whose commands run as root can run one as another user",
			os.Geteuid(), spec, u.uid)}
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}, nil
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID {
		return 0, false
	}
	return uint32(n), true
}

func containsWord(list, name string) bool {
	for m := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(m) == name {
			return true
		}
	}
	return false
}

// eachLine calls f with the colon-separated fields of each line of the
// file at path (at most 1 MiB of it, lines of at most 64 KiB) until f
// returns true. A missing file has no lines.
func eachLine(path string, f func([]string) bool) error {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(io.LimitReader(file, 1<<20))
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if f(strings.Split(line, ":")) {
			return nil
		}
	}
	return sc.Err()
}
