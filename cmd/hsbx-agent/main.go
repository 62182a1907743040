// Command hsbx-agent is the exec channel's agent on its own: what hsbx
// copies into a sandbox and runs there as `/.hsbx-agent-<digest> agent`,
// speaking the channel's protocol on its stdin and stdout (and, run again
// by itself through the channel or as a plain exec, its other modes:
// kill-marked, tar-out, tar-in, copy-out, copy-in; see agent.RunMode).
// hsbx carries it built for linux/amd64 and linux/arm64
// (internal/agentbin, made by `make agents`), so every build of hsbx and
// every program embedding its Go package has an agent for the engine,
// however it was itself built.
package main

import (
	"os"

	"github.com/hsbx/hsbx/internal/agent"
)

func main() {
	code, ok := agent.RunMode(os.Args[1:], "hsbx-agent")
	if !ok {
		os.Stderr.WriteString("usage: hsbx-agent agent | kill-marked MARKER | tar-out SRC | tar-in DST | copy-out SRC BOUND | copy-in DST | file-read|file-write|file-list|file-remove|file-watch ... (run by hsbx inside a sandbox)\n")
		code = 2
	}
	os.Exit(code)
}
