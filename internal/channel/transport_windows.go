//go:build windows

package channel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/hsbx/hsbx/internal/privdir"
	"golang.org/x/sys/windows"
)

// On Windows a holder listens on a named pipe, not a unix socket (AF_UNIX
// there has no peer credentials). The pipe's name is derived from the
// socket path hsbx would use (which lies in this user's private directory),
// its DACL lets only this user open it, remote clients are refused, and
// both ends check the other's process token (checkPeer): a pipe someone
// else made under that name first is never sent a command, and a server
// cannot act as the client (SECURITY_IDENTIFICATION).

// maxSocketPath: a pipe's name has a fixed length (PipeName), whatever the
// directory's.
const maxSocketPath = 1 << 15

// PipeName is the named pipe a holder for the socket path serves.
func PipeName(path string) string {
	h := sha256.Sum256([]byte(strings.ToLower(filepath.Clean(path))))
	return `\\.\pipe\hsbx-` + hex.EncodeToString(h[:16])
}

// pipeBuffer is the size of each direction's buffer in the pipe.
const pipeBuffer = 64 << 10

// Listen makes the holder's named pipe for path: the first instance is
// created with FILE_FLAG_FIRST_PIPE_INSTANCE, so a name another process
// holds fails here instead of being shared.
func Listen(path string) (net.Listener, error) {
	me, err := privdir.UserSID()
	if err != nil {
		return nil, err
	}
	sd, err := windows.SecurityDescriptorFromString("D:P(A;;GA;;;" + me.String() + ")")
	if err != nil {
		return nil, fmt.Errorf("the pipe's security descriptor: %w", err)
	}
	l := &pipeListener{name: PipeName(path), sa: &windows.SecurityAttributes{
		Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}}
	if l.next, err = l.instance(true); err != nil {
		return nil, fmt.Errorf("creating the named pipe %s: %w", l.name, err)
	}
	return l, nil
}

type pipeListener struct {
	name   string
	sa     *windows.SecurityAttributes
	mu     sync.Mutex
	next   windows.Handle // the instance a client connects to next
	closed bool
}

func (l *pipeListener) instance(first bool) (windows.Handle, error) {
	name, err := windows.UTF16PtrFromString(l.name)
	if err != nil {
		return 0, err
	}
	mode := uint32(windows.PIPE_ACCESS_DUPLEX | windows.FILE_FLAG_OVERLAPPED)
	if first {
		mode |= windows.FILE_FLAG_FIRST_PIPE_INSTANCE
	}
	return windows.CreateNamedPipe(name, mode,
		windows.PIPE_TYPE_BYTE|windows.PIPE_READMODE_BYTE|windows.PIPE_WAIT|windows.PIPE_REJECT_REMOTE_CLIENTS,
		windows.PIPE_UNLIMITED_INSTANCES, pipeBuffer, pipeBuffer, 0, l.sa)
}

// Accept waits for a client on the waiting instance, then makes the next
// one before returning (so the name never lapses while the holder serves).
func (l *pipeListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		h := l.next
		l.mu.Unlock()
		err := connectPipe(h)
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		if err != nil {
			// A client that came and went before it was seen: reuse the instance.
			_ = windows.DisconnectNamedPipe(h)
			l.mu.Unlock()
			continue
		}
		next, err := l.instance(false)
		if err != nil {
			l.mu.Unlock()
			_ = windows.CloseHandle(h)
			return nil, fmt.Errorf("creating the next instance of %s: %w", l.name, err)
		}
		l.next = next
		l.mu.Unlock()
		return newPipeConn(h, l.name, true), nil
	}
}

// connectPipe waits for a client on h (overlapped, on an event of its own
// so the runtime's completion port sees nothing until the handle is its).
func connectPipe(h windows.Handle) error {
	ev, err := windows.CreateEvent(nil, 1, 0, nil)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(ev)
	ov := &windows.Overlapped{HEvent: ev | 1} // low bit: no completion packet
	err = windows.ConnectNamedPipe(h, ov)
	switch {
	case err == nil, errors.Is(err, windows.ERROR_PIPE_CONNECTED):
		return nil
	case !errors.Is(err, windows.ERROR_IO_PENDING):
		return err
	}
	if _, err := windows.WaitForSingleObject(ev, windows.INFINITE); err != nil {
		return err
	}
	var n uint32
	err = windows.GetOverlappedResult(h, ov, &n, false)
	runtime.KeepAlive(ov)
	return err
}

// Close stops Accept (the waiting instance is cancelled and closed).
func (l *pipeListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	_ = windows.CancelIoEx(l.next, nil)
	return windows.CloseHandle(l.next)
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.name) }

type pipeAddr string

func (pipeAddr) Network() string  { return "pipe" }
func (a pipeAddr) String() string { return string(a) }

// pipeConn is one end of a connected pipe. The handle is overlapped, so
// the os.File has deadlines and blocks no thread.
type pipeConn struct {
	*os.File
	name   string
	server bool // this end is the holder's
}

func newPipeConn(h windows.Handle, name string, server bool) *pipeConn {
	return &pipeConn{File: os.NewFile(uintptr(h), name), name: name, server: server}
}

func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr(c.name) }
func (c *pipeConn) RemoteAddr() net.Addr { return pipeAddr(c.name) }

// dialSocket connects to the holder's pipe for path, waiting while every
// instance is busy until ctx ends.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	name := PipeName(path)
	p, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	for {
		h, err := windows.CreateFile(p, windows.GENERIC_READ|windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING,
			windows.FILE_FLAG_OVERLAPPED|windows.SECURITY_SQOS_PRESENT|windows.SECURITY_IDENTIFICATION, 0)
		if err == nil {
			return newPipeConn(h, name, false), nil
		}
		if !errors.Is(err, windows.ERROR_PIPE_BUSY) {
			return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: pipeAddr(name), Err: err}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// keepSocketFile: a pipe has no file to keep.
func keepSocketFile(net.Listener) {}

// checkPeer refuses a pipe whose other end runs as another user: the
// process the kernel names as the other end (client or server), its token.
func checkPeer(c net.Conn) error {
	pc, ok := c.(*pipeConn)
	if !ok {
		return errors.New("not a named pipe")
	}
	var pid uint32
	var err error
	if pc.server {
		err = windows.GetNamedPipeClientProcessId(windows.Handle(pc.Fd()), &pid)
	} else {
		err = windows.GetNamedPipeServerProcessId(windows.Handle(pc.Fd()), &pid)
	}
	if err != nil {
		return fmt.Errorf("asking for the pipe's peer: %w", err)
	}
	peer, err := processSID(pid)
	if err != nil {
		return fmt.Errorf("the pipe's peer (process %d): %w", pid, err)
	}
	me, err := privdir.UserSID()
	if err != nil {
		return err
	}
	return sameUser(peer.String(), me.String(), pid)
}

// sameUser is the verdict on a peer's SID.
func sameUser(peer, me string, pid uint32) error {
	if peer != me {
		return fmt.Errorf("the pipe's peer (process %d) runs as %s, not as this user (%s)", pid, peer, me)
	}
	return nil
}

// processSID is the user process pid runs as.
func processSID(pid uint32) (*windows.SID, error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return nil, err
	}
	defer windows.CloseHandle(h)
	var tok windows.Token
	if err := windows.OpenProcessToken(h, windows.TOKEN_QUERY, &tok); err != nil {
		return nil, err
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return nil, err
	}
	return u.User.Sid.Copy()
}
