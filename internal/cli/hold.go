package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/agentbin"
	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/privdir"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
)

// HoldCmd is the exec channel's holder process (channel.Hold): started
// by `hsbx exec`, fully detached, with what it serves in its environment
// (channel.HoldVar), never on its argv.
type HoldCmd struct{}

// Run implements the command.
func (c *HoldCmd) Run(ctx context.Context, app *App) error {
	spec, err := channel.ReadHoldSpec(app.Getenv(channel.HoldVar))
	if err != nil {
		return fmt.Errorf("hold: %w (hold is started by exec, not by hand)", err)
	}
	err = channel.Hold(ctx, spec, channel.HoldOptions{
		OpenRuntime: func(ctx context.Context, binary string) (runtime.Runtime, error) {
			o := app.detectOptions()
			o.Runtime, o.RuntimeSource = binary, "holder"
			rt, _, err := detect.Open(ctx, o)
			return rt, err
		},
		Logger: func(w io.Writer) *slog.Logger {
			app.Log = newLogger(w, "info", false)
			return app.Log
		},
	})
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	return nil
}

// socketDir is the CLI's holder socket directory (channel.OpenHolderDir),
// opened once per process.
func (a *App) socketDir() (*privdir.Dir, error) {
	if a.sockDir == nil && a.sockErr == nil {
		a.sockDir, a.sockErr = channel.OpenHolderDir(a.Getenv)
	}
	return a.sockDir, a.sockErr
}

// wiring is the CLI's own wiring of the library: its exec channel's
// holders in a private socket directory (socketDir), started as this
// binary's `hold`, and its words for remedies.
// Without a holder a CLI process would pay more to open a channel than
// its one command saves, so on a host where holders cannot run (see
// holdersRunHere), or with no socket directory, the wiring has no holders
// and the CLI takes the plain path.
func (a *App) wiring() *hsbx.CommandWiring {
	w := &hsbx.CommandWiring{Remedies: cliRemedy}
	if !a.Cfg.ExecChannel.Value || !holdersRunHere() {
		return w
	}
	self, err := os.Executable()
	if err != nil {
		return w
	}
	dir, err := a.socketDir()
	if err == nil {
		err = channel.SocketPathFits(dir.FDPath())
	}
	if err != nil {
		a.warnChannelOff(err)
		return w
	}
	// A flag first: a binary that is not hsbx (a Go test binary embedding
	// the CLI) stops at it instead of running its own main.
	w.Holders = channel.Holders{Dir: dir.FDPath(), DirPath: dir.Path(), Command: []string{self, "--log-level", "info", "hold"},
		Environ: a.Env.Environ, Agent: a.Cfg.ExecChannelAgent.Value, Idle: a.Cfg.ExecChannelIdle.Value, Log: a.Log}
	return w
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
	h := a.wiring().Holders
	switch {
	case !h.On():
		return "unavailable: hsbx cannot find its own binary (it starts the holders)"
	case h.Agent == "":
		return fmt.Sprintf("on (the agent hsbx carries, for %s; holders in %s)", strings.Join(agentbin.Platforms(), ", "), a.sockDir.Path())
	}
	if err := channel.CheckBinary(h.Agent, "linux/"+goruntime.GOARCH); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("on (agent %s; holders in %s)", h.Agent, a.sockDir.Path())
}
