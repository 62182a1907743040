//go:build linux

package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// A session is a long-lived interactive shell in the sandbox, kept by
// the session server (server.go) so that it outlives the agent that made
// it; the server runs one script at a time in it.
//
// A script runs in the shell's own environment (`command . FILE`), so cd,
// export, source and functions carry over. Its stdin, stdout and stderr
// are named pipes made for it alone, which the keeper reads (and, when
// the script is over, goes on draining for the background jobs it left,
// so they never die of a broken pipe); the shell reports the script's
// status on a descriptor of its own (3) that the script does not get.
// Nothing the script prints is ever read as a signal.
//
// The shell is interactive (so that SIGINT aborts what it runs and
// returns to it, as Ctrl-C at a terminal does) without job control, its
// prompts and notices going nowhere.

// Session directory entries.
const (
	sessEnded   = "ended" // why the last shell of this name ended
	defaultIdle = time.Hour
	// interruptGrace is how long an interrupted script's shell has to
	// come back to its prompt before its process group is killed, and
	// then the shell itself (the session then ends).
	interruptGrace = 1500 * time.Millisecond
)

// keeper is one session: its shell and the one script running in it.
type keeper struct {
	srv       *server
	dir, name string
	idle      time.Duration
	// ready closes once the shell is up, or startErr says why it is not.
	ready    chan struct{}
	startErr error

	pid       int // the shell's, and its process group's
	shellPath string
	ctl       *os.File // the shell's stdin
	status    chan string
	shellDone chan struct{}
	shellWS   syscall.WaitStatus // set before shellDone closes
	info      wire.SessionInfo

	busy     chan struct{} // held while a script runs
	finished sync.Once
	seq      atomic.Uint64
	lastUsed atomic.Int64 // unix nanoseconds
	running  atomic.Bool
	ending   atomic.Value // string: why the shell is being ended by the keeper
}

func newKeeper(srv *server, dir, name string, idle time.Duration) *keeper {
	if idle <= 0 {
		idle = defaultIdle
	}
	return &keeper{srv: srv, dir: dir, name: name, idle: idle, ready: make(chan struct{}),
		busy: make(chan struct{}, 1), shellDone: make(chan struct{})}
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errNoShell says the image has neither bash nor sh.
var errNoShell = errors.New("the image has no shell (neither bash nor sh on PATH): sessions need one; `hsbx exec` runs argv without a shell")

// findShell is bash when the image has it on PATH, else sh.
func findShell() (string, []string, error) {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, cand := range []struct {
		name string
		args []string
	}{
		{"bash", []string{"bash", "--norc", "--noprofile", "--noediting", "-i"}},
		// Its commands from /proc/self/fd/0, not stdin itself: busybox's
		// sh takes a read of stdin cut by a signal (a background job
		// ending) for its end, and exits.
		{"sh", []string{"sh", "-i", "/proc/self/fd/0"}},
	} {
		for _, d := range filepath.SplitList(path) {
			p := filepath.Join(d, cand.name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, cand.args, nil
			}
		}
	}
	return "", nil, errNoShell
}

func (k *keeper) start() error {
	path, argv, err := findShell()
	if err != nil {
		return err
	}
	k.shellPath = path
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		for _, f := range []*os.File{ctlR, ctlW, stR, stW} {
			f.Close()
		}
		return err
	}
	// Every process the session starts carries its shell's id, however
	// it detaches (setsid, nohup, a daemon's double fork): close and the
	// idle limit end them all by it.
	k.info.ID = newID()
	pid, err := k.srv.spawn(k, path, argv, &os.ProcAttr{
		Env: append(os.Environ(), sessionVar+"="+k.info.ID), Files: []*os.File{ctlR, null, null, stW},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	ctlR.Close()
	stW.Close()
	null.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return fmt.Errorf("starting %s: %w", path, err)
	}
	k.pid, k.ctl = pid, ctlW
	k.status = make(chan string, 16)
	go k.readStatus(stR)
	// Quiet and without job control or history; __hsbx_ret gives the
	// next script the last one's $?.
	init := `PS1=; PS2=; PS4=+; set +m; unset HISTFILE; case "${BASH_VERSION-}" in ?*) set +H +o history;; esac; ` +
		`__hsbx_ret() { return "$1"; }; echo "R init" >&3` + "\n"
	fail := func(err error) error {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = k.ctl.Close()
		return err
	}
	if _, err := k.ctl.WriteString(init); err != nil {
		return fail(fmt.Errorf("the shell %s did not start: %w", path, err))
	}
	select {
	case line := <-k.status:
		if line != "R init" {
			return fail(fmt.Errorf("the shell %s answered %q", path, clipLine(line)))
		}
	case <-k.shellDone:
		return fail(fmt.Errorf("the shell %s exited at once (%s)", path, describeWait(k.shellWS)))
	case <-time.After(10 * time.Second):
		return fail(fmt.Errorf("the shell %s did not answer within 10s", path))
	}
	now := time.Now()
	k.lastUsed.Store(now.UnixNano())
	k.info = wire.SessionInfo{Name: k.name, ID: k.info.ID, Shell: path, PID: pid,
		Created: now.UnixMilli(), IdleMS: k.idle.Milliseconds()}
	return nil
}

// exited is the reaper's word that the shell exited with ws.
func (k *keeper) exited(ws syscall.WaitStatus) {
	k.shellWS = ws
	close(k.shellDone)
}

// describe is the session's SessionInfo now.
func (k *keeper) describe() wire.SessionInfo {
	info := k.info
	info.Busy = k.running.Load()
	info.LastUsed = time.Unix(0, k.lastUsed.Load()).UnixMilli()
	info.Cwd, _ = os.Readlink("/proc/" + strconv.Itoa(k.pid) + "/cwd")
	return info
}

func clipLine(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by signal " + strconv.Itoa(int(ws.Signal()))
	}
	return "status " + strconv.Itoa(ws.ExitStatus())
}

func shellCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readStatus passes the shell's status lines on. Lines are short; a
// longer one (something else wrote to the descriptor) is cut.
func (k *keeper) readStatus(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256), 4096)
	for sc.Scan() {
		select {
		case k.status <- sc.Text():
		default: // nobody waits and the buffer is full: a stray line
		}
	}
	close(k.status)
}

// watch ends the session when its shell ends, or after its idle limit.
func (k *keeper) watch() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-k.shellDone:
			k.finish()
			return
		case <-tick.C:
			last := time.Unix(0, k.lastUsed.Load())
			if !k.running.Load() && time.Since(last) > k.idle {
				select {
				case k.busy <- struct{}{}: // nothing may start now
					k.end(fmt.Sprintf("it ran nothing for %s (the session idle limit)", k.idle))
				default:
				}
			}
		}
	}
}

// sessionVar names, in the environment of every process a session
// starts, its shell's id.
const sessionVar = "HSBX_SESSION_ID"

// end ends the session for reason: its shell (its whole process group)
// is hung up, then killed, and so is every process that carries the
// session's id — the jobs it started, however they detached.
func (k *keeper) end(reason string) {
	k.ending.CompareAndSwap(nil, reason)
	_ = syscall.Kill(-k.pid, syscall.SIGHUP)
	_ = syscall.Kill(-k.pid, syscall.SIGCONT)
	select {
	case <-k.shellDone:
	case <-time.After(time.Second):
		_ = syscall.Kill(-k.pid, syscall.SIGKILL)
	}
	if k.info.ID != "" {
		killMarker(sessionVar + "=" + k.info.ID)
	}
}

// why says how the shell ended.
func (k *keeper) why() string {
	if r, ok := k.ending.Load().(string); ok {
		return r
	}
	return "its shell exited (" + describeWait(k.shellWS) + ")"
}

// finish records why the session ended (for the next run) and leaves
// the server; a closed session leaves nothing behind.
func (k *keeper) finish() { k.finished.Do(k.doFinish) }

func (k *keeper) doFinish() {
	_ = k.ctl.Close()
	if r, _ := k.ending.Load().(string); r == "closed" {
		_ = os.RemoveAll(k.dir)
	} else {
		_ = os.WriteFile(filepath.Join(k.dir, sessEnded), []byte(k.why()), 0o600)
	}
	k.srv.drop(k)
}

// startedSince lists the members of process group pgid, but leader,
// that started at or after t (the script's own, not earlier scripts'
// background jobs).
func startedSince(pgid int, t time.Time) []int {
	// Since boot, as /proc counts process start times (USER_HZ: 100).
	since := uptime() - time.Since(t) - 20*time.Millisecond
	var out []int
	for _, pid := range groupMembers(pgid) {
		if pid == pgid {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 {
			continue
		}
		st, err := strconv.ParseInt(f[19], 10, 64) // field 22: starttime
		if err != nil {
			continue
		}
		if time.Duration(st)*10*time.Millisecond >= since {
			out = append(out, pid)
		}
	}
	return out
}

// uptime is the time since boot (/proc/uptime).
func uptime() time.Duration {
	b, _ := os.ReadFile("/proc/uptime")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return time.Duration(v * float64(time.Second))
}

// shortSock is a path to dir's socket name short enough for any dir (a
// unix socket's path holds 107 bytes): through the directory's descriptor
// in /proc/self/fd, held open by the returned file until closed.
func shortSock(dir, name string) (string, *os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", nil, err
	}
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) + "/" + name, f, nil
}
