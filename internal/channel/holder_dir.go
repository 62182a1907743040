package channel

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// unavailableFor is how long a holder's verdict that the agent cannot run
// in a sandbox stops hsbx from trying again.
const unavailableFor = 10 * time.Minute

// MarkUnavailable records why no holder can serve socket's sandbox (in
// the socket's checked directory, never through a link).
func MarkUnavailable(socket, reason string) {
	f, err := privdir.OpenFile(socket+".unavailable", os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Truncate(0) == nil {
		_, _ = f.WriteString(reason)
	}
}

// UnavailableReason is a recent MarkUnavailable verdict for socket.
func UnavailableReason(socket string) (string, bool) {
	f, err := privdir.OpenFile(socket+".unavailable", os.O_RDONLY, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || time.Since(fi.ModTime()) > unavailableFor {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}
