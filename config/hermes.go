package config

import "fmt"

// The Hermes settings hsbx takes no notice of, and the warnings it gives
// when they are set.

// HermesIgnored are the Hermes TERMINAL_* variables hsbx reads but does not
// act on, with why. `hsbx config` warns about each one that is set.
var HermesIgnored = []struct{ Name, Why string }{
	{"TERMINAL_ENV", "hsbx is the docker/podman backend only; other Hermes backends are not hsbx's (\"docker\" is the only value that matches it)"},
	{"TERMINAL_SSH_HOST", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_USER", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_PORT", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_KEY", "the ssh backend is not hsbx's"},
	{"TERMINAL_MODAL_IMAGE", "the modal backend is not hsbx's"},
	{"TERMINAL_SINGULARITY_IMAGE", "the singularity backend is not hsbx's"},
	{"TERMINAL_DAYTONA_IMAGE", "the daytona backend is not hsbx's"},
	{"TERMINAL_VERCEL_RUNTIME", "the vercel backend is not hsbx's"},
}

// Warnings lists the Hermes variables that are set in the environment but
// that hsbx ignores, one line each.
func Warnings(getenv func(string) (string, bool)) []string {
	var out []string
	for _, h := range HermesIgnored {
		v, ok := getenv(h.Name)
		if !ok || v == "" || (h.Name == "TERMINAL_ENV" && v == "docker") {
			continue
		}
		out = append(out, fmt.Sprintf("%s is set but ignored: %s", h.Name, h.Why))
	}
	return out
}
