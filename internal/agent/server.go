//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// The session server is one process for all of a user's sessions in the
// sandbox: this binary run as `session-server BASE`, started by the first
// agent that needs it, in a session of its own so that it outlives that
// agent (and the hsbx process and holder behind it). Each session is one
// shell it keeps (keeper.go); a session costs that shell and nothing
// else, and what it used is given back when it ends. Agents reach the
// server through a unix socket in BASE, one connection a request,
// speaking the channel's frames: the server answers each request it takes
// with a Hello first, so an agent that got none knows nothing ran. The
// server reaps its shells without a thread waiting on each, and exits
// once it has had no session and no request for a moment.

// Entries of the sessions directory (BASE) that are the server's; a
// session's own directory is BASE/NAME (names never start with '.').
const (
	serverSock = ".server.sock"
	serverLock = ".server.lock" // agents starting a server take it
	serverLog  = ".server.log"  // what the server said when it could not start
	// serverLinger is how long a server with no session and no request
	// stays before it exits.
	serverLinger = 2 * time.Second
)

type server struct {
	base string
	ln   *net.UnixListener

	mu         sync.Mutex
	sessions   map[string]*keeper
	byPid      map[int]*keeper // live shells, for the reaper
	active     int             // requests being served
	lastActive time.Time
	closing    bool
}

// ServeSessions runs the session server of base until it has had no
// session for a moment. It returns an error only when it could not start;
// agents read why from base/.server.log.
func ServeSessions(base string) error {
	s := &server{base: base, sessions: map[string]*keeper{}, byPid: map[int]*keeper{}, lastActive: time.Now()}
	if err := ownDir(base, os.Geteuid()); err != nil {
		return err
	}
	// Before any shell starts: no exit goes unseen.
	sigch := make(chan os.Signal, 1)
	signal.Notify(sigch, syscall.SIGCHLD)
	sock, dirf, err := shortSock(base, serverSock)
	if err != nil {
		return err
	}
	defer dirf.Close() // held for the socket's path
	_ = os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(true)
	s.ln = ln
	go s.accept()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-sigch:
			s.reap()
		case <-tick.C:
			s.reap() // signals coalesce; the reaper takes every exit there is
			if s.done() {
				_ = ln.Close()
				return nil
			}
		}
	}
}

func (s *server) accept() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			_ = c.Close() // no Hello: the agent starts another server
			continue
		}
		s.active++
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				s.active--
				s.lastActive = time.Now()
				s.mu.Unlock()
			}()
			s.handle(c)
		}()
	}
}

// done says the server has had no session and no request for
// serverLinger, and from now on takes none.
func (s *server) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) == 0 && s.active == 0 && time.Since(s.lastActive) > serverLinger {
		s.closing = true
	}
	return s.closing
}

// spawn starts a shell for k and registers it with the reaper before the
// reaper can look for it.
func (s *server) spawn(k *keeper, path string, argv []string, attr *os.ProcAttr) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	s.byPid[pid] = k
	_ = p.Release() // reaped below, by pid (Release sets p.Pid to -1)
	return pid, nil
}

// reap collects every shell that exited (the server's only children) and
// tells its keeper.
func (s *server) reap() {
	for {
		var ws syscall.WaitStatus
		s.mu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			s.mu.Unlock()
			return
		}
		k := s.byPid[pid]
		delete(s.byPid, pid)
		s.mu.Unlock()
		if k != nil {
			k.exited(ws)
		}
	}
}

// drop forgets k, when it is still the session of its name.
func (s *server) drop(k *keeper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[k.name] == k {
		delete(s.sessions, k.name)
	}
}

// lookup is session name's keeper once its shell is up, or nil.
func (s *server) lookup(name string) *keeper {
	s.mu.Lock()
	k := s.sessions[name]
	s.mu.Unlock()
	if k == nil {
		return nil
	}
	<-k.ready
	if k.startErr != nil {
		return nil
	}
	return k
}

// session is session name's keeper, its shell started first when it has
// none (note.New; note.Reset says why the last one ended, when the
// sandbox still knows).
func (s *server) session(name string, idle time.Duration) (*keeper, wire.SessionNote, error) {
	var note wire.SessionNote
	s.mu.Lock()
	if k := s.sessions[name]; k != nil {
		s.mu.Unlock()
		<-k.ready
		return k, note, k.startErr
	}
	dir := filepath.Join(s.base, name)
	k := newKeeper(s, dir, name, idle)
	s.sessions[name] = k
	s.mu.Unlock()
	fail := func(err error) (*keeper, wire.SessionNote, error) {
		k.startErr = err
		s.drop(k)
		close(k.ready)
		return nil, note, err
	}
	note.New = true
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fail(err)
	}
	if err := ownDir(dir, os.Geteuid()); err != nil {
		return fail(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, sessEnded)); err == nil {
		note.Reset = clipLine(strings.TrimSpace(string(b)))
	}
	ents, _ := os.ReadDir(dir) // what an ended shell's runs left
	for _, e := range ents {
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
	if err := keepRoom(sessionReserve, "no new session"); err != nil {
		return fail(err)
	}
	if err := k.start(); err != nil {
		return fail(err)
	}
	close(k.ready)
	go k.watch()
	return k, note, nil
}

// handle serves one agent's request.
func (s *server) handle(c *net.UnixConn) {
	defer c.Close()
	rd := wire.NewReader(c)
	w := wire.NewWriter(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := rd.Read()
	if err != nil || f.Type != wire.TStart {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var st wire.Start
	if wire.Decode(f, &st) != nil {
		return
	}
	if w.Write(wire.THello, 1, nil) != nil {
		return
	}
	switch st.Op {
	case wire.SessionOpList:
		s.list(w)
	case wire.SessionOpClose:
		k := s.lookup(st.Session)
		if k == nil {
			_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: 1})
			return
		}
		k.end("closed")
		<-k.shellDone
		k.finish()
		_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: 0})
	case wire.SessionOpRun:
		fail := func(code int, err error, note wire.SessionNote) {
			_ = w.WriteJSON(wire.TExit, 1, failed(code, err, note))
		}
		if !wire.ValidSessionName(st.Session) {
			fail(2, fmt.Errorf("bad session name %q", st.Session), wire.SessionNote{})
			return
		}
		k, note, err := s.session(st.Session, time.Duration(st.SessionIdleMS)*time.Millisecond)
		if err != nil {
			code := 125
			if errors.Is(err, errNoShell) {
				code = 127
			}
			fail(code, err, note)
			return
		}
		k.run(rd, w, st, note)
	default:
		_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: 2})
	}
}

// list writes one wire.SessionInfo a line for each live session.
func (s *server) list(w *wire.Writer) {
	s.mu.Lock()
	ks := make([]*keeper, 0, len(s.sessions))
	for _, k := range s.sessions {
		ks = append(ks, k)
	}
	s.mu.Unlock()
	slices.SortFunc(ks, func(a, b *keeper) int { return strings.Compare(a.name, b.name) })
	for _, k := range ks {
		select {
		case <-k.ready:
		default:
			continue // still starting
		}
		if k.startErr != nil {
			continue
		}
		b, _ := json.Marshal(k.describe())
		if w.Write(wire.TStdout, 1, append(b, '\n')) != nil {
			return
		}
	}
	_ = w.WriteJSON(wire.TExit, 1, wire.Exit{Code: 0})
}

// failed is the Exit of a run that hsbx's machinery failed (not the
// script), marked when a resource ran out.
func failed(code int, err error, note wire.SessionNote) wire.Exit {
	return wire.Exit{Code: code, Session: &note, Failed: clipLine(err.Error()), Exhausted: exhausted(err), NoShell: errors.Is(err, errNoShell)}
}

// exhausted says err is for want of processes, memory, descriptors or
// disk.
func exhausted(err error) bool {
	for _, e := range []error{syscall.EAGAIN, syscall.ENOMEM, syscall.ENOSPC, syscall.EMFILE, syscall.ENFILE, syscall.EDQUOT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
