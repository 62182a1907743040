package channel

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
)

// Holders is how the processes of one program (the hsbx command) share a
// sandbox's exec channel: it lives in a holder process behind a unix
// socket in Dir, and any of them that finds no holder starts one (Start):
// Command, detached, told what to serve in its environment (HoldVar,
// never argv). The zero Holders has none: each process opens its own
// channel.
type Holders struct {
	// Dir is the sockets' private directory as this process opened it
	// (privdir's FDPath: every socket path is made under it); DirPath is
	// the same directory by its path, which a holder opens and checks
	// again.
	Dir, DirPath string
	// Command runs a holder (Hold, reading HoldVar): the CLI's is
	// `hsbx --log-level info hold`. None: holders are found, never
	// started.
	Command []string
	// Environ is this process's environment, of which a holder gets what
	// HolderEnv keeps.
	Environ []string
	// Agent is the agent binary holders run ("": the one hsbx carries),
	// Idle how long one lives unused.
	Agent string
	Idle  time.Duration
	Log   *slog.Logger
	// OnStart, when set, is told of each holder this process starts.
	OnStart func(HoldSpec)
}

// On says whether holders serve this program's channels.
func (h Holders) On() bool { return h.Dir != "" }

// Starts says whether this process starts holders (Start does something).
func (h Holders) Starts() bool { return h.On() && (len(h.Command) > 0 || h.OnStart != nil) }

// Start starts the holder that serves socket (a path SocketPath made
// under Dir) with spec's sandbox (its ID, User, Engine and egress
// fields); the holder's directory, name, agent and idle time are h's. It
// returns at once: the holder's exec may take a while. A socket where no
// holder can listen (UnavailableReason) gets none.
func (h Holders) Start(socket string, spec HoldSpec) {
	if why, ok := UnavailableReason(socket); ok {
		h.debug("exec channel unavailable here; not starting a holder", "why", why)
		return
	}
	spec.Dir, spec.Name, spec.Agent, spec.Idle = h.DirPath, filepath.Base(socket), h.Agent, h.Idle
	if len(h.Command) > 0 {
		if _, err := proc.StartDetached(h.Command, HolderEnv(h.Environ, spec)); err != nil {
			h.debug("starting the exec channel holder failed", "error", err)
			return
		}
	}
	if h.OnStart != nil {
		h.OnStart(spec)
	}
}

func (h Holders) debug(msg string, args ...any) {
	if h.Log != nil {
		h.Log.Debug(msg, args...)
	}
}
