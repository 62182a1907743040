package agent

import (
	"os"

	"github.com/hsbx/hsbx/internal/agentapi"
	"golang.org/x/sys/unix"
)

// The agent's stdin and stdout are the exec channel. Any process of the
// same user in the sandbox could open them through /proc/PID/fd (and read
// or write its memory) while the agent is "dumpable", and so end a
// command early with a forged exit status, inject output, or wedge the
// channel with half a frame. A process that is not dumpable can be
// reached that way only with CAP_SYS_PTRACE, which hsbx's hardened
// sandbox drops (--cap-drop ALL). So the agent makes itself non-dumpable
// before anything else of it runs: in this package's init, as soon as the
// Go runtime hands over. The commands it starts are dumpable again (exec
// resets it): they are the sandbox's, not the channel's.
func init() {
	// The session server (server.go) holds the shells' pipes and its
	// agents' connections: sealed the same way.
	call, _ := agentapi.Parse(os.Args[1:])
	if ia, ok := call.(agentapi.InstallAs); ok { // its first run (modes_linux.go)
		call = ia.Then
	}
	switch call.(type) {
	case agentapi.Agent, agentapi.SessionServer:
		errSeal = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	}
}

// errSeal is why the agent could not make itself non-dumpable (nil:
// sealed, or not running as the agent).
var errSeal error

// Sealed reports whether this process is the agent and no other process
// of its user can reach its descriptors or memory.
func Sealed() bool {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return err == nil && v == 0 && errSeal == nil
}
