package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/runtime"
)

// The holder process: a fully detached hsbx (`hsbx hold`) started by an
// exec, which keeps the channel to one sandbox's agent open behind a
// socket until it is idle, the sandbox stops, or stop/down end it. What
// it serves comes in its environment (HoldVar), not on its argv, which
// every user on the host can read.

// HoldVar carries a holder's HoldSpec (JSON) from the exec that starts it.
const HoldVar = "HSBX_HOLD"

// HoldSpec is what a holder process serves.
type HoldSpec struct {
	Dir    string        `json:"dir"`  // the socket directory (re-checked by the holder)
	Name   string        `json:"name"` // the socket's name in Dir
	ID     string        `json:"id"`   // the verified container id
	User   string        `json:"user,omitempty"`
	Engine string        `json:"engine"`
	Agent  string        `json:"agent"`
	Idle   time.Duration `json:"idle"`
	// Egress: the sandbox's network is allow (the policy is read from the
	// engine); EgressLog is where its relay logs.
	Egress    bool   `json:"egress,omitempty"`
	EgressLog string `json:"egress_log,omitempty"`
	// EgressState is the key's state directory (the sandbox's CA), and
	// Secrets where its brokered secrets' values are: names of
	// variables this process keeps, and files (never a value).
	EgressState string          `json:"egress_state,omitempty"`
	Secrets     []egress.Source `json:"secrets,omitempty"`
	// Asked is when the exec asked for this holder (unix nanoseconds;
	// HolderEnv sets it): a stop, down or replacement since then means it
	// does not serve.
	Asked int64 `json:"asked,omitempty"`
}

// ReadHoldSpec reads HoldVar's value.
func ReadHoldSpec(v string) (HoldSpec, error) {
	var spec HoldSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		return spec, fmt.Errorf("no valid %s in the environment: %w", HoldVar, err)
	}
	if spec.Name == "" || spec.ID == "" || spec.Name != filepath.Base(spec.Name) {
		return spec, fmt.Errorf("no valid %s in the environment: a socket name and a container id are needed", HoldVar)
	}
	return spec, nil
}

// HoldOptions are what a holder process takes from its command.
type HoldOptions struct {
	// OpenRuntime opens the engine CLI at binary, as the exec that
	// started the holder found it.
	OpenRuntime func(ctx context.Context, binary string) (runtime.Runtime, error)
	// Logger is the holder's logger, writing to w (its log file; nil when
	// it cannot be opened).
	Logger func(w io.Writer) *slog.Logger
}

// holderLogMax is where a holder's log starts over (it appends across
// holders of one socket, so a second start never erases the first's).
const holderLogMax = 1 << 20

// Hold runs a holder process for spec: it takes the socket's lock (or
// leaves it to the holder that has it), opens the channel to the agent,
// listens and serves until the holder ends. Its lock, log and marks live
// beside the socket, in the directory checked again here on what this
// process opened.
func Hold(ctx context.Context, spec HoldSpec, o HoldOptions) error {
	dir, err := privdir.Open(spec.Dir, privdir.Options{Private: true})
	if err != nil {
		return err
	}
	defer dir.Close()
	sock := filepath.Join(dir.FDPath(), spec.Name)
	asked := time.Now()
	if spec.Asked != 0 {
		asked = time.Unix(0, spec.Asked)
	}
	// Another holder may be starting, serving, or ending because its
	// socket was removed (it notices within a second): wait that long.
	var release func()
	for deadline := time.Now().Add(3 * time.Second); ; {
		r, ok, err := privdir.TryLock(sock + ".lock")
		if err != nil {
			return err
		}
		if ok {
			release = r
			break
		}
		if time.Now().After(deadline) {
			return nil // another holder serves this socket
		}
		time.Sleep(50 * time.Millisecond)
	}
	clean := false
	defer func() {
		// Removed while held: a holder waiting on the old file sees it
		// gone and locks the new one (privdir.TryLock).
		if clean {
			_ = os.Remove(sock + ".log")
		}
		_ = os.Remove(sock + ".lock")
		release()
	}()
	var logTo io.Writer
	if lf, err := privdir.OpenFile(sock+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		if fi, err := lf.Stat(); err == nil && fi.Size() > holderLogMax {
			_ = lf.Truncate(0)
		}
		defer lf.Close()
		logTo = lf
	}
	log := slog.New(slog.DiscardHandler)
	if o.Logger != nil && logTo != nil {
		log = o.Logger(logTo)
	}
	pruneHolderFiles(dir.FDPath(), spec.Name)
	if endedSince(sock, asked) || Alive(sock, time.Second) {
		clean = true
		return nil // asked to end since it was asked for, or served already
	}
	rt, err := o.OpenRuntime(ctx, spec.Engine)
	if err != nil {
		return err
	}
	conn, err := Open(ctx, Agent{Runtime: rt, ID: spec.ID, User: spec.User, Binary: spec.Agent, Log: log})
	if err != nil {
		var ue *UnavailableError
		if errors.As(err, &ue) {
			MarkUnavailable(sock, ue.Reason)
		}
		log.Info("holder: no channel", "error", err)
		return err
	}
	// A stale socket is replaced: its holder is gone (we hold the lock).
	ln, err := Listen(sock)
	if err != nil {
		conn.Close()
		return err
	}
	// A shutdown asked for while the channel opened found no socket to
	// reach: it left its mark first, so one of the two sees the other.
	if endedSince(sock, asked) {
		_ = ln.Close()
		conn.Close()
		clean = true
		return nil
	}
	_ = os.Remove(sock + ".unavailable")
	h := &Holder{Conn: conn, Listener: ln, Idle: spec.Idle, Log: log, Path: sock}
	log.Info("holder: serving", "socket", spec.Name, "id", spec.ID, "agent", conn.Build())
	// An allow-listed sandbox's relay: the holder stays while the sandbox
	// runs (a background download needs it after every hsbx has exited).
	if !spec.Egress {
		// not an allow sandbox: nothing to relay, no engine call
	} else if policy, ok, err := ReadEgressPolicy(ctx, rt, spec.ID); ok && err == nil {
		h.Idle = time.Duration(math.MaxInt64) // only the sandbox's end, stop or down end it
		log.Info("holder: relaying egress; it stays while the sandbox runs", "allow", policy.Posture.Allow)
		rctx, stopRelay := context.WithCancel(ctx)
		defer stopRelay()
		go func() {
			host := EgressHost{StateDir: spec.EgressState, Values: egress.SourceValues(spec.Secrets, os.Getenv), Declared: egress.DeclaredBy(spec.Secrets)}
			if err := ServeEgress(rctx, conn, policy, spec.EgressLog, host, log); err != nil {
				log.Info("holder: egress relay ended", "error", err)
			}
		}()
	} else if err != nil {
		log.Info("holder: no egress relay", "error", err)
	}
	why := h.Serve(ctx)
	log.Info("holder: exiting", "why", why.String())
	clean = conn.Err() == nil || why.Orderly()
	return nil
}

// pruneAfter is how old another socket's log or mark must be, with no
// holder holding its lock, to be removed by a starting holder.
const pruneAfter = 24 * time.Hour

// pruneHolderFiles removes what ended holders left in dir: the logs of
// failed channels and the marks (a holder removes its own only when it
// ends cleanly), and the lock files of killed ones. A socket's files go
// together, once the newest of them is pruneAfter old and no holder
// holds its lock.
func pruneHolderFiles(dir, self string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	newest := map[string]time.Time{}
	for _, e := range ents {
		base, ok := holderFileBase(e.Name())
		if !ok || base == self {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if t, seen := newest[base]; !seen || fi.ModTime().After(t) {
			newest[base] = fi.ModTime()
		}
	}
	for base, t := range newest {
		if time.Since(t) < pruneAfter {
			continue
		}
		p := filepath.Join(dir, base)
		release, ok, err := privdir.TryLock(p + ".lock")
		if err != nil || !ok {
			continue // a holder serves it
		}
		for _, suffix := range holderFileSuffixes {
			_ = os.Remove(p + suffix)
		}
		release()
	}
}

// holderFileSuffixes name the files a holder keeps beside its socket.
var holderFileSuffixes = []string{".log", ".unavailable", ".ended", ".lock"}

// holderFileBase is the socket name a holder's file belongs to.
func holderFileBase(name string) (string, bool) {
	for _, suffix := range holderFileSuffixes {
		if base, ok := strings.CutSuffix(name, suffix); ok && base != "" {
			return base, true
		}
	}
	return "", false
}

// holderEnvKeep are the variables a holder keeps from the exec that
// starts it: what the engine client and hsbx's settings need, nothing
// else (a command's secrets stay out of a process that lives on).
var holderEnvKeep = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "SSH_AUTH_SOCK",
	"DBUS_SESSION_BUS_ADDRESS", "REGISTRY_AUTH_FILE", "KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
	"http_proxy", "https_proxy", "no_proxy",
	// The network setting's Hermes name: with HSBX_EGRESS_ALLOW (kept as
	// hsbx's own) and without it, the holder's configuration would not
	// load ("an allow-list is set, but network is on").
	"TERMINAL_DOCKER_NETWORK",
	// The roots the secrets broker verifies hosts with (Go reads them).
	"SSL_CERT_FILE", "SSL_CERT_DIR"}

// holderEnvPrefixes keep whole families: the engines' and hsbx's own.
var holderEnvPrefixes = []string{"LC_", "XDG_", "DOCKER_", "CONTAINER_", "CONTAINERS_", "_CONTAINERS_", "HSBX_"}

// holderEnvVar names more variables a holder keeps, comma-separated, a
// trailing * for a prefix: for an engine client (a wrapper script) that
// reads variables of its own.
const holderEnvVar = "HSBX_HOLDER_ENV"

// HolderEnv is env cut down to what a holder needs, plus its spec: a
// command's secrets stay out of a process that lives on.
func HolderEnv(env []string, spec HoldSpec) []string {
	keep, prefixes := slices.Clone(holderEnvKeep), slices.Clone(holderEnvPrefixes)
	for _, src := range spec.Secrets { // the relay reads them when a request needs them
		if src.Env != "" {
			keep = append(keep, src.Env)
		}
	}
	if extra, _ := environ.Lookup(env, holderEnvVar); extra != "" {
		for _, n := range strings.Split(extra, ",") {
			if p, ok := strings.CutSuffix(strings.TrimSpace(n), "*"); ok && p != "" {
				prefixes = append(prefixes, p)
			} else if n = strings.TrimSpace(n); n != "" {
				keep = append(keep, n)
			}
		}
	}
	out := make([]string, 0, 16)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == HoldVar || k == "HSBX_LOG_FILE" {
			continue
		}
		if slices.Contains(keep, k) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			out = append(out, kv)
		}
	}
	if spec.Asked == 0 {
		spec.Asked = time.Now().UnixNano()
	}
	b, _ := json.Marshal(spec)
	return append(out, HoldVar+"="+string(b))
}

// OpenHolderDir opens the directory of the CLI's holder sockets:
// $XDG_RUNTIME_DIR/hsbx when that is safe, else $TMPDIR/hsbx-UID/hsbx
// (on Windows %LOCALAPPDATA%\hsbx, where the pipes' locks and logs live).
// A directory another user could change is never used: the error says
// why, for every place tried.
func OpenHolderDir(getenv func(string) string) (*privdir.Dir, error) {
	var errs []error
	if base := getenv("XDG_RUNTIME_DIR"); base != "" {
		d, err := OpenSocketDir(base)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
	}
	base := ""
	if goruntime.GOOS == "windows" {
		// The holders' pipes have names of their own; their locks and logs
		// live in %LOCALAPPDATA%\hsbx, made private to this user.
		base = getenv("LOCALAPPDATA")
		if base == "" {
			return nil, errors.Join(append(errs, errors.New("LOCALAPPDATA is not set"))...)
		}
	} else {
		tmp := getenv("TMPDIR")
		if tmp == "" {
			tmp = "/tmp"
		}
		base = filepath.Join(tmp, fmt.Sprintf("hsbx-%d", os.Getuid()))
	}
	d, err := OpenSocketDir(base)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return d, nil
}
