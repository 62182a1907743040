//go:build linux

package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// krun is one script's run.
type krun struct {
	out      *wire.Flow
	stdin    *wire.Queue
	signal   chan struct{} // the agent asked to stop it (or went away)
	sigOnce  sync.Once
	opened   chan struct{} // the shell opened the script's stdin
	killed   atomic.Int64
	gone     atomic.Bool // the agent went away
	inWriter *os.File
}

func (r *krun) stop() { r.sigOnce.Do(func() { close(r.signal) }) }

// run runs st.Script for an agent (rd, w); note is what the server has to
// say of the session's shell (New, Reset).
func (k *keeper) run(rd *wire.Reader, w *wire.Writer, st wire.Start, note wire.SessionNote) {
	r := &krun{out: wire.NewFlow(wire.Window), stdin: wire.NewQueue(wire.InputWindow), signal: make(chan struct{}), opened: make(chan struct{})}
	// Frames from the agent, from the start: while queued, a Signal or
	// the agent's going away gives the place up.
	go func() {
		for {
			f, err := rd.Read()
			if err != nil {
				r.gone.Store(true)
				r.stop()
				r.out.Close()
				r.stdin.Close()
				return
			}
			switch f.Type {
			case wire.TStdin:
				if r.stdin.Push(f.Type, f.Payload) != nil {
					r.stop()
				}
			case wire.TStdinEOF:
				r.stdin.End()
			case wire.TCredit:
				if n, err := wire.ParseCredit(f.Payload); err == nil {
					_ = r.out.Give(n)
				}
			case wire.TSignal:
				r.stop()
			}
		}
	}()
	select {
	case k.busy <- struct{}{}:
	case <-r.signal:
		note.ID = k.info.ID
		_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: 130, Session: &note})
		return
	case <-k.shellDone:
		_ = w.WriteJSON(wire.TExit, 1, wire.Exit{NotDelivered: true})
		return
	}
	select {
	case <-k.shellDone: // it ended while this waited: never ran here
		<-k.busy
		_ = w.WriteJSON(wire.TExit, 1, wire.Exit{NotDelivered: true})
		return
	default:
	}
	k.running.Store(true)
	defer func() {
		k.lastUsed.Store(time.Now().UnixNano())
		k.running.Store(false)
		<-k.busy
	}()
	code, ended, err := k.script(r, w, st)
	note.ID, note.Ended = k.info.ID, ended
	if err != nil {
		_ = w.WriteJSON(wire.TExit, 1, failed(125, err, note))
		return
	}
	_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: code, Killed: int(r.killed.Load()), Session: &note})
}

// script runs st.Script and returns its status, or why the shell ended.
func (k *keeper) script(r *krun, w *wire.Writer, st wire.Start) (code int, ended string, err error) {
	n := k.seq.Add(1)
	nonce := newID()[:16]
	file := func(kind string) string { return filepath.Join(k.dir, kind+"."+strconv.FormatUint(n, 10)) }
	cmdPath, outPath, errPath, inPath := file("cmd"), file("out"), file("err"), file("in")
	defer func() {
		for _, p := range []string{cmdPath, outPath, errPath, inPath} {
			_ = os.Remove(p)
		}
	}()
	if err := os.WriteFile(cmdPath, []byte(st.Script), 0o600); err != nil {
		return 0, "", err
	}
	outR, err1 := fifoReader(outPath)
	errR, err2 := fifoReader(errPath)
	if err := errors.Join(err1, err2); err != nil {
		return 0, "", err
	}
	in := "/dev/null"
	if st.Stdin {
		if err := syscall.Mkfifo(inPath, 0o600); err != nil {
			return 0, "", fmt.Errorf("mkfifo: %w", err)
		}
		// Read-write: opening it never waits; the shell's open does not
		// either (a writer exists). Closed once the shell has it open and
		// the input ended: then the script reads EOF.
		f, err := os.OpenFile(inPath, os.O_RDWR, 0)
		if err != nil {
			return 0, "", err
		}
		r.inWriter = f
		in = inPath
		go k.feed(r, w)
	}
	marker := ""
	if name, tok, ok := strings.Cut(st.Marker, "="); ok && name == markerVar && safeToken(tok) {
		marker = "HSBX_EXEC_ID=" + tok + "; export HSBX_EXEC_ID; "
	}
	// $? is the last script's at the start of this one (__hsbx_ret).
	line := "__hsbx_p=$?; " + marker + `{ echo "O ` + nonce + `" >&3; __hsbx_ret "$__hsbx_p"; command . ` + cmdPath + ` 3>&-; } <` + in +
		` >` + outPath + ` 2>` + errPath + `; __hsbx_s=$?; unset HSBX_EXEC_ID; echo "S $__hsbx_s ` + nonce +
		`" >&3; __hsbx_ret "$__hsbx_s"` + "\n"
	// Stray lines from an earlier script (a sync that came late) go.
	for drained := false; !drained; {
		select {
		case <-k.status:
		default:
			drained = true
		}
	}
	if _, err := k.ctl.WriteString(line); err != nil {
		outR.Close()
		errR.Close()
		return 0, "", fmt.Errorf("writing to the shell: %w", err)
	}
	pumps := &sync.WaitGroup{}
	stopOut := make(chan struct{})
	pumps.Add(2)
	go k.pump(r, w, outR, wire.TStdout, stopOut, pumps)
	go k.pump(r, w, errR, wire.TStderr, stopOut, pumps)
	finishOutput := func() {
		close(stopOut)
		pumps.Wait()
	}

	began := time.Now()
	sig := r.signal
	syncNonce := ""
	var syncTick <-chan time.Time
	var grace, killMarked <-chan time.Time
	killedGroup := false
	interrupted := false
	for {
		select {
		case line, ok := <-k.status:
			if !ok {
				<-k.shellDone
				finishOutput()
				k.finish() // before the agent hears of it: no run reaches this keeper again
				return shellCode(k.shellWS), k.why(), nil
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "O" && f[1] == nonce:
				close(r.opened)
			case len(f) == 3 && f[0] == "S" && f[2] == nonce:
				c, _ := strconv.Atoi(f[1])
				if interrupted {
					c = 130
					if killMarked != nil {
						k.killMarked(r, st.Marker)
					}
				}
				finishOutput()
				return c, "", nil
			case len(f) == 2 && f[0] == "Y" && f[1] == syncNonce:
				if killMarked != nil {
					k.killMarked(r, st.Marker)
				}
				finishOutput()
				return 130, "", nil
			}
		case <-k.shellDone:
			finishOutput()
			k.finish()
			return shellCode(k.shellWS), k.why(), nil
		case <-sig:
			sig = nil // once
			interrupted = true
			// As Ctrl-C: the shell and its foreground processes get
			// SIGINT (background jobs ignore it); what the script started
			// that lives on is killed by its marker a moment later, once
			// the shell has had the chance to see its child die of SIGINT.
			_ = syscall.Kill(-k.pid, syscall.SIGINT)
			killMarked = time.After(100 * time.Millisecond)
			syncNonce = newID()[:16]
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			syncTick = t.C
			grace = time.After(interruptGrace)
			k.sendSync(syncNonce)
		case <-killMarked:
			killMarked = nil
			k.killMarked(r, st.Marker)
		case <-syncTick:
			// A shell may miss a SIGINT that came while it could not
			// take it (busybox's sh, now and then): again, until it is back.
			if !killedGroup {
				_ = syscall.Kill(-k.pid, syscall.SIGINT)
			}
			k.sendSync(syncNonce)
		case <-grace:
			if !killedGroup {
				// The shell did not come back: kill all but it.
				killedGroup = true
				for _, pid := range startedSince(k.pid, began) {
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						r.killed.Add(1)
					}
				}
				grace = time.After(interruptGrace)
				continue
			}
			k.end("the interrupted script did not give the shell back (it ignores SIGINT, or runs in the shell itself)")
			<-k.shellDone
			finishOutput()
			k.finish()
			return shellCode(k.shellWS), k.why(), nil
		}
	}
}

const markerVar = "HSBX_EXEC_ID"

func safeToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// killMarked kills what the script started outside the shell, by its
// marker.
func (k *keeper) killMarked(r *krun, marker string) {
	if _, tok, ok := strings.Cut(marker, "="); ok && safeToken(tok) {
		r.killed.Add(int64(KillMarked(markerVar + "=" + tok)))
	}
}

// sendSync asks the shell, once it reads input again, to say so.
func (k *keeper) sendSync(nonce string) {
	_, _ = k.ctl.WriteString(`echo "Y ` + nonce + `" >&3` + "\n")
}

// feed writes the agent's stdin frames to the script's input.
func (k *keeper) feed(r *krun, w *wire.Writer) {
	f := r.inWriter
	var credits wire.Credits
	for {
		_, p, ok := r.stdin.PopRun()
		if !ok {
			break
		}
		if _, err := f.Write(p); err != nil {
			r.stdin.Close()
			break
		}
		if n := credits.Consumed(len(p)); n > 0 {
			_ = w.Write(wire.TCredit, 1, wire.Credit(n))
		}
	}
	// EOF only once the shell has the pipe open (else its open would
	// wait for a writer that is gone).
	select {
	case <-r.opened:
	case <-k.shellDone:
	case <-r.signal:
	}
	f.Close()
}

// fifoReader makes a named pipe and opens its reading end (without
// waiting for a writer).
func fifoReader(path string) (*os.File, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("mkfifo: %w", err)
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// pump relays one output of the script until stop (the script is over),
// then what was already written, then drains the rest — from background
// jobs the script left — to nowhere until every writer is gone, so they
// never get a broken pipe.
func (k *keeper) pump(r *krun, w *wire.Writer, f *os.File, t wire.Type, stop <-chan struct{}, done *sync.WaitGroup) {
	buf := make([]byte, 32<<10)
	relaying := true
	send := func(p []byte) {
		for off := 0; relaying && off < len(p); {
			c := r.out.Take(len(p) - off)
			if c == 0 || w.Write(t, 1, p[off:off+c]) != nil {
				relaying = false
				return
			}
			off += c
		}
	}
	deadlineSet := make(chan struct{})
	go func() { defer close(deadlineSet); <-stop; _ = f.SetReadDeadline(time.Now()) }()
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
relay:
	for {
		n, err := f.Read(buf)
		send(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			// EOF: no writer yet, or none left. Wait for the script's
			// end (then straight to the last read: no spinning on EOF
			// while the deadline is being set, which starved the
			// goroutines of a 2-core machine for milliseconds).
			poll.Reset(5 * time.Millisecond)
			select {
			case <-stop:
				break relay
			case <-poll.C:
			}
		}
	}
	// What was written before the status line is in the pipe: take it.
	// (The deadline is cleared after it was set, never before: a late one
	// would cut the drain below short and give background jobs SIGPIPE.)
	<-deadlineSet
	_ = f.SetReadDeadline(time.Time{})
	if raw, err := f.SyscallConn(); err == nil {
		for {
			n := 0
			_ = raw.Read(func(fd uintptr) bool {
				n, _ = syscall.Read(int(fd), buf)
				return true
			})
			if n <= 0 {
				break
			}
			send(buf[:n])
		}
	}
	done.Done()
	// Background jobs may hold the pipe: drain it to nowhere.
	go func() {
		defer f.Close()
		_, _ = io.Copy(io.Discard, f)
	}()
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
