package channel

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/wire"
)

// The holders' directory: where their sockets live, how they are named,
// and the marks a holder leaves beside its socket.

// OpenSocketDir opens (making it if needed) the directory holder sockets
// live in: base/hsbx, mode 0700, this user's, with every directory above
// it changeable by no other user — checked on the opened directories
// (internal/privdir). Keep it open while its sockets are used, and name
// them under its FDPath: they then resolve through the checked directory.
func OpenSocketDir(base string) (*privdir.Dir, error) {
	if base == "" {
		return nil, errors.New("no runtime directory")
	}
	return privdir.Open(filepath.Join(base, "hsbx"), privdir.Options{Create: true, Private: true})
}

// SocketPath names the holder socket for one sandbox channel: a digest of
// everything that decides which agent it reaches (engine binary and
// endpoint, container id, user) and of the protocol, so no two channels
// share a socket and a client never reaches a holder of another protocol
// (RunVia sends its command before the hello).
func SocketPath(dir string, parts ...string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("proto %d\x00", wire.Proto) + strings.Join(parts, "\x00")))
	return filepath.Join(dir, hex.EncodeToString(h[:])[:24]+".sock")
}

// SocketPathFits says whether holders' sockets in dir (SocketPath) fit a
// unix socket's address (maxSocketPath, per OS); macOS's long $TMPDIR can
// exceed it. On Windows the holder's pipe has a name of its own.
func SocketPathFits(dir string) error {
	if p := SocketPath(dir, ""); len(p) > maxSocketPath {
		return fmt.Errorf("the exec channel's socket path %s is %d bytes, more than a unix socket takes (%d); set XDG_RUNTIME_DIR or TMPDIR to a shorter directory", p, len(p), maxSocketPath)
	}
	return nil
}

// markEnded records that every holder of socket asked for until now is to
// end (stop, down, a replacement asked): one still queued for the
// socket's lock, or opening its channel, ends instead of serving
// (endedSince). The time is this host's wall clock.
func markEnded(socket string) {
	putMark(socket+".ended", strconv.FormatInt(time.Now().UnixNano(), 10))
}

// endedSince says whether socket's holders were asked to end at or after
// asked (the time a holder was asked for). A mark in the future (the
// clock was set back since) counts for nothing.
func endedSince(socket string, asked time.Time) bool {
	b, _, ok := readMark(socket+".ended", 32)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return false
	}
	at := time.Unix(0, n)
	return !at.Before(asked) && !at.After(time.Now())
}

// putMark writes a mark beside a socket (in its checked directory, never
// through a link), replacing what it said.
func putMark(path, content string) {
	f, err := privdir.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Truncate(0) == nil {
		_, _ = f.WriteString(content)
	}
}

// readMark reads up to limit bytes of a mark (trimmed) and when it was
// written.
func readMark(path string, limit int64) (string, time.Time, bool) {
	f, err := privdir.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return "", time.Time{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", time.Time{}, false
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return "", time.Time{}, false
	}
	return strings.TrimSpace(string(b)), fi.ModTime(), true
}

// unavailableFor is how long a holder's verdict that the agent cannot run
// in a sandbox stops hsbx from trying again.
const unavailableFor = 10 * time.Minute

// MarkUnavailable records why no holder can serve socket's sandbox (in
// the socket's checked directory, never through a link).
func MarkUnavailable(socket, reason string) {
	putMark(socket+".unavailable", reason)
}

// UnavailableReason is a recent MarkUnavailable verdict for socket.
func UnavailableReason(socket string) (string, bool) {
	why, at, ok := readMark(socket+".unavailable", 4<<10)
	if !ok || time.Since(at) > unavailableFor {
		return "", false
	}
	return why, true
}
