//go:build linux

// Package agent is the small server hsbx runs inside a sandbox (`hsbx
// agent`, hidden): it speaks internal/wire on its stdin and stdout and runs
// the processes it is asked for, each in a process group of its own and
// marked with an environment variable, so a signal reaches the whole tree.
// It needs nothing from the image: no shell, no libc. It never listens on
// anything; when its input ends (the channel is gone) it kills what it
// started and exits.
package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// drainAfterExit is how long output is still relayed after the process
// exited, for children that keep its stdout open (`sleep 100 &`).
const drainAfterExit = time.Second

// Serve runs the agent until r ends. build names this binary (Hello).
func Serve(r io.Reader, w io.Writer, build string) error {
	// Its live data is a few buffers per command: collect garbage at a
	// quarter over it, not double, so it stays small (measured: 11 MiB
	// resident after 1,000 commands at the default, against a 10 MiB aim).
	debug.SetGCPercent(25)
	if f, ok := w.(*os.File); ok {
		// The engine's end reads this pipe a few KiB at a time: room for
		// several chunks, so a frame is written without waiting for it.
		wire.GrowPipe(f)
	}
	if f, ok := r.(*os.File); ok {
		// And input: the engine writes frames of up to a chunk into it
		// without waiting for this reader (measured with the holder's
		// side grown too: 200 MB through `exec -i` 8–15 % faster).
		wire.GrowPipe(f)
	}
	a := &agent{w: wire.NewWriter(w), streams: map[uint32]*stream{}, env: os.Environ()}
	if f, err := os.Open(os.DevNull); err == nil {
		a.devNull = f // shared by every command without input (opened once)
		defer f.Close()
	}
	if err := a.w.WriteJSON(wire.THello, 0, wire.Hello{Proto: wire.Proto, Build: build}); err != nil {
		return err
	}
	loopErr := make(chan error, 1)
	// Stdin frames come from a pool and go back to it once written to
	// the process (feed).
	go func() { loopErr <- a.loop(wire.NewReader(r).PoolPayloads()) }()
	err := a.await(loopErr)
	a.killAll()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type agent struct {
	// frames counts the frames read; deadAfter is hsbx's promise from its
	// hello (nanoseconds; 0: none).
	frames    atomic.Uint64
	deadAfter atomic.Int64

	w       *wire.Writer
	env     []string
	devNull *os.File
	mu      sync.Mutex
	streams map[uint32]*stream
	spawner spawner
	eg      egress
}

type stream struct {
	id     uint32
	proc   *child
	marker string
	out    *wire.Flow
	stdin  *wire.Queue
	credit func(n int) error // returns stdin credit to the peer
	mu     sync.Mutex
	killed int
	// fwd, for a session's stream, takes hsbx's frames to its keeper
	// (kconn, once connected).
	fwd   *fwdQueue
	kconn io.Closer
	// signalled closes on hsbx's first Signal to a session's stream.
	signalled chan struct{}
	sigOnce   sync.Once
	// onSignal, for an egress stream, ends it (it has no process).
	onSignal func()
}

// await waits for the loop to end, or for hsbx to break its promise of
// a frame at least every deadAfter/6: then nobody is on the other end
// (the engine lost the exec stream but kept the sandbox, as docker's
// live-restore does on a daemon restart) and the agent ends, killing what
// it runs. Silence is counted in ticks of this process's own clock, so a
// paused sandbox (which stops this clock too) is not taken for a silent
// hsbx when it resumes: the pings that waited in the pipe are read first.
func (a *agent) await(loopErr <-chan error) error {
	const ticks = 10
	var seen uint64
	quiet := 0
	for {
		d := time.Duration(a.deadAfter.Load())
		step := time.Second
		if d > 0 {
			step = max(d/ticks, time.Millisecond)
		}
		t := time.NewTimer(step)
		select {
		case err := <-loopErr:
			t.Stop()
			return err
		case <-t.C:
		}
		if n := a.frames.Load(); n != seen || d == 0 {
			seen, quiet = n, 0
			continue
		}
		if quiet++; quiet >= ticks {
			return fmt.Errorf("heard nothing from hsbx for %s: taking it for gone", d)
		}
	}
}

func (a *agent) loop(r *wire.Reader) error {
	helloSeen := false
	for {
		f, err := r.Read()
		if err != nil {
			return err
		}
		a.frames.Add(1)
		if !helloSeen {
			var h wire.Hello
			if f.Type != wire.THello || wire.Decode(f, &h) != nil || h.Proto != wire.Proto {
				return fmt.Errorf("peer did not open with protocol %d", wire.Proto)
			}
			if h.DeadAfterMS > 0 {
				a.deadAfter.Store(int64(time.Duration(h.DeadAfterMS) * time.Millisecond))
			}
			helloSeen = true
			continue
		}
		if f.Type == wire.TPing {
			if err := a.w.Write(wire.TPong, 0, f.Payload); err != nil {
				return err
			}
			continue
		}
		a.mu.Lock()
		s := a.streams[f.Stream]
		a.mu.Unlock()
		switch f.Type {
		case wire.TStart:
			var st wire.Start
			if err := wire.Decode(f, &st); err != nil {
				return err
			}
			if s != nil || f.Stream == 0 {
				return fmt.Errorf("stream %d started twice", f.Stream)
			}
			if st.Op == wire.EgressOpListen || st.Op == wire.EgressOpConn {
				a.startEgress(f.Stream, st)
				continue
			}
			if st.Session != "" || st.Op != "" {
				a.startSession(f.Stream, st)
				continue
			}
			a.start(f.Stream, st)
		case wire.TStdin, wire.TStdinEOF, wire.TCredit, wire.TSignal:
			if s != nil && s.fwd != nil {
				if f.Type == wire.TSignal {
					s.sigOnce.Do(func() { close(s.signalled) })
				}
				if err := s.fwd.push(f); err != nil {
					return err
				}
				continue
			}
			if err := a.streamFrame(s, f); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected %s frame", f.Type)
		}
	}
}

// streamFrame applies one of hsbx's frames to a process's stream (nil:
// the process has ended).
func (a *agent) streamFrame(s *stream, f wire.Frame) error {
	switch f.Type {
	case wire.TStdin, wire.TStdinEOF:
		if s == nil {
			return nil // the process has ended; its input is moot
		}
		if f.Type == wire.TStdinEOF {
			s.stdin.End()
		} else if err := s.stdin.Push(f.Type, f.Payload); err != nil {
			return err
		}
	case wire.TCredit:
		n, err := wire.ParseCredit(f.Payload)
		if err != nil {
			return err
		}
		if s != nil {
			if err := s.out.Give(n); err != nil {
				return err
			}
		}
	case wire.TSignal:
		if len(f.Payload) != 1 {
			return errors.New("bad signal frame")
		}
		if s != nil {
			s.signal(syscall.Signal(f.Payload[0]))
		}
	}
	return nil
}

// start runs one process; its outcome is reported on the stream.
func (a *agent) start(id uint32, st wire.Start) {
	s := &stream{id: id, out: wire.NewFlow(wire.Window), stdin: wire.NewQueue(wire.InputWindow), marker: st.Marker,
		credit: func(n int) error { return a.w.Write(wire.TCredit, id, wire.Credit(n)) }}
	env := mergeEnv(a.env, st.Env)
	if st.Marker != "" {
		env = mergeEnv(env, []string{st.Marker})
	}
	var cred *syscall.Credential
	if st.User != "" {
		u, err := lookupUser(st.User, "/etc/passwd", "/etc/group")
		if err == nil {
			cred, err = u.credential(st.User)
		}
		if err != nil {
			var nu *NoUserError
			_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: 126, Failed: err.Error(), NoUser: errors.As(err, &nu)})
			return
		}
		if !hasVar(st.Env, "HOME") {
			env = mergeEnv(env, []string{"HOME=" + u.home}) // as the engines set it
		}
	}
	path, code, err := lookPath(st.Argv, env, st.Dir)
	if err != nil {
		_ = a.w.Write(wire.TStderr, id, []byte("hsbx: "+err.Error()+"\n"))
		_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: code})
		return
	}
	// No input: /dev/null, as the engines give a command without -i
	// (and one pipe fewer to make).
	inR, inW, err1 := a.devNull, (*os.File)(nil), error(nil)
	if st.Stdin || inR == nil {
		inW, inR, err1 = childPipe(false)
	}
	outR, outW, err2 := childPipe(true)
	errR, errW, err3 := childPipe(true)
	if err := errors.Join(err1, err2, err3); err != nil {
		_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: 125, Failed: "creating pipes: " + err.Error(), Exhausted: exhausted(err)})
		return
	}
	p, err := (*child)(nil), keepRoom(commandReserve, "not started")
	if err == nil {
		p, err = a.spawner.spawn(path, st.Argv, st.Dir, env, cred, inR, outW, errW)
	}
	if inW != nil {
		inR.Close()
	}
	outW.Close()
	errW.Close()
	if err != nil {
		if inW != nil {
			inW.Close()
		}
		outR.Close()
		errR.Close()
		if exhausted(err) {
			// Not the command's fault, nor "cannot execute" (126): hsbx's,
			// told as such, and the command may be sent again later.
			_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: 125, Failed: startMessage(st, err), Exhausted: true})
			return
		}
		code := 126
		if errors.Is(err, os.ErrNotExist) && st.Dir == "" {
			code = 127
		}
		_ = a.w.Write(wire.TStderr, id, []byte("hsbx: "+startMessage(st, err)+"\n"))
		_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: code})
		return
	}
	s.proc = p
	a.mu.Lock()
	a.streams[id] = s
	a.mu.Unlock()

	switch {
	case st.Stdin:
		// A big pipe: the input arrives in chunks of up to wire.Chunk,
		// and a 64 KiB pipe takes each in two pieces and two wake-ups.
		wire.GrowPipe(inW)
		go s.feed(inW)
	case inW != nil:
		inW.Close()
	}
	// drained is closed by the second pump to end (no goroutine to wait
	// for them, no timer when they are done by the time the process is).
	drained := make(chan struct{})
	var pumping atomic.Int32
	pumping.Store(2)
	pumped := func() {
		if pumping.Add(-1) == 0 {
			close(drained)
		}
	}
	go func() { defer pumped(); a.pump(s, outR, wire.TStdout) }()
	go func() { defer pumped(); a.pump(s, errR, wire.TStderr) }()
	go func() {
		code := p.wait()
		select {
		case <-drained:
		default:
			t := time.NewTimer(drainAfterExit)
			select {
			case <-drained:
			case <-t.C:
				outR.Close() // a child keeps the pipe open: stop relaying
				errR.Close()
				s.out.Close()
				<-drained
			}
			t.Stop()
		}
		s.stdin.Close()
		a.mu.Lock()
		delete(a.streams, id)
		a.mu.Unlock()
		s.mu.Lock()
		killed := s.killed
		s.mu.Unlock()
		_ = a.w.WriteJSON(wire.TExit, id, wire.Exit{Code: code, Killed: killed})
	}()
}

// childPipe makes a pipe whose one end a child gets: blocking from the
// start, never in this process's poller (os.Pipe registers both ends and
// then StartProcess makes the child's blocking again: six system calls a
// pipe more, for every command). childWrites says which end the child
// gets: the writing one (its output) or the reading one (its input).
func childPipe(childWrites bool) (parent, child *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	p, c := fds[0], fds[1] // the parent reads, the child writes
	if !childWrites {
		p, c = c, p
	}
	if err := syscall.SetNonblock(p, true); err != nil {
		syscall.Close(p)
		syscall.Close(c)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p), "|0"), os.NewFile(uintptr(c), "|1"), nil
}

// pump relays one output pipe, within the stream's window.
func (a *agent) pump(s *stream, f *os.File, t wire.Type) {
	defer f.Close()
	r := wire.Gather(f)
	// Small until the output proves big: most commands print a few lines,
	// and 16 of them at once should not hold 4 MiB of buffers.
	buf := make([]byte, 4<<10)
	for {
		n, err := r.Read(buf)
		for off := 0; off < n; {
			c := s.out.Take(n - off)
			if c == 0 {
				return // closed: the stream is over
			}
			if a.w.Write(t, s.id, buf[off:off+c]) != nil {
				return
			}
			off += c
		}
		if err != nil {
			return
		}
		if n == len(buf) && len(buf) < wire.Chunk {
			// Big output: a bigger pipe, so the writer does not stall
			// while this reader gathers, and bigger reads.
			wire.GrowPipe(f)
			buf = make([]byte, wire.Chunk)
		}
	}
}

// feed writes the stream's stdin to the process and returns credit as it
// goes; end of data closes the pipe.
func (s *stream) feed(w *os.File) {
	defer w.Close()
	var credits wire.Credits
	for {
		_, p, ok := s.stdin.PopRun()
		if !ok {
			return
		}
		_, err := w.Write(p)
		size := len(p)
		wire.Release(p)
		if err != nil {
			s.stdin.Close() // the process stopped reading: drop the rest
			return
		}
		if n := credits.Consumed(size); n > 0 {
			_ = s.agentCredit(n)
		}
	}
}

// agentCredit is set by the agent that owns the stream (credit frames
// for stdin go back to the peer).
func (s *stream) agentCredit(n int) error {
	if s.credit == nil {
		return nil
	}
	return s.credit(n)
}

// signal sends sig to the process's group and to every process carrying
// its marker (children that left the group), counting them once.
func (s *stream) signal(sig syscall.Signal) {
	if s.onSignal != nil {
		s.onSignal()
		return
	}
	hit := map[int]bool{}
	if s.proc != nil {
		for _, pid := range groupMembers(s.proc.Pid) {
			hit[pid] = true
		}
	}
	var marked []int
	if s.marker != "" {
		marked = markedProcesses(s.marker)
		for _, pid := range marked {
			hit[pid] = true
		}
	}
	// Counted before the kill: the Exit it leads to reports the count.
	s.mu.Lock()
	s.killed = max(s.killed, len(hit))
	s.mu.Unlock()
	if s.proc != nil {
		_ = syscall.Kill(-s.proc.Pid, sig)
	}
	for _, pid := range marked {
		_ = syscall.Kill(pid, sig)
	}
}

func (a *agent) killAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.streams {
		if s.fwd != nil {
			// A session's keeper stops the script when its agent goes.
			s.mu.Lock()
			if s.kconn != nil {
				_ = s.kconn.Close()
			}
			s.mu.Unlock()
			s.fwd.close()
			continue
		}
		s.signal(syscall.SIGKILL)
		s.out.Close()
		s.stdin.Close()
	}
}
