//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/wire"
)

// The agent's side of sessions (see keeper.go): it finds or starts the
// session's keeper and relays the stream's frames to it and back. A
// keeper's frames reach hsbx only as this stream's output, credit and
// exit: it cannot speak for the agent.

// SessionsDirVar names, in the agent's environment, the directory its
// sessions live in (the fake engines give each sandbox its own).
const SessionsDirVar = "HSBX_SESSIONS_DIR"

// sessionsDirPrefix names the directory of a user's sessions, with its
// uid after it. Its "2" is the layout's: one session server for them all
// (an hsbx before it kept a keeper a session, in .hsbx-sessions-UID, and
// the two never share a session's files).
const sessionsDirPrefix = ".hsbx-sessions2-"

// sessionsBase is the directory of this user's sessions in the sandbox:
// .hsbx-sessions2-UID in the first of /tmp, /dev/shm, /run and $HOME where
// it can be made (or $HSBX_SESSIONS_DIR), and only if it is this user's
// alone (a directory, not a link, mode 0700).
func sessionsBase() (string, error) { return sessionsBaseOf(os.Geteuid(), os.Getegid()) }

// sessionsBaseOf is sessionsBase for user uid (gid its group): the agent,
// root, makes another user's and gives it to them.
func sessionsBaseOf(uid, gid int) (string, error) {
	var tried []string
	cands := []string{"/tmp", "/dev/shm", "/run", os.Getenv("HOME")}
	if d := os.Getenv(SessionsDirVar); d != "" {
		cands = []string{d}
	}
	for _, d := range cands {
		if d == "" {
			continue
		}
		base := filepath.Join(d, sessionsDirPrefix+strconv.Itoa(uid))
		err := os.Mkdir(base, 0o700)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			tried = append(tried, err.Error())
			continue
		}
		if err == nil && uid != os.Geteuid() {
			_ = os.Lchown(base, uid, gid) // made here, for them: ownDir checks the result
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

// startSession serves a session request as stream id.
func (a *agent) startSession(id uint32, st wire.Start) {
	s := &stream{id: id, fwd: newFwdQueue(), out: wire.NewFlow(wire.Window), stdin: wire.NewQueue(wire.InputWindow), signalled: make(chan struct{})}
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

// opFail ends a close or list with code and a message on stderr.
func (a *agent) opFail(id uint32, name string, code int, err error) wire.Exit {
	msg := "hsbx: "
	if name != "" {
		msg += "session " + name + ": "
	}
	_ = a.w.Write(wire.TStderr, id, []byte(msg+err.Error()+"\n"))
	return wire.Exit{Code: code}
}

func (a *agent) session(s *stream, st wire.Start) wire.Exit {
	base, err := sessionsBase()
	var as *sessionUser
	if st.User != "" {
		u, uerr := lookupUser(st.User, "/etc/passwd", "/etc/group")
		var cred *syscall.Credential
		if uerr == nil {
			cred, uerr = u.credential(st.User)
		}
		if uerr != nil {
			var nu *NoUserError
			return wire.Exit{Code: 126, Failed: uerr.Error(), NoUser: errors.As(uerr, &nu)}
		}
		if cred != nil {
			as = &sessionUser{cred: cred, home: u.home}
			base, err = sessionsBaseOf(int(u.uid), int(u.gid))
		}
	}
	switch {
	case st.Op == wire.SessionOpList:
		if err != nil {
			return a.opFail(s.id, "", 125, err)
		}
		return a.listSessions(s.id, base)
	case !wire.ValidSessionName(st.Session):
		return failed(2, fmt.Errorf("bad session name %q: 1 to 64 letters, digits, '.', '_' or '-', not starting with '.'", st.Session), wire.SessionNote{})
	case st.Op == wire.SessionOpClose:
		if err != nil {
			return a.opFail(s.id, st.Session, 125, err)
		}
		return a.closeSession(s.id, base, st.Session)
	case st.Op != wire.SessionOpRun:
		return failed(2, fmt.Errorf("unknown session operation %q", st.Op), wire.SessionNote{})
	case strings.IndexByte(st.Script, 0) >= 0:
		return failed(2, errors.New("the script holds a NUL byte, which no shell can read"), wire.SessionNote{})
	case err != nil:
		return failed(125, err, wire.SessionNote{})
	}
	for try := 0; ; try++ {
		ex, again := a.sessionRun(s, st, base, as)
		if !again || try >= 20 {
			return ex
		}
		time.Sleep(10 * time.Millisecond) // an ending shell or server lets go
	}
}

// sessionRun is one try of a session run: again when the server did not
// take it (no Hello), or the session's shell was gone before the script
// went to it: it never ran.
func (a *agent) sessionRun(s *stream, st wire.Start, base string, as *sessionUser) (wire.Exit, bool) {
	conn, err := ensureServer(base, s.fwd, as)
	if err != nil {
		return failed(125, fmt.Errorf("the session server: %w", err), wire.SessionNote{}), false
	}
	defer conn.Close()
	s.mu.Lock()
	s.kconn = conn
	s.mu.Unlock()
	kw := wire.NewWriter(conn)
	if err := kw.WriteJSON(wire.TStart, 1, wire.Start{Session: st.Session, Script: st.Script, Stdin: st.Stdin,
		Marker: st.Marker, SessionIdleMS: st.SessionIdleMS}); err != nil {
		return wire.Exit{}, true // it went before it took anything
	}
	// The writer: hsbx's frames to the server, each recorded first, so
	// that a run the server did not take gives them all back.
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
	// Every wait on the server is bounded: for its Hello, and after
	// hsbx's Signal for its Exit (a process of the sandbox's user may
	// hold its socket and never answer): then the connection is closed.
	var taken atomic.Bool
	var silent, deaf atomic.Bool
	done := make(chan struct{})
	defer close(done)
	go func() {
		hello := time.After(serverHelloWait)
		for {
			select {
			case <-hello:
				hello = nil
				if !taken.Load() {
					silent.Store(true)
					conn.Close()
					return
				}
			case <-s.signalled:
				if !taken.Load() { // nothing ran: no need to wait
					conn.Close()
					return
				}
				select {
				case <-time.After(signalWait):
					deaf.Store(true)
					conn.Close()
				case <-done:
				}
				return
			case <-done:
				return
			}
		}
	}()
	rd := wire.NewReader(conn)
	for {
		f, err := rd.Read()
		if err != nil {
			switch {
			case deaf.Load():
				return failed(130, fmt.Errorf("the session server did not stop the script within %s of the interrupt", signalWait), wire.SessionNote{}), false
			case silent.Load():
				return failed(125, fmt.Errorf("the session server did not answer within %s (a process in the sandbox may hold its socket)", serverHelloWait), wire.SessionNote{}), false
			case !taken.Load():
				select {
				case <-s.signalled:
					return failed(130, errors.New("interrupted before the session server took the script"), wire.SessionNote{}), false
				default:
				}
				giveBack()
				return wire.Exit{}, true
			}
			return failed(125, errors.New("the session server went away while the script ran; the session is lost (the script may have run part-way)"),
				wire.SessionNote{Ended: "the session server went away"}), false
		}
		switch f.Type {
		case wire.THello:
			taken.Store(true)
		case wire.TStdout, wire.TStderr, wire.TCredit:
			if a.w.Write(f.Type, s.id, f.Payload) != nil {
				return wire.Exit{Code: 125}, false
			}
		case wire.TExit:
			var ex wire.Exit
			if wire.Decode(f, &ex) != nil {
				return failed(125, errors.New("the session server sent a bad exit frame"), wire.SessionNote{}), false
			}
			if ex.NotDelivered {
				giveBack()
				return wire.Exit{}, true
			}
			if ex.Session == nil {
				ex.Session = &wire.SessionNote{}
			}
			return ex, false
		}
	}
}

// serverHelloWait bounds the wait for the session server to take a
// request; signalWait the wait for a run's end after hsbx's Signal (less
// than channel.KillWait, so hsbx hears of it).
const (
	serverHelloWait = 10 * time.Second
	signalWait      = 4 * time.Second
)

// dialServer connects to the session server of base.
func dialServer(base string) (*net.UnixConn, error) {
	sock, f, err := shortSock(base, serverSock)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
}

// ensureServer connects to the session server of base, starting it
// first when it is not there. Agents starting one take base's lock,
// within a bound: a stuck holder of it gives an error, never a wait
// without end. stop, closed, gives up.
// sessionUser is the user a session server of another user's runs as.
type sessionUser struct {
	cred *syscall.Credential
	home string
}

func ensureServer(base string, stop *fwdQueue, as *sessionUser) (*net.UnixConn, error) {
	if c, err := dialServer(base); err == nil {
		return c, nil
	}
	lock, err := os.OpenFile(filepath.Join(base, serverLock), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("another process has been starting it for 30s")
		}
		if stop.isClosed() {
			return nil, errors.New("interrupted")
		}
	}
	if c, err := dialServer(base); err == nil {
		return c, nil
	}
	logf, err := os.OpenFile(filepath.Join(base, serverLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		logf.Close()
		return nil, err
	}
	// This very binary, whatever is at its path now (another host may
	// be installing an agent there).
	self := "/proc/self/exe"
	attr := &os.ProcAttr{Files: []*os.File{null, null, logf}, Sys: &syscall.SysProcAttr{Setsid: true}}
	if as != nil {
		// Another user's server: it runs as them, with their HOME, and
		// its lock and log are theirs (their own agent may start it next).
		attr.Sys.Credential = as.cred
		attr.Env = mergeEnv(os.Environ(), []string{"HOME=" + as.home})
		_ = lock.Chown(int(as.cred.Uid), int(as.cred.Gid))
		_ = logf.Chown(int(as.cred.Uid), int(as.cred.Gid))
	}
	p, err := os.StartProcess(self, append([]string{self}, agentapi.SessionServer{Base: base}.Args()...), attr)
	logf.Close()
	null.Close()
	if err != nil {
		return nil, fmt.Errorf("starting it: %w", err)
	}
	exited := make(chan struct{})
	go func() { _, _ = p.Wait(); close(exited) }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := dialServer(base); err == nil {
			return c, nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(base, serverLog))
			msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "hsbx agent: "))
			if msg == "" {
				msg = "it exited at once"
			}
			return nil, errors.New(clipLine(msg))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			return nil, errors.New("it did not start within 20s")
		}
		if stop.isClosed() {
			return nil, errors.New("interrupted")
		}
	}
}

// serverCall sends one request to a running session server (never
// starts one) and returns its stdout (up to limit bytes) and exit, all
// within wait; taken says the server took it (its Hello).
func serverCall(base string, st wire.Start, wait time.Duration, limit int) (out []byte, ex wire.Exit, taken bool, err error) {
	c, err := dialServer(base)
	if err != nil {
		return nil, ex, false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if err := wire.NewWriter(c).WriteJSON(wire.TStart, 1, st); err != nil {
		return nil, ex, false, err
	}
	rd := wire.NewReader(c)
	for {
		f, err := rd.Read()
		if err != nil {
			return out, ex, taken, err
		}
		switch f.Type {
		case wire.THello:
			taken = true
		case wire.TStdout:
			if len(out)+len(f.Payload) > limit {
				return out, ex, taken, fmt.Errorf("its answer is over %d bytes", limit)
			}
			out = append(out, f.Payload...)
		case wire.TExit:
			err := wire.Decode(f, &ex)
			return out, ex, taken, err
		}
	}
}

// closeSession ends the session's shell and forgets it.
func (a *agent) closeSession(id uint32, base, name string) wire.Exit {
	for try := 0; ; try++ {
		_, ex, taken, err := serverCall(base, wire.Start{Op: wire.SessionOpClose, Session: name}, 10*time.Second, 0)
		switch {
		case err == nil && ex.Code == 0:
			return wire.Exit{Code: 0}
		case err == nil || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
			return a.opFail(id, name, 1, errors.New("no such session"))
		case !taken && try < 20:
			time.Sleep(10 * time.Millisecond) // a server that was leaving
			continue
		}
		return a.opFail(id, name, 125, fmt.Errorf("the session server did not close it: %w", err))
	}
}

// listSessionsWait bounds a listing, however the server answers.
const listSessionsWait = 5 * time.Second

// listSessions writes one wire.SessionInfo a line for each live session.
func (a *agent) listSessions(id uint32, base string) wire.Exit {
	out, ex, taken, err := serverCall(base, wire.Start{Op: wire.SessionOpList}, listSessionsWait, 16<<20)
	switch {
	case !taken && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF)):
		return wire.Exit{Code: 0} // no server: no session
	case err != nil:
		return a.opFail(id, "", 125, fmt.Errorf("listing sessions: the session server did not answer within %s: %w", listSessionsWait, err))
	case ex.Code != 0:
		return a.opFail(id, "", 125, fmt.Errorf("listing sessions: the session server exited %d", ex.Code))
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var info wire.SessionInfo
		if len(line) == 0 || json.Unmarshal(line, &info) != nil || !wire.ValidSessionName(info.Name) {
			continue
		}
		b, _ := json.Marshal(info)
		if a.w.Write(wire.TStdout, id, append(b, '\n')) != nil {
			break
		}
	}
	return wire.Exit{Code: 0}
}
