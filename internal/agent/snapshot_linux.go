package agent

// Snapshots: what the engine's commit cannot see, staged where it can.
// A commit saves the container's own layer, never its mounts (the
// persistent /workspace and /root, the memory-backed /tmp...), so
// snapshot-hold stops every other process of the sandbox (SIGSTOP: none
// writes while it copies or while the engine commits), copies the mounted
// paths into agentapi.SnapshotStage in the container's layer, says so, and
// waits for the host's go-ahead (or its end: the engine closes the exec's
// input when the client goes) before it removes the copy and continues
// the processes it stopped. snapshot-restore, run in a sandbox made from
// the image, copies the staged paths back over the mounts.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"golang.org/x/sys/unix"
)

// snapshotHoldMax bounds how long snapshot-hold keeps the sandbox stopped
// waiting for the host's go-ahead: a host that neither answers nor goes
// away does not keep it stopped for ever.
const snapshotHoldMax = 30 * time.Minute

// initPidNS is the inode of the host's first pid namespace
// (PROC_PID_INIT_INO): an agent that sees it is not in a container's own.
const initPidNS = 0xEFFFFFFC

// SnapshotHold is the snapshot-hold mode: stop the sandbox's processes,
// stage paths (at most bound bytes of files), report on out, wait for a
// line or the end of in, then remove the stage and continue the processes.
func SnapshotHold(bound int64, paths []string, in io.Reader, out io.Writer) int {
	enc := json.NewEncoder(out)
	unlock, err := holdLock()
	if err != nil {
		_ = enc.Encode(agentapi.SnapshotReport{Error: err.Error(), Kind: agentapi.SnapshotKindBusy})
		return 1
	}
	defer unlock()
	fz, err := freeze()
	if err != nil {
		fz.thaw()
		_ = enc.Encode(agentapi.SnapshotReport{Error: err.Error(), Kind: agentapi.SnapshotKindFreeze})
		return 1
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // what starts meanwhile (another command's exec) is stopped too
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fz.round()
			}
		}
	}()
	rep, err := stage(agentapi.SnapshotStage, paths, bound)
	rep.Frozen = len(fz.stopped)
	if err != nil {
		_ = os.RemoveAll(agentapi.SnapshotStage)
		rep.Error, rep.Kind = err.Error(), snapshotKind(err)
		close(stop)
		<-done
		fz.thaw()
		_ = enc.Encode(rep)
		return 1
	}
	_ = enc.Encode(rep)
	waitGoAhead(in, snapshotHoldMax)
	close(stop)
	<-done
	_ = os.RemoveAll(agentapi.SnapshotStage)
	thawed := fz.thaw()
	_ = enc.Encode(agentapi.SnapshotReport{Thawed: thawed})
	return 0
}

// holdLock makes snapshot-holds of one sandbox take turns, whichever host
// asked: two at once would stop each other's agent (each then waits for
// ever) and remove each other's stage. The lock is on the container's
// root directory (an flock: released when this process ends, however it
// ends; no file is made, so none is committed). Another hold has it:
// an error at once, nothing stopped. A root that cannot be locked at all
// (a file system without flock) does without: holds ran so before.
func holdLock() (func(), error) {
	f, err := os.Open("/")
	if err != nil {
		return func() {}, nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errors.New("another snapshot of this sandbox is being taken (its lock on / is held)")
		}
		return func() {}, nil
	}
	return func() { f.Close() }, nil
}

// waitGoAhead returns on a line of input, its end, or after bound.
func waitGoAhead(in io.Reader, bound time.Duration) {
	got := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(in).ReadString('\n')
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(bound):
	}
}

// errStageTooLarge is a stage past its bound.
var errStageTooLarge = errors.New("the snapshot's files are over the size bound")

func snapshotKind(err error) string {
	switch {
	case errors.Is(err, errStageTooLarge):
		return agentapi.SnapshotKindTooLarge
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return agentapi.SnapshotKindNoSpace
	}
	return agentapi.SnapshotKindFailed
}

// stage copies each path that exists to agentapi.SnapshotStage+path and
// writes the manifest last (a stage without one is not whole).
func stage(dir string, paths []string, bound int64) (agentapi.SnapshotReport, error) {
	var rep agentapi.SnapshotReport
	_ = os.RemoveAll(dir) // an earlier hold's, cut short
	if err := os.Mkdir(dir, 0o700); err != nil {
		return rep, fmt.Errorf("making %s: %w", dir, err)
	}
	tc := &treeCopy{bound: bound, links: map[[2]uint64]string{}}
	for _, p := range paths {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || p == "/" || p == dir || strings.HasPrefix(p, dir+"/") {
			return rep, fmt.Errorf("cannot snapshot path %q", p)
		}
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return rep, err
		}
		if !st.IsDir() {
			tc.skipped = append(tc.skipped, p+" (not a directory)")
			continue
		}
		dst := dir + p
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return rep, err
		}
		if err := tc.copyDir(p, dst, true); err != nil {
			return rep, err
		}
		rep.Paths = append(rep.Paths, p)
	}
	rep.Bytes, rep.Files, rep.Skipped = tc.bytes, tc.files, tc.skipped
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o600); err != nil {
		return rep, err
	}
	return rep, nil
}

// SnapshotRestore is the snapshot-restore mode: put each staged path back
// over the sandbox's own (what is there now is replaced; nothing of it is
// kept but hsbx's own entries at its top), then remove the stage. Each
// path is copied in beside what it replaces first, so a copy that fails
// (a full disk) leaves that path as it was.
func SnapshotRestore(out io.Writer) int {
	enc := json.NewEncoder(out)
	rep, err := restore(agentapi.SnapshotStage)
	if err != nil {
		rep.Error, rep.Kind = err.Error(), snapshotKind(err)
		_ = enc.Encode(rep)
		return 1
	}
	_ = enc.Encode(rep)
	return 0
}

func restore(dir string) (agentapi.SnapshotReport, error) {
	var man, rep agentapi.SnapshotReport
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return rep, fmt.Errorf("the snapshot's staged files have no manifest: %w", err)
	}
	if err := json.Unmarshal(b, &man); err != nil {
		return rep, fmt.Errorf("the snapshot's manifest: %w", err)
	}
	tc := &treeCopy{links: map[[2]uint64]string{}}
	for _, p := range man.Paths {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || p == "/" || p == dir || strings.HasPrefix(p, dir+"/") {
			return rep, fmt.Errorf("the snapshot's manifest names path %q", p)
		}
		src := dir + p
		if err := os.MkdirAll(p, 0o755); err != nil {
			return rep, err
		}
		tmp, err := os.MkdirTemp(p, ".hsbx-restore-")
		if err != nil {
			return rep, err
		}
		if err := tc.copyDir(src, tmp, false); err != nil {
			_ = os.RemoveAll(tmp)
			return rep, fmt.Errorf("restoring %s: %w", p, err)
		}
		if err := swapIn(p, tmp); err != nil {
			return rep, fmt.Errorf("restoring %s: %w", p, err)
		}
		if err := tc.attrs(src, p); err != nil {
			return rep, err
		}
		rep.Paths = append(rep.Paths, p)
	}
	if err := os.RemoveAll(dir); err != nil {
		return rep, err
	}
	rep.Bytes, rep.Files, rep.Skipped = tc.bytes, tc.files, tc.skipped
	return rep, nil
}

// swapIn replaces dir's entries by tmp's (tmp is in dir): every entry but
// tmp and hsbx's own (".hsbx-" names: sessions, background processes) is
// removed, then tmp's are renamed up.
func swapIn(dir, tmp string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".hsbx-") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	ents, err = os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(tmp)
}

// treeCopy copies directory trees as they are: modes (set-id bits too),
// owners, times, symbolic links, hard links among the copied files,
// fifos. Sockets and devices are passed over (named in skipped), and so
// is another file system mounted inside the top (a volume of the user's).
type treeCopy struct {
	bound   int64 // 0: none
	bytes   int64
	files   int
	skipped []string
	links   map[[2]uint64]string // (dev, inode) of a file with links -> its copy
	dev     uint64               // the top's device
}

// copyDir copies src's entries into dst (made when missing) and then
// src's own attributes onto dst. top: src is a staged path's top, where
// hsbx's own entries and other mounts are left out.
func (c *treeCopy) copyDir(src, dst string, top bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	c.dev = st.Dev
	if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := c.entries(src, dst, top); err != nil {
		return err
	}
	return c.attrs(src, dst)
}

func (c *treeCopy) entries(src, dst string, top bool) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if top && strings.HasPrefix(e.Name(), ".hsbx-") {
			continue // hsbx's own: the sandbox's sessions, background processes
		}
		if err := c.one(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (c *treeCopy) one(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone since it was listed (only hsbx's processes run)
		}
		return err
	}
	if st.Dev != c.dev && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		c.skipped = append(c.skipped, src+" (another mount)")
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		if err := c.entries(src, dst, false); err != nil {
			return err
		}
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				return os.Link(first, dst)
			}
			c.links[key] = dst
		}
		if c.bound > 0 && c.bytes+st.Size > c.bound {
			return fmt.Errorf("%w (%d bytes)", errStageTooLarge, c.bound)
		}
		if err := copyFile(src, dst); err != nil {
			return err
		}
		c.bytes += st.Size
	case unix.S_IFLNK:
		to, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(to, dst); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mkfifo(dst, 0o600); err != nil {
			return err
		}
	default:
		c.skipped = append(c.skipped, src+" (a socket or device)")
		return nil
	}
	c.files++
	return c.attrs(src, dst)
}

// attrs puts src's owner, mode and times on dst (a link's own).
func (c *treeCopy) attrs(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After the owner: chown clears the set-id bits.
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// freezer stops the sandbox's processes and continues them.
type freezer struct {
	self    int
	stopped []int        // stopped here, in order
	seen    map[int]bool // looked at: stopped here, or stopped already
}

// freeze stops every process of the sandbox but this one (its pid
// namespace's init ignores the signal and is left out: it writes
// nothing of the user's) and waits until each has stopped. It refuses to
// run outside a container's own pid namespace: it would stop the host's.
func freeze() (*freezer, error) {
	fz := &freezer{self: os.Getpid(), seen: map[int]bool{}}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return fz, fmt.Errorf("reading the agent's pid namespace: %w", err)
	}
	if st.Ino == initPidNS {
		return fz, errors.New("hsbx's agent is in the host's pid namespace, not a container's own: it will not stop the processes it sees")
	}
	for range 100 {
		if fz.round() == 0 {
			break
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range fz.stopped {
		for {
			s := procState(pid)
			if s == 'T' || s == 't' || s == 'Z' || s == 'X' || s == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fz, fmt.Errorf("process %d of the sandbox did not stop within 5s (state %c)", pid, s)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return fz, nil
}

// round stops the processes not looked at yet and returns how many it
// stopped.
func (fz *freezer) round() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == fz.self || pid == 1 || fz.seen[pid] {
			continue
		}
		fz.seen[pid] = true
		switch procState(pid) {
		case 'T', 't', 'Z', 'X', 0:
			continue // stopped already (its own stop is kept), or gone
		}
		if unix.Kill(pid, unix.SIGSTOP) == nil {
			fz.stopped = append(fz.stopped, pid)
			n++
		}
	}
	return n
}

// thaw continues the processes freeze stopped, and returns how many.
func (fz *freezer) thaw() int {
	n := 0
	for _, pid := range slices.Backward(fz.stopped) {
		if unix.Kill(pid, unix.SIGCONT) == nil {
			n++
		}
	}
	fz.stopped = nil
	return n
}

// procState is the state letter of /proc/PID/stat (0: gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
