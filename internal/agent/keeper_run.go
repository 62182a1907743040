//go:build linux

package agent

import (
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
