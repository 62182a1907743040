// Package startfail reads the line an OCI runtime prints when a command
// cannot be started in a container (missing, not executable), so that
// every path reports it the same way: the shell's status (127 not found,
// 126 not runnable) and one message, the one the exec channel's agent
// prints.
//
// The engines disagree: docker (runc) prints "OCI runtime exec failed:
// exec failed: unable to start container process: exec: "x": executable
// file not found in $PATH: unknown" — on stdout in 20.10 — and exits 126
// whatever the cause; podman prints "Error: runc: exec failed: ..." or
// "Error: crun: executable file `x` not found in $PATH: ..." on stderr
// with 127 or 126; kubectl wraps the runc line in "error: Internal error
// occurred: ..." and exits 1. Under gVisor docker prints "OCI runtime exec
// failed: executing processes for container: executing command "x y" in
// sandbox: failed to load x: no such file or directory: unknown" (or
// "error finding executable "x" in PATH [...]: ...") on stdout, 126.
package startfail

import (
	"fmt"
	"strconv"
	"strings"
)

// Failure is a command the runtime could not start.
type Failure struct {
	Name   string // argv[0] as given
	Reason string // "executable file not found in $PATH", "no such file or directory", "permission denied", ...
	Code   int    // 127 not found, 126 anything else
}

// Message is what hsbx prints for f, on every path: the agent's words.
func (f Failure) Message() string {
	return fmt.Sprintf("hsbx: exec: %q: %s", f.Name, f.Reason)
}

// Prefixes are how a start failure's line begins, engine by engine (a
// writer holds a stream's first bytes only while they may begin one).
var Prefixes = []string{
	"OCI runtime exec failed: ",
	"Error: runc: ",
	"Error: crun: ",
	"error: Internal error occurred: ",
}

const runcMark = "unable to start container process: "

// gvisorMark precedes runsc's cause; the quoted command line before it is
// the whole argv, joined (the name is in the cause).
const gvisorMark = "executing processes for container: executing command "

// Parse reads one line. Only the shapes above count; anything else, or a
// line that names no command, is not a start failure.
func Parse(line string) (Failure, bool) {
	line = strings.TrimSpace(line)
	known := false
	for _, p := range Prefixes {
		known = known || strings.HasPrefix(line, p)
	}
	if !known {
		return Failure{}, false
	}
	if rest, ok := strings.CutPrefix(line, "Error: crun: executable file `"); ok {
		name, _, ok := strings.Cut(rest, "` not found in $PATH")
		if !ok || name == "" {
			return Failure{}, false
		}
		return Failure{Name: name, Reason: "executable file not found in $PATH", Code: 127}, true
	}
	if f, ok := parseGVisor(line); ok {
		return f, true
	}
	i := strings.Index(line, runcMark)
	if i < 0 {
		return Failure{}, false
	}
	rest := line[i+len(runcMark):]
	rest, _ = strings.CutPrefix(rest, "error during container init: ")
	rest, ok := strings.CutPrefix(rest, "exec: ")
	if !ok {
		return Failure{}, false
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return Failure{}, false
	}
	name, err := strconv.Unquote(q)
	if err != nil || name == "" {
		return Failure{}, false
	}
	reason := strings.TrimPrefix(rest[len(q):], ": ")
	low := strings.ToLower(reason)
	switch {
	case strings.Contains(low, "executable file not found"):
		return Failure{Name: name, Reason: "executable file not found in $PATH", Code: 127}, true
	case strings.Contains(low, "no such file or directory"):
		return Failure{Name: name, Reason: "no such file or directory", Code: 127}, true
	case strings.Contains(low, "permission denied"):
		return Failure{Name: name, Reason: "permission denied", Code: 126}, true
	}
	// Another cause (exec format error, ...): the runtime's words without
	// its own suffix.
	for _, suffix := range []string{": unknown", ": OCI runtime error"} {
		reason = strings.TrimSuffix(reason, suffix)
	}
	reason = strings.TrimSuffix(strings.TrimSpace(reason), ".")
	if reason == "" {
		return Failure{}, false
	}
	return Failure{Name: name, Reason: reason, Code: 126}, true
}

// parseGVisor reads runsc's shape (see the package comment).
func parseGVisor(line string) (Failure, bool) {
	i := strings.Index(line, gvisorMark)
	if i < 0 {
		return Failure{}, false
	}
	rest := line[i+len(gvisorMark):]
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return Failure{}, false
	}
	rest, ok := strings.CutPrefix(rest[len(q):], " in sandbox: ")
	if !ok {
		return Failure{}, false
	}
	for _, suffix := range []string{": unknown", ": OCI runtime attempted to invoke a command that was not found", ": OCI permission denied"} {
		rest = strings.TrimSuffix(strings.TrimSpace(rest), suffix)
	}
	if after, ok := strings.CutPrefix(rest, "error finding executable "); ok {
		q, err := strconv.QuotedPrefix(after)
		if err != nil {
			return Failure{}, false
		}
		name, err := strconv.Unquote(q)
		if err != nil || name == "" {
			return Failure{}, false
		}
		return Failure{Name: name, Reason: "executable file not found in $PATH", Code: 127}, true
	}
	after, ok := strings.CutPrefix(rest, "failed to load ")
	if !ok {
		return Failure{}, false
	}
	name, reason, ok := strings.Cut(after, ": ")
	if !ok || name == "" {
		return Failure{}, false
	}
	switch low := strings.ToLower(reason); {
	case strings.Contains(low, "no such file or directory"):
		return Failure{Name: name, Reason: "no such file or directory", Code: 127}, true
	case strings.Contains(low, "permission denied"):
		return Failure{Name: name, Reason: "permission denied", Code: 126}, true
	}
	return Failure{Name: name, Reason: strings.TrimSuffix(strings.TrimSpace(reason), "."), Code: 126}, true
}

// MayBegin reports whether b (a stream's first bytes, no newline yet) may
// still turn out to begin a start failure's line.
func MayBegin(b []byte) bool {
	s := string(b)
	for _, p := range Prefixes {
		if strings.HasPrefix(p, s) || strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
