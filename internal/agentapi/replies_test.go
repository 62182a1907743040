package agentapi

import "testing"

func TestInvokedAsAgent(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/.hsbx-agent-0123456789abcdef":              true,
		"/.hsbx-agent-0123456789abcdef.new-00ff00ff": true,
		".hsbx-agent-x":                              true,
		"hsbx":                                       false,
		"/usr/local/bin/hsbx":                        false,
		"/.hsbx-agent-":                              false,
		"/proc/self/exe":                             true,
		"/tmp/hsbx-agent-1/hsbx":                     false,
		"":                                           false,
	} {
		if got := InvokedAsAgent(argv0); got != want {
			t.Errorf("%q: %v, want %v", argv0, got, want)
		}
	}
}
