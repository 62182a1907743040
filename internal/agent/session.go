//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// The agent's side of sessions (see keeper.go): it finds or starts the
// session's keeper and relays the stream's frames to it and back. A
// keeper's frames reach hsbx only as this stream's output, credit and
// exit: it cannot speak for the agent.

// SessionsDirVar names, in the agent's environment, the directory its
// sessions live in (the fake engines give each sandbox its own).
const SessionsDirVar = "HSBX_SESSIONS_DIR"

// sessionsBase is the directory of this user's sessions in the sandbox:
// .hsbx-sessions-UID in the first of /tmp, /dev/shm, /run and $HOME where
// it can be made (or $HSBX_SESSIONS_DIR), and only if it is this user's
// alone (a directory, not a link, mode 0700).
func sessionsBase() (string, error) {
	uid := os.Geteuid()
	var tried []string
	cands := []string{"/tmp", "/dev/shm", "/run", os.Getenv("HOME")}
	if d := os.Getenv(SessionsDirVar); d != "" {
		cands = []string{d}
	}
	for _, d := range cands {
		if d == "" {
			continue
		}
		base := filepath.Join(d, ".hsbx-sessions-"+strconv.Itoa(uid))
		err := os.Mkdir(base, 0o700)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			tried = append(tried, err.Error())
			continue
		}
		if err := ownDir(base, uid); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return base, nil
	}
	return "", fmt.Errorf("no private directory for sessions in the sandbox: %s", strings.Join(tried, "; "))
}

// ownDir checks that path is a directory (not a link) of uid's that no
// one else can write.
func ownDir(path string, uid int) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case !ok || int(st.Uid) != uid:
		return fmt.Errorf("%s belongs to another user", path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to other users (mode %o)", path, fi.Mode().Perm())
	}
	return nil
}

// fwdQueue holds frames for a keeper until they are written to it. A
// run that its keeper did not take (NotDelivered) gives its frames back
// (requeue) for the next keeper: stdin never goes missing on a retry.
type fwdQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frames []wire.Frame
	bytes  int
	closed bool
	gen    int // the try whose writer may pop
}

func newFwdQueue() *fwdQueue {
	q := &fwdQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *fwdQueue) push(f wire.Frame) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if q.bytes+len(f.Payload) > 2*wire.InputWindow {
		return wire.ErrOverrun
	}
	f.Payload = append([]byte(nil), f.Payload...)
	q.frames = append(q.frames, f)
	q.bytes += len(f.Payload)
	q.cond.Signal()
	return nil
}

// pop takes the next frame for try gen's writer; false once the queue is
// closed or another try took over.
func (q *fwdQueue) pop(gen int) (wire.Frame, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.frames) == 0 && !q.closed && q.gen == gen {
		q.cond.Wait()
	}
	if q.closed || q.gen != gen {
		return wire.Frame{}, false
	}
	f := q.frames[0]
	q.frames = q.frames[1:]
	q.bytes -= len(f.Payload)
	return f, true
}

// try starts a try: the writers of earlier ones pop nothing more.
func (q *fwdQueue) try() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	q.cond.Broadcast()
	return q.gen
}

// requeue puts frames a keeper did not take back in front, in order.
func (q *fwdQueue) requeue(frames []wire.Frame) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(frames) == 0 {
		return
	}
	for _, f := range frames {
		q.bytes += len(f.Payload)
	}
	q.frames = append(append([]wire.Frame{}, frames...), q.frames...)
	q.cond.Broadcast()
}

func (q *fwdQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.frames = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}

// startSession serves a session request as stream id.
func (a *agent) startSession(id uint32, st wire.Start) {
	s := &stream{id: id, fwd: newFwdQueue(), out: wire.NewFlow(wire.Window), stdin: wire.NewQueue(wire.InputWindow)}
	a.mu.Lock()
	a.streams[id] = s
	a.mu.Unlock()
	go func() {
		exit := a.session(s, st)
		a.mu.Lock()
		delete(a.streams, id)
		a.mu.Unlock()
		s.fwd.close()
		_ = a.w.WriteJSON(wire.TExit, id, exit)
	}()
}

func (a *agent) sessionFail(id uint32, name string, code int, err error) wire.Exit {
	msg := "hsbx: "
	if name != "" {
		msg += "session " + name + ": "
	}
	_ = a.w.Write(wire.TStderr, id, []byte(msg+err.Error()+"\n"))
	return wire.Exit{Code: code}
}

func (a *agent) session(s *stream, st wire.Start) wire.Exit {
	if st.Op == wire.SessionOpList {
		return a.listSessions(s.id)
	}
	if !wire.ValidSessionName(st.Session) {
		return a.sessionFail(s.id, "", 2, fmt.Errorf("bad session name %q: 1 to 64 letters, digits, '.', '_' or '-', not starting with '.'", st.Session))
	}
	base, err := sessionsBase()
	if err != nil {
		return a.sessionFail(s.id, st.Session, 125, err)
	}
	dir := filepath.Join(base, st.Session)
	switch st.Op {
	case wire.SessionOpClose:
		return a.closeSession(s.id, dir, st.Session)
	case wire.SessionOpRun:
	default:
		return a.sessionFail(s.id, st.Session, 2, fmt.Errorf("unknown session operation %q", st.Op))
	}
	if strings.IndexByte(st.Script, 0) >= 0 {
		return a.sessionFail(s.id, st.Session, 2, errors.New("the script holds a NUL byte, which no shell can read"))
	}
	for try := 0; ; try++ {
		ex, again := a.sessionRun(s, st, dir)
		if !again || try >= 20 {
			return ex
		}
		time.Sleep(10 * time.Millisecond) // an ending keeper lets go of its socket
	}
}

// sessionRun is one try of a session run: again when the keeper reached
// had lost its shell before the script went to it (it never ran).
func (a *agent) sessionRun(s *stream, st wire.Start, dir string) (wire.Exit, bool) {
	conn, note, err := ensureKeeper(dir, st.Session, time.Duration(st.SessionIdleMS)*time.Millisecond, s.fwd)
	if err != nil {
		code := 125
		if strings.Contains(err.Error(), "has no shell") {
			code = 127
		}
		return a.sessionFail(s.id, st.Session, code, err), false
	}
	defer conn.Close()
	s.mu.Lock()
	s.kconn = conn
	s.mu.Unlock()
	kw := wire.NewWriter(conn)
	if err := kw.WriteJSON(wire.TStart, 1, wire.Start{Script: st.Script, Stdin: st.Stdin, Marker: st.Marker}); err != nil {
		return a.sessionFail(s.id, st.Session, 125, fmt.Errorf("the session's keeper did not take the script: %w", err)), false
	}
	// The writer: hsbx's frames to this keeper, each recorded first, so
	// that a run the keeper did not take gives them all back.
	gen := s.fwd.try()
	var sent []wire.Frame
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			f, ok := s.fwd.pop(gen)
			if !ok {
				return
			}
			sent = append(sent, f)
			if kw.Write(f.Type, 1, f.Payload) != nil {
				return
			}
		}
	}()
	giveBack := func() {
		conn.Close() // the writer's write fails, if it is in one
		s.fwd.try()  // and its pop returns
		<-writerDone
		s.fwd.requeue(sent)
	}
	rd := wire.NewReader(conn)
	for {
		f, err := rd.Read()
		if err != nil {
			ex := a.sessionFail(s.id, st.Session, 125, errors.New("its keeper went away while the script ran; the session is lost (the script may have run part-way)"))
			ex.Session = &wire.SessionNote{New: note.New, Reset: note.Reset, Ended: "its keeper went away"}
			return ex, false
		}
		switch f.Type {
		case wire.TStdout, wire.TStderr, wire.TCredit:
			if a.w.Write(f.Type, s.id, f.Payload) != nil {
				return wire.Exit{Code: 125}, false
			}
		case wire.TExit:
			var ex wire.Exit
			if wire.Decode(f, &ex) != nil {
				return a.sessionFail(s.id, st.Session, 125, errors.New("its keeper sent a bad exit frame")), false
			}
			if ex.NotDelivered {
				giveBack()
				return wire.Exit{}, true
			}
			out := wire.Exit{Code: ex.Code, Killed: ex.Killed, Session: &wire.SessionNote{New: note.New, Reset: note.Reset}}
			if ex.Session != nil {
				out.Session.ID, out.Session.Ended = ex.Session.ID, ex.Session.Ended
			}
			return out, false
		}
	}
}

// dialKeeper connects to the keeper's socket in dir.
func dialKeeper(dir string) (*net.UnixConn, error) {
	sock, f, err := shortSock(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
}

// ensureKeeper connects to the session's keeper, starting it first if
// it is not there (note.New; note.Reset says why the last one ended when
// the sandbox still knows). Agents starting one take the session's lock,
// within a bound: a stuck holder of it gives an error, never a wait
// without end. stop, closed, gives up.
func ensureKeeper(dir, name string, idle time.Duration, stop *fwdQueue) (*net.UnixConn, wire.SessionNote, error) {
	var note wire.SessionNote
	uid := os.Geteuid()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, note, err
	}
	if err := ownDir(dir, uid); err != nil {
		return nil, note, err
	}
	if c, err := dialKeeper(dir); err == nil {
		return c, note, nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, sessLock), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, note, err
	}
	defer lock.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, note, errors.New("another process has been starting this session for 30s")
		}
	}
	if c, err := dialKeeper(dir); err == nil {
		return c, note, nil
	}
	note.New = true
	if b, err := os.ReadFile(filepath.Join(dir, sessEnded)); err == nil {
		note.Reset = clipLine(strings.TrimSpace(string(b)))
	}
	// What a dead keeper left.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != sessLock {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	// This very binary, whatever is at its path now (another host may
	// be installing an agent there).
	self := "/proc/self/exe"
	logf, err := os.OpenFile(filepath.Join(dir, sessLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, note, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		logf.Close()
		return nil, note, err
	}
	p, err := os.StartProcess(self, []string{self, "session-keeper", dir, name, strconv.FormatInt(idle.Milliseconds(), 10)},
		&os.ProcAttr{Files: []*os.File{null, null, logf}, Sys: &syscall.SysProcAttr{Setsid: true}})
	logf.Close()
	null.Close()
	if err != nil {
		return nil, note, fmt.Errorf("starting the session's keeper: %w", err)
	}
	exited := make(chan struct{})
	go func() { _, _ = p.Wait(); close(exited) }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := dialKeeper(dir); err == nil {
			return c, note, nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, sessLog))
			msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "hsbx agent: "))
			if msg == "" {
				msg = "it exited at once"
			}
			_ = os.RemoveAll(dir)
			return nil, note, errors.New(clipLine(msg))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			return nil, note, errors.New("its keeper did not start within 20s")
		}
		if stop.isClosed() {
			return nil, note, errors.New("interrupted")
		}
	}
}

func (q *fwdQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// keeperCall sends one request to a live keeper and returns its stdout
// and exit, within wait.
func keeperCall(dir string, st wire.Start, wait time.Duration) ([]byte, wire.Exit, error) {
	c, err := dialKeeper(dir)
	if err != nil {
		return nil, wire.Exit{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if err := wire.NewWriter(c).WriteJSON(wire.TStart, 1, st); err != nil {
		return nil, wire.Exit{}, err
	}
	rd := wire.NewReader(c)
	var out []byte
	for {
		f, err := rd.Read()
		if err != nil {
			return nil, wire.Exit{}, err
		}
		switch f.Type {
		case wire.TStdout:
			if len(out) < 64<<10 {
				out = append(out, f.Payload...)
			}
		case wire.TExit:
			var ex wire.Exit
			err := wire.Decode(f, &ex)
			return out, ex, err
		}
	}
}

// closeSession ends the session's shell and forgets it.
func (a *agent) closeSession(id uint32, dir, name string) wire.Exit {
	if err := ownDir(dir, os.Geteuid()); err != nil {
		return a.sessionFail(id, name, 1, errors.New("no such session"))
	}
	_, _, err := keeperCall(dir, wire.Start{Op: wire.SessionOpClose}, 10*time.Second)
	_ = os.RemoveAll(dir)
	if err != nil {
		return a.sessionFail(id, name, 1, errors.New("no such session (its shell had ended already)"))
	}
	return wire.Exit{Code: 0}
}

// listSessions writes one wire.SessionInfo a line for each live session.
func (a *agent) listSessions(id uint32) wire.Exit {
	base, err := sessionsBase()
	if err != nil {
		return a.sessionFail(id, "", 125, err)
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if !wire.ValidSessionName(e.Name()) || !e.IsDir() {
			continue
		}
		out, ex, err := keeperCall(filepath.Join(base, e.Name()), wire.Start{Op: "info"}, 2*time.Second)
		if err != nil || ex.Code != 0 {
			continue
		}
		var info wire.SessionInfo
		if json.Unmarshal(out, &info) != nil || info.Name != e.Name() {
			continue
		}
		b, _ := json.Marshal(info)
		if a.w.Write(wire.TStdout, id, append(b, '\n')) != nil {
			break
		}
	}
	return wire.Exit{Code: 0}
}
