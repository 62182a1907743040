// Package wire is the framed, multiplexed protocol hsbx speaks with its
// agent inside a sandbox (over the engine's exec stdio) and with the
// holder that keeps that channel open (over a unix socket). A frame is a
// 9-byte header — type, stream id, payload length — and a bounded payload;
// control payloads are JSON, data payloads raw bytes. Nothing a peer sends
// is trusted: frames longer than MaxPayload and unknown types are errors.
package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Proto is the protocol version both ends must speak (Hello.Proto).
// 2 added Ping and Pong (a peer of another version is refused at hello);
// 3 added sessions (Start.Session, Exit.Session); 4 added Start.User (an
// agent of 3 would ignore it and run the command as its own user).
const Proto = 4

// MaxPayload bounds a frame's payload; a peer announcing more is broken.
const MaxPayload = 1 << 20

// Chunk is the most data one frame carries. Each hop of the channel
// (agent, engine client, holder, hsbx) costs a system call per frame, and
// system calls, not bytes, are what a large output pays for (measured:
// 32 KiB frames moved 300 MB at a third of the raw exec's rate).
const Chunk = 128 << 10

// Window is how many bytes of a command's output may be in flight (sent
// by the agent, not yet credited back by the host) for one stream. The
// host holds at most this much of one command's output whatever the
// sandbox does.
const Window = 1 << 20

// InputWindow is the same for a command's stdin, host to agent. Credit
// for input comes back through every hop of the engine's exec stream, a
// longer way round than output's (docker's stdin passes its client, the
// daemon, a FIFO and the shim): with Window, 50 MB of `exec -i` moved at
// 2.7x the raw exec's time on docker, at 4 MiB 1.45x, at 8 MiB no better.
// The agent, inside the sandbox, is the side that holds it.
const InputWindow = 4 << 20

// CreditBatch is how much consumed data a receiver gathers before it
// returns credit: one credit frame per this many bytes instead of one per
// chunk, each of which crosses every hop back. Less than Window, so a
// sender waiting for credit always gets it.
const CreditBatch = Window / 4

// Type is a frame's kind.
type Type uint8

// Frame types. Stream 0 is the connection itself (Hello, Shutdown).
const (
	THello    Type = 1  // Hello, both ways, first frame
	TStart    Type = 2  // Start: run a process as this stream
	TStdin    Type = 3  // data for the process's stdin
	TStdinEOF Type = 4  // the process's stdin is closed
	TStdout   Type = 5  // data from the process's stdout
	TStderr   Type = 6  // data from the process's stderr
	TSignal   Type = 7  // one byte: signal the process's group and marked processes
	TExit     Type = 8  // Exit: the stream is over
	TCredit   Type = 9  // 4 bytes: the receiver consumed that much data
	TShutdown Type = 10 // ask a holder to end its channel and exit; its answer: it takes no command now
	TPing     Type = 11 // stream 0: answer with Pong, same payload (liveness)
	TPong     Type = 12 // stream 0: the answer to a Ping
	maxType   Type = TPong
)

func (t Type) String() string {
	names := [...]string{"", "hello", "start", "stdin", "stdin-eof", "stdout", "stderr", "signal", "exit", "credit", "shutdown", "ping", "pong"}
	if t >= 1 && t <= maxType {
		return names[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Frame is one protocol unit.
type Frame struct {
	Type    Type
	Stream  uint32
	Payload []byte
}

// Hello opens a connection in both directions.
type Hello struct {
	Proto int    `json:"proto"`
	Build string `json:"build,omitempty"` // the agent binary's build identity
	// Down (holder → client) says the holder's channel is not usable:
	// the client runs its command the plain way.
	Down bool `json:"down,omitempty"`
	// DeadAfterMS (hsbx → agent) promises a frame at least every
	// DeadAfterMS/6 milliseconds (pings when there is nothing else): an
	// agent that hears nothing for DeadAfterMS takes hsbx for gone — an
	// engine restarted under a live-restore daemon leaves it running with
	// nobody on the other end — and kills what it runs and exits. 0 (an
	// older hsbx) promises nothing.
	DeadAfterMS int64 `json:"dead_after_ms,omitempty"`
	// AgentSinceMS (holder → client) is when the holder's agent answered
	// (unix milliseconds; 0 from an older holder).
	AgentSinceMS int64 `json:"agent_since_ms,omitempty"`
}

// Start asks for a process.
type Start struct {
	Argv []string `json:"argv"`
	// Env is added to (and overrides) the agent's own environment, which
	// is what a plain exec in the sandbox would see.
	Env []string `json:"env,omitempty"`
	Dir string   `json:"dir,omitempty"`
	// Stdin false: the process gets an empty stdin (as exec without -i).
	Stdin bool `json:"stdin,omitempty"`
	// Marker is a "NAME=token" the process and its children carry, so
	// Signal reaches processes that left the process group.
	Marker string `json:"marker,omitempty"`
	// FDs (client → holder) names the streams, "stdout" and "stderr", of
	// the files the client passed with this frame (SCM_RIGHTS, in this
	// order): the holder writes that output to them itself instead of
	// sending it back in frames. A holder that took none sends frames.
	FDs []string `json:"fds,omitempty"`
	// Session names a persistent shell in the sandbox: Script runs in
	// it (Argv is empty), or Op acts on it. See SessionOp*.
	Session string `json:"session,omitempty"`
	Script  string `json:"script,omitempty"`
	Op      string `json:"op,omitempty"`
	// SessionIdleMS ends a session that ran nothing for this long (0: the
	// agent's default); taken when the session is made.
	SessionIdleMS int64 `json:"session_idle_ms,omitempty"`
	// User runs the process as this user of the sandbox ("name", "uid",
	// "name:group", "uid:gid"; the engine's --user): the agent looks it up
	// in the sandbox's /etc/passwd and /etc/group, as the engine does.
	User string `json:"user,omitempty"`
}

// Session operations (Start.Op). Run (""): Script in Session's shell,
// made if need be. Close: end Session's shell (exit 0; 1 if there was
// none). List: one SessionInfo a line, as JSON, on stdout. Inside the
// sandbox the agent sends them on to its user's session server, which
// first answers with a Hello: it took the request (without one, nothing
// ran, and the agent may try again).
const (
	SessionOpRun   = ""
	SessionOpClose = "close"
	SessionOpList  = "list"
)

// Egress relay operations (Start.Op), answered by the agent itself (not
// a session server). Listen (Script: the loopback address, "127.0.0.1:PORT")
// accepts connections there for as long as the stream runs and announces
// each as a line "ID\n" on stdout; a stream that cannot listen exits 1
// with the reason on stderr (exit 3: the address is in use). Conn (Script:
// an announced ID) is that connection as a stream: stdin to it, its bytes
// as stdout, stdin's end a half close; a connection nobody claims within
// EgressClaimWait is closed.
const (
	EgressOpListen = "egress-listen"
	EgressOpConn   = "egress-conn"
)

// EgressEOF is the conn stream's stderr once the sandbox's side has
// ended its data (a half close), ahead of the exit that waits for hsbx's.
const EgressEOF = "eof"

// EgressClaimWait is how long the agent keeps an announced connection
// for hsbx to claim.
const EgressClaimWait = 30 * time.Second

// EgressInUse is the listen stream's exit code when the address is taken
// (another channel's agent relays for this sandbox).
const EgressInUse = 3

// SessionNote (in Exit, for a session run) says which shell ran the
// script and what became of the one before.
type SessionNote struct {
	ID string `json:"id"` // the shell's identity: a new one means fresh state
	// New: this run made the shell. Reset then says why an earlier one of
	// the same name is gone, when the sandbox still knows ("" if it does
	// not: the first, or the sandbox restarted).
	New   bool   `json:"new,omitempty"`
	Reset string `json:"reset,omitempty"`
	// Ended: the script ended the shell (exit, exec, set -e, a signal),
	// or it could not be interrupted; the next run makes a new one.
	Ended string `json:"ended,omitempty"`
}

// SessionInfo describes one session (SessionOpList).
type SessionInfo struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Shell    string `json:"shell"`
	PID      int    `json:"pid"`           // the shell's, in the sandbox
	Cwd      string `json:"cwd,omitempty"` // the shell's working directory
	Busy     bool   `json:"busy"`          // a script is running
	Created  int64  `json:"created_ms"`    // unix milliseconds
	LastUsed int64  `json:"last_used_ms"`  // unix milliseconds
	IdleMS   int64  `json:"idle_limit_ms"` // it ends after this long unused
}

// Exit ends a stream.
type Exit struct {
	Code int `json:"code"`
	// Killed counts the processes a Signal reached.
	Killed int `json:"killed,omitempty"`
	// Error says the stream failed outside the command (the channel
	// broke, the agent could not run it); Code is then meaningless.
	Error string `json:"error,omitempty"`
	// NotDelivered (holder → client) says the Start never reached the
	// agent: the client may run the command another way.
	NotDelivered bool `json:"not_delivered,omitempty"`
	// WriteFailed (holder → client) names the stream whose passed file
	// could not be written (WriteError says why; BrokenPipe: its reader
	// went away): the holder stopped the command.
	WriteFailed string `json:"write_failed,omitempty"`
	WriteError  string `json:"write_error,omitempty"`
	BrokenPipe  bool   `json:"broken_pipe,omitempty"`
	// Session reports on the shell a session run used.
	Session *SessionNote `json:"session,omitempty"`
	// Failed: hsbx's own machinery could not run what was asked (the
	// command could not start for want of a resource; a session's server
	// or shell could not start, or went away), not the command: why, in
	// the agent's words, and Code is hsbx's. What was asked did not run
	// (a session's script may have run part-way when Session.Ended is set
	// too). Exhausted: for want of processes, memory, descriptors or
	// disk; NoShell: a session asked of an image with no shell; NoUser:
	// the user asked for is not there.
	Failed    string `json:"failed,omitempty"`
	Exhausted bool   `json:"exhausted,omitempty"`
	NoShell   bool   `json:"no_shell,omitempty"`
	// NoUser: Start.User is not a user (or group) of the sandbox, or the
	// agent may not become it; Failed says which.
	NoUser bool `json:"no_user,omitempty"`
	// The bytes the holder delivered of the command's output and sent of
	// its input (holder → client), for the record of what ran.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	StdinBytes  int64 `json:"stdin_bytes,omitempty"`
}

// ErrTooLarge is returned for a frame whose payload exceeds MaxPayload.
var ErrTooLarge = errors.New("frame payload too large")

const headerLen = 9

// Reader reads frames.
type Reader struct {
	r *bufio.Reader
	// partial is when the header of a frame whose payload has not all
	// arrived was read (unix nanoseconds; 0 between frames).
	partial atomic.Int64
	pool    bool // PoolPayloads
}

// PartialSince is when the frame being read began arriving, while its
// payload has not all arrived (zero between frames): a peer that stops
// half-way through a frame shows here.
func (r *Reader) PartialSince() time.Time {
	if n := r.partial.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, 64<<10) }

// NewReaderSize reads frames from r through a buffer of size bytes.
func NewReaderSize(r io.Reader, size int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, size)}
}

// Read returns the next frame. Its payload is a fresh slice the caller
// owns. io.EOF only at a frame boundary; a cut frame is io.ErrUnexpectedEOF.
func (r *Reader) Read() (Frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: Type(h[0]), Stream: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	if f.Type == 0 || f.Type > maxType {
		return Frame{}, fmt.Errorf("unknown frame type %d", h[0])
	}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, n, MaxPayload)
	}
	if n > 0 {
		if r.pool && pooled(f.Type, int(n)) {
			f.Payload = getPayload(int(n))
		} else {
			f.Payload = make([]byte, n)
		}
		if r.r.Buffered() < int(n) {
			r.partial.Store(time.Now().UnixNano())
			defer r.partial.Store(0)
		}
		if _, err := io.ReadFull(r.r, f.Payload); err != nil {
			Release(f.Payload)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}

// Writer writes whole frames; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewWriter writes frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write sends one frame in one write. After a failed write every later
// one fails with the same error.
func (w *Writer) Write(t Type, stream uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return ErrTooLarge
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf = append(w.buf[:0], byte(t), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(w.buf[1:5], stream)
	binary.BigEndian.PutUint32(w.buf[5:9], uint32(len(payload)))
	w.buf = append(w.buf, payload...)
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = err
		return err
	}
	if cap(w.buf) > 4*Chunk {
		w.buf = nil
	}
	return nil
}

// WriteJSON sends a control frame.
func (w *Writer) WriteJSON(t Type, stream uint32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return w.Write(t, stream, b)
}

// Credit encodes a credit frame's payload.
func Credit(n int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// ParseCredit decodes a credit payload.
func ParseCredit(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("credit frame of %d bytes, want 4", len(p))
	}
	n := binary.BigEndian.Uint32(p)
	if n > max(Window, InputWindow) {
		return 0, fmt.Errorf("credit of %d bytes exceeds the window", n)
	}
	return int(n), nil
}

// Decode parses a control payload into v, strictly.
func Decode(f Frame, v any) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("bad %s frame: %w", f.Type, err)
	}
	return nil
}
