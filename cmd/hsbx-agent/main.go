// Command hsbx-agent is the exec channel's agent on its own: what hsbx
// copies into a sandbox and runs there as `/.hsbx-agent-<digest> agent`,
// speaking the channel's protocol on its stdin and stdout. hsbx carries
// it built for linux/amd64 and linux/arm64 (internal/agentbin, made by
// `make agents`), so every build of hsbx and every program embedding its
// Go package has an agent for the engine, however it was itself built.
package main

import (
	"os"

	"github.com/hsbx/hsbx/internal/agent"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != "agent" {
		os.Stderr.WriteString("usage: hsbx-agent agent (run by hsbx inside a sandbox; it speaks hsbx's protocol on stdin and stdout)\n")
		os.Exit(2)
	}
	if err := agent.Serve(os.Stdin, os.Stdout, "hsbx-agent"); err != nil {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
		os.Exit(1)
	}
}
