package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/filelock"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/sandbox"
)

// HoldCmd is the exec channel's holder: started by `hsbx exec` (fully
// detached), it keeps the channel to one sandbox's agent open behind a
// unix socket until it is idle, the sandbox stops, or stop/down end it.
type HoldCmd struct {
	Socket string        `required:"" help:"Socket to listen on." placeholder:"PATH"`
	ID     string        `required:"" help:"Verified container id of the sandbox." placeholder:"ID"`
	User   string        `help:"exec --user for the agent." placeholder:"UID:GID"`
	Engine string        `required:"" help:"Engine CLI binary." placeholder:"PATH"`
	Agent  string        `required:"" help:"Agent binary (a static Linux hsbx)." placeholder:"PATH"`
	Idle   time.Duration `default:"10m" help:"Exit after this long without a command." placeholder:"DUR"`
}

// Run implements the command.
func (c *HoldCmd) Run(ctx context.Context, app *App) error {
	// Another holder may be starting, serving, or ending because its
	// socket was removed (it notices within a second): wait that long.
	var release func()
	for deadline := time.Now().Add(3 * time.Second); ; {
		r, ok, err := filelock.TryExclusive(c.Socket + ".lock")
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
	defer release()
	if channel.Alive(c.Socket, time.Second) {
		return nil
	}
	o := app.detectOptions()
	o.Runtime, o.RuntimeSource = c.Engine, "holder"
	rt, _, err := detect.Open(ctx, o)
	if err != nil {
		return err
	}
	conn, err := channel.Open(ctx, channel.Agent{Runtime: rt, ID: c.ID, User: c.User, Binary: c.Agent, Log: app.Log})
	if err != nil {
		var ue *channel.UnavailableError
		if errors.As(err, &ue) {
			channel.MarkUnavailable(c.Socket, ue.Reason)
		}
		app.Log.Info("holder: no channel", "error", err)
		return err
	}
	_ = os.Remove(c.Socket) // stale: its holder is gone (we hold the lock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.Socket, Net: "unix"})
	if err != nil {
		conn.Close()
		return err
	}
	_ = os.Chmod(c.Socket, 0o600)
	_ = os.Remove(c.Socket + ".unavailable")
	h := &channel.Holder{Conn: conn, Listener: ln, Idle: c.Idle, Log: app.Log, Path: c.Socket}
	app.Log.Info("holder: serving", "socket", c.Socket, "id", c.ID, "agent", conn.Build())
	why := h.Serve(ctx)
	app.Log.Info("holder: exiting", "why", why)
	return nil
}

// channelConfig turns on the exec channel for the CLI: this binary is the
// agent, holders live under $XDG_RUNTIME_DIR/hsbx (or a 0700 directory of
// this user under the temp dir), and a plain exec starts one.
func (a *App) channelConfig(c *sandbox.Config) {
	c.Agent, c.HolderDir, c.StartHolder = "", "", nil
	if !a.Cfg.ExecChannel.Value || goruntime.GOOS != "linux" {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	base := a.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("hsbx-%d", os.Getuid()))
		_ = os.Mkdir(base, 0o700)
	}
	dir, err := channel.SocketDir(base)
	if err != nil || len(dir)+30 > 104 { // sun_path holds 108 bytes
		a.Log.Debug("exec channel off: no usable socket directory", "dir", base, "error", err)
		return
	}
	agentBin := self
	if a.Cfg.ExecChannelAgent.Value != "" {
		agentBin = a.Cfg.ExecChannelAgent.Value
	}
	c.Agent, c.HolderDir = agentBin, dir
	c.StartHolder = func(h sandbox.HolderSpec) {
		if why, ok := channel.UnavailableReason(h.Socket); ok {
			a.Log.Debug("exec channel unavailable here; not starting a holder", "why", why)
			return
		}
		argv := []string{self, "--log-level", "info", "hold", "--socket", h.Socket, "--id", h.ID,
			"--engine", c.Runtime.Binary(), "--agent", agentBin, "--idle", a.Cfg.ExecChannelIdle.Value.String()}
		if h.User != "" {
			argv = append(argv, "--user", h.User)
		}
		env := append(withoutVar(a.Env.Environ, "HSBX_LOG_FILE"), "HSBX_LOG_FILE="+strings.TrimSuffix(h.Socket, ".sock")+".log")
		if _, err := proc.StartDetached(argv, env); err != nil {
			a.Log.Debug("starting the exec channel holder failed", "error", err)
		}
	}
}

func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// channelVerdict says whether the exec channel can work here (doctor).
func (a *App) channelVerdict() string {
	var c sandbox.Config
	if !a.Cfg.ExecChannel.Value {
		return "off (exec_channel = false)"
	}
	a.channelConfig(&c)
	if c.Agent == "" {
		return "unavailable: no Linux host or no private socket directory (see --log-level debug)"
	}
	if err := channel.CheckBinary(c.Agent); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("on (agent %s; holders in %s)", c.Agent, c.HolderDir)
}
