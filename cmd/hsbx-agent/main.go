// Command hsbx-agent is the exec channel's agent on its own: what hsbx
// copies into a sandbox and runs there as `/.hsbx-agent-<digest> agent`,
// speaking the channel's protocol on its stdin and stdout. hsbx carries
// it built for linux/amd64 and linux/arm64 (internal/agentbin, made by
// `make agents`), so every build of hsbx and every program embedding its
// Go package has an agent for the engine, however it was itself built.
package main

import (
	"os"
	"strconv"

	"github.com/hsbx/hsbx/internal/agent"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "kill-marked" {
		// A plain exec of this binary, for a sandbox without a shell:
		// kill what carries the marker, print how many.
		os.Stdout.WriteString(strconv.Itoa(agent.KillMarked(os.Args[2])) + "\n")
		return
	}
	if len(os.Args) != 2 || os.Args[1] != "agent" {
		os.Stderr.WriteString("usage: hsbx-agent agent | hsbx-agent kill-marked NAME=TOKEN (run by hsbx inside a sandbox)\n")
		os.Exit(2)
	}
	if err := agent.Serve(os.Stdin, os.Stdout, "hsbx-agent"); err != nil {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
		os.Exit(1)
	}
}
