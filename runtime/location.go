package runtime

import "strings"

// Location is where an engine runs, as its client's own configuration
// says (variables, a context, a connection; never an engine call): on the
// machine hsbx runs on, or on another. A host path hsbx passes an engine
// elsewhere is looked up on that machine, not this one.
type Location struct {
	// Remote: the engine runs on another machine (ssh, tcp, a context or
	// connection naming one, podman machine's VM).
	Remote bool `json:"remote"`
	// Address is the engine's address as its client has it
	// ("unix:///var/run/docker.sock", "ssh://me@box"); "" when the client
	// does not say (its default, or a context hsbx could not read).
	Address string `json:"address,omitempty"`
	// Source is what said so: "DOCKER_HOST", `docker context "b"`, "the
	// client's default", ...
	Source string `json:"source"`
	// Shared are host directories a remote engine's machine has too, at
	// the same paths (podman machine mounts the user's home): a host path
	// under one means the same files there.
	Shared []string `json:"shared,omitempty"`
}

// Locator is implemented by runtimes that know where their engine runs
// (docker and podman); one that does not (kubectl: a cluster's nodes,
// where no host path reaches) binds no host directories anyway.
type Locator interface {
	Location() Location
}

// String says where the engine is and why hsbx thinks so, for doctor and
// config.
func (l Location) String() string {
	where := "local"
	if l.Remote {
		where = "remote"
	}
	var b strings.Builder
	b.WriteString(where)
	if l.Address != "" {
		b.WriteString(": " + l.Address)
	}
	if l.Source != "" {
		b.WriteString(" (" + l.Source + ")")
	}
	if l.Remote && len(l.Shared) > 0 {
		b.WriteString("; shared with this machine: " + strings.Join(l.Shared, ", "))
	}
	return b.String()
}

// Reaches reports whether host path p means the same files to the engine
// as on this machine: always for a local engine, and for a remote one
// when p is under one of Shared (both absolute and clean).
func (l Location) Reaches(p string) bool {
	if !l.Remote {
		return true
	}
	for _, s := range l.Shared {
		if s == "/" || p == s || strings.HasPrefix(p, strings.TrimSuffix(s, "/")+"/") {
			return true
		}
	}
	return false
}
