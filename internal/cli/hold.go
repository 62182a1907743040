package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/agentbin"
	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
)

// HoldCmd is the exec channel's holder: started by `hsbx exec` (fully
// detached), it keeps the channel to one sandbox's agent open behind a
// unix socket until it is idle, the sandbox stops, or stop/down end it.
// What it serves comes in the environment (holdVar), not on its argv,
// which every user on the host can read.
type HoldCmd struct{}

// holdVar carries a holder's spec (JSON) from the exec that starts it.
const holdVar = "HSBX_HOLD"

// holdSpec is what a holder serves.
type holdSpec struct {
	Dir    string        `json:"dir"`  // the socket directory (re-checked by the holder)
	Name   string        `json:"name"` // the socket's name in Dir
	ID     string        `json:"id"`   // the verified container id
	User   string        `json:"user,omitempty"`
	Engine string        `json:"engine"`
	Agent  string        `json:"agent"`
	Idle   time.Duration `json:"idle"`
}

// holderLogMax is where a holder's log starts over (it appends across
// holders of one socket, so a second start never erases the first's).
const holderLogMax = 1 << 20

// Run implements the command.
func (c *HoldCmd) Run(ctx context.Context, app *App) error {
	var spec holdSpec
	if err := json.Unmarshal([]byte(app.Getenv(holdVar)), &spec); err != nil || spec.Name == "" || spec.ID == "" ||
		spec.Name != filepath.Base(spec.Name) {
		return fmt.Errorf("hold: no valid %s in the environment (hold is started by exec, not by hand): %v", holdVar, err)
	}
	// The directory is checked again here, on what this process opened:
	// the socket, lock, log and mark are named through it.
	dir, err := privdir.Open(spec.Dir, privdir.Options{Private: true})
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	defer dir.Close()
	sock := filepath.Join(dir.FDPath(), spec.Name)
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
	if lf, err := privdir.OpenFile(sock+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		if fi, err := lf.Stat(); err == nil && fi.Size() > holderLogMax {
			_ = lf.Truncate(0)
		}
		defer lf.Close()
		app.Log = newLogger(lf, "info", false)
	}
	pruneHolderFiles(dir.FDPath(), spec.Name)
	if channel.Alive(sock, time.Second) {
		clean = true
		return nil
	}
	o := app.detectOptions()
	o.Runtime, o.RuntimeSource = spec.Engine, "holder"
	rt, _, err := detect.Open(ctx, o)
	if err != nil {
		return err
	}
	conn, err := channel.Open(ctx, channel.Agent{Runtime: rt, ID: spec.ID, User: spec.User, Binary: spec.Agent, Log: app.Log})
	if err != nil {
		var ue *channel.UnavailableError
		if errors.As(err, &ue) {
			channel.MarkUnavailable(sock, ue.Reason)
		}
		app.Log.Info("holder: no channel", "error", err)
		return err
	}
	// A stale socket is replaced: its holder is gone (we hold the lock).
	ln, err := channel.Listen(sock)
	if err != nil {
		conn.Close()
		return err
	}
	_ = os.Remove(sock + ".unavailable")
	h := &channel.Holder{Conn: conn, Listener: ln, Idle: spec.Idle, Log: app.Log, Path: sock}
	app.Log.Info("holder: serving", "socket", spec.Name, "id", spec.ID, "agent", conn.Build())
	why := h.Serve(ctx)
	app.Log.Info("holder: exiting", "why", why)
	clean = conn.Err() == nil || strings.HasPrefix(why, "idle") || strings.HasPrefix(why, "asked") || strings.HasPrefix(why, "its socket")
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
var holderFileSuffixes = []string{".log", ".unavailable", ".lock"}

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
	"http_proxy", "https_proxy", "no_proxy"}

// holderEnvPrefixes keep whole families: the engines' and hsbx's own.
var holderEnvPrefixes = []string{"LC_", "XDG_", "DOCKER_", "CONTAINER_", "CONTAINERS_", "_CONTAINERS_", "HSBX_"}

// holderEnvVar names more variables a holder keeps, comma-separated, a
// trailing * for a prefix: for an engine client (a wrapper script) that
// reads variables of its own.
const holderEnvVar = "HSBX_HOLDER_ENV"

// holderEnv is env cut down to what a holder needs, plus its spec.
func holderEnv(env []string, spec holdSpec) []string {
	keep, prefixes := slices.Clone(holderEnvKeep), slices.Clone(holderEnvPrefixes)
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
		if k == holdVar || k == "HSBX_LOG_FILE" {
			continue
		}
		if slices.Contains(keep, k) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			out = append(out, kv)
		}
	}
	b, _ := json.Marshal(spec)
	return append(out, holdVar+"="+string(b))
}

// socketBase is where the CLI's holder sockets live: $XDG_RUNTIME_DIR/hsbx
// when that is safe, else $TMPDIR/hsbx-UID/hsbx. A directory another user
// could change is never used: the channel is then off, with a warning.
func (a *App) socketDir() (*privdir.Dir, error) {
	if a.sockDir != nil || a.sockErr != nil {
		return a.sockDir, a.sockErr
	}
	var errs []error
	if base := a.Getenv("XDG_RUNTIME_DIR"); base != "" {
		d, err := channel.OpenSocketDir(base)
		if err == nil {
			a.sockDir = d
			return d, nil
		}
		errs = append(errs, err)
	}
	base := ""
	if goruntime.GOOS == "windows" {
		// The holders' pipes have names of their own; their locks and logs
		// live in %LOCALAPPDATA%\hsbx, made private to this user.
		base = a.Getenv("LOCALAPPDATA")
		if base == "" {
			a.sockErr = errors.Join(append(errs, errors.New("LOCALAPPDATA is not set"))...)
			return nil, a.sockErr
		}
	} else {
		tmp := a.Getenv("TMPDIR")
		if tmp == "" {
			tmp = "/tmp"
		}
		base = filepath.Join(tmp, fmt.Sprintf("hsbx-%d", os.Getuid()))
	}
	d, err := channel.OpenSocketDir(base)
	if err == nil {
		a.sockDir = d
		return d, nil
	}
	a.sockErr = errors.Join(append(errs, err)...)
	return nil, a.sockErr
}

// channelConfig turns on the exec channel for the CLI: the agent is the
// one hsbx carries for the engine's platform (or exec_channel_agent),
// holders live in a private socket directory (socketDir), and a plain
// exec starts one (this binary, `hold`). Without a holder a CLI process
// would pay more to open a channel than its one command saves, so on a
// host where holders cannot run (see holdersRunHere) the CLI takes the
// plain path.
func (a *App) channelConfig(c *sandbox.Config) {
	c.BeforeStart = a.Env.awaitReady
	c.Channel, c.Agent, c.Holders = false, "", channel.Holders{}
	if !a.Cfg.ExecChannel.Value || !holdersRunHere() {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	dir, err := a.socketDir()
	if err == nil {
		err = channel.SocketPathFits(dir.FDPath())
	}
	if err != nil {
		a.warnChannelOff(err)
		return
	}
	agentBin := a.Cfg.ExecChannelAgent.Value // "": the agent hsbx carries
	c.Channel, c.Agent, c.Holders.Dir = true, agentBin, dir.FDPath()
	c.Holders.Start = func(h channel.HolderSpec) {
		if why, ok := channel.UnavailableReason(h.Socket); ok {
			a.Log.Debug("exec channel unavailable here; not starting a holder", "why", why)
			return
		}
		spec := holdSpec{Dir: dir.Path(), Name: filepath.Base(h.Socket), ID: h.ID, User: h.User,
			Engine: c.Runtime.Binary(), Agent: agentBin, Idle: a.Cfg.ExecChannelIdle.Value}
		// A flag first: a binary that is not hsbx (a Go test binary
		// embedding the CLI) stops at it instead of running its own main.
		argv := []string{self, "--log-level", "info", "hold"}
		if _, err := proc.StartDetached(argv, holderEnv(a.Env.Environ, spec)); err != nil {
			a.Log.Debug("starting the exec channel holder failed", "error", err)
		}
	}
}

// holdersRunHere: the CLI's holders listen on a unix socket whose peers
// are checked by the kernel's credentials — Linux (SO_PEERCRED) and macOS
// (LOCAL_PEERCRED) — or, on Windows, on a named pipe whose peers' process
// tokens are checked (channel.Listen).
func holdersRunHere() bool {
	return goruntime.GOOS == "linux" || goruntime.GOOS == "darwin" || goruntime.GOOS == "windows"
}

// warnChannelOff says once why the exec channel is off: a socket
// directory another user could change is a reason to say so loudly.
func (a *App) warnChannelOff(err error) {
	if a.sockWarned {
		return
	}
	a.sockWarned = true
	var ue *privdir.UnsafeError
	if errors.As(err, &ue) {
		if a.G.JSON {
			a.warn(fmt.Sprintf("the exec channel is off (commands take the plain engine path): %s; hint: %s", err, ue.Hint()))
			return
		}
		fmt.Fprintf(a.Env.Stderr, "hsbx: warning: the exec channel is off (commands take the plain engine path): %s\n  hint: %s\n",
			safe(err.Error()), safe(ue.Hint()))
		return
	}
	a.Log.Debug("exec channel off: no usable socket directory", "error", err)
}

// channelVerdict says whether the exec channel can work here (doctor).
func (a *App) channelVerdict() string {
	var c sandbox.Config
	if !a.Cfg.ExecChannel.Value {
		return "off (exec_channel = false)"
	}
	if !holdersRunHere() {
		return "unavailable: the CLI's exec channel needs a Linux, macOS or Windows host (no peer-checked socket on " + goruntime.GOOS + "; the Go package has the channel there)"
	}
	dir, err := a.socketDir()
	if err == nil {
		err = channel.SocketPathFits(dir.FDPath())
	}
	if err != nil {
		return "unavailable: " + err.Error()
	}
	a.channelConfig(&c)
	switch {
	case !c.Channel:
		return "unavailable: hsbx cannot find its own binary (it starts the holders)"
	case c.Agent == "":
		return fmt.Sprintf("on (the agent hsbx carries, for %s; holders in %s)", strings.Join(agentbin.Platforms(), ", "), a.sockDir.Path())
	}
	if err := channel.CheckBinary(c.Agent, "linux/"+goruntime.GOARCH); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("on (agent %s; holders in %s)", c.Agent, a.sockDir.Path())
}
