package channel

import (
	"bytes"
	"testing"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/agentbin"
)

// The agents hsbx carries say what they can do in their bytes, which
// install reads to choose the atomic install (install-as). The compiler
// keeps no bytes of a short literal compared in code ("install-as" was
// not in the binary, so every install was in place): the marker is
// printed by the agent's features mode, so it is there whole.
func TestEmbeddedAgentsHoldTheirFeatures(t *testing.T) {
	for _, p := range agentbin.Platforms() {
		ag, err := agentbin.For(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(ag.Bytes, []byte(agentapi.AgentFeatures)) {
			t.Errorf("the %s agent lacks %q: install would write it in place", p, agentapi.AgentFeatures)
		}
		target, run := agentTarget(Agent{}, "/.hsbx-agent-x", ag.Bytes)
		if target == "/.hsbx-agent-x" || len(run) != 3 || run[1] != "install-as" {
			t.Errorf("the %s agent is installed at %s and run as %q, want a name of its own and install-as", p, target, run)
		}
	}
}
