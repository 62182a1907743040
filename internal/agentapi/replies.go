package agentapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// AgentPathPrefix names the agent in a sandbox (the rest is a digest of
// its binary). A binary that is both hsbx and the agent runs its agent
// modes only when started under this name: on the host, the mode words
// are not commands.
const AgentPathPrefix = "/.hsbx-agent-"

// AgentSelf is how the agent runs itself again for a mode (its argv[0]
// too): the kernel's name for the running binary.
const AgentSelf = "/proc/self/exe"

// InvokedAsAgent says whether argv0 (os.Args[0]) is the agent's name in a
// sandbox (the base of AgentPathPrefix, then anything), or AgentSelf: the
// agent running itself again.
func InvokedAsAgent(argv0 string) bool {
	if argv0 == AgentSelf {
		return true
	}
	base := argv0[strings.LastIndexByte(argv0, '/')+1:]
	return strings.HasPrefix(base, AgentPathPrefix[1:]) && len(base) > len(AgentPathPrefix)-1
}

// ExitUseEngine is copy-out's and copy-in's status when the copy is the
// engine cp's to make (and they wrote nothing): the agent is not root
// (the engine copies as the sandbox's root, which may go where its user
// may not), copy-out's source is larger than its bound or cannot be read,
// or copy-in's destination does not take the archive (the engine then
// says why, in its words).
const ExitUseEngine = 3

// AgentFeatures is what the agent prints for its Features mode, and so a
// string its binary holds whole: the host reads an agent's abilities from
// its bytes before it runs it. "install-as": the agent renames itself into
// place on its first run (hsbx copies it in under a name of its own). A
// short literal compared in code is not kept as bytes by the compiler;
// this one is printed, so it is.
const AgentFeatures = "hsbx-agent-features: install-as"

// The statuses of the agent's file modes (file-read, file-write,
// file-list, file-remove, file-watch) beyond 0 and 1 (any other failure):
// what kind of failure it was, for the host to give as an error a
// program can branch on. The agent's words are on its stderr.
const (
	ExitFileNotFound   = 4 // the path (or a directory on its way) does not exist
	ExitFileIsDir      = 5 // a directory where a file was wanted
	ExitFileNotDir     = 6 // a file where a directory was wanted
	ExitFilePermission = 7 // the user may not (or the file system is read-only)
	ExitFileTooLarge   = 8 // over the size bound the host gave
	ExitFileNotEmpty   = 9 // a directory with entries, removed without recursion
)

// ExitNotStarted is bg-start's status when the command could not start;
// it prints {"code","error"} (code: the shell's 127 or 126). Not 127 or
// 126 itself: those say the agent could not be run at all.
const ExitNotStarted = 10

// FileEntry is one line of file-list's output (JSON), and FileEvent one
// of file-watch's.
type FileEntry struct {
	Name string `json:"name"`
	// Type: "file", "dir", "symlink" or "other" (a device, pipe, socket).
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"` // the permission bits, with setuid, setgid and sticky
	MTime  int64  `json:"mtime_ns"`
	Target string `json:"target,omitempty"` // a symlink's
}

// FileEvent is a change file-watch saw: Event is "created", "written" or
// "removed" (a rename is the old name removed and the new one created);
// its first line is "watching", when the watch is in place.
type FileEvent struct {
	Event string `json:"event"`
	Path  string `json:"path"`
	Type  string `json:"type,omitempty"` // "dir" for a directory
}

// SnapshotStage is where the agent's snapshot-hold mode copies a
// sandbox's mounted paths (each under its own path: /workspace to
// SnapshotStage/workspace) so the engine's commit, which sees only the
// container's own layer, saves them; snapshot-restore puts them back and
// removes it. Its manifest is SnapshotStage/manifest.json (a
// SnapshotReport).
const SnapshotStage = "/.hsbx-snapshot"

// SnapshotReport is what snapshot-hold prints as its first line (staged,
// or why not) and, after the host's go-ahead, its last (Thawed), and what
// snapshot-restore prints.
type SnapshotReport struct {
	// Paths are the paths staged (or restored); Skipped what was passed
	// over and why (a socket, a device, another mount inside a path).
	Paths   []string `json:"paths,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
	Bytes   int64    `json:"bytes"`
	Files   int      `json:"files"`
	// Frozen is how many of the sandbox's processes were stopped (SIGSTOP)
	// while staging and committing; Thawed how many were continued.
	Frozen int `json:"frozen,omitempty"`
	Thawed int `json:"thawed,omitempty"`
	// Error and Kind: it failed, and nothing is staged: Kind is one of the
	// SnapshotKind* words.
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// The kinds of a failed snapshot-hold or snapshot-restore.
const (
	SnapshotKindTooLarge = "too_large" // the paths hold more than the bound
	SnapshotKindNoSpace  = "no_space"  // the sandbox's disk filled
	SnapshotKindFreeze   = "freeze"    // the sandbox's processes could not all be stopped
	SnapshotKindBusy     = "busy"      // another snapshot-hold runs in the sandbox
	SnapshotKindFailed   = "failed"    // anything else (the words say)
)

// Process is what BgList, BgInfo and BgWait print of a background process
// (JSON, one a line).
type Process struct {
	ID      string   `json:"id"`
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir,omitempty"`
	PID     int      `json:"pid,omitempty"`
	Started int64    `json:"started_ms"`
	Running bool     `json:"running"`
	// Lost: neither running nor ended by its supervisor's word (the
	// sandbox restarted, or the supervisor was killed).
	Lost     bool  `json:"lost,omitempty"`
	ExitCode *int  `json:"exit_code,omitempty"`
	Signal   int   `json:"signal,omitempty"`
	Ended    int64 `json:"ended_ms,omitempty"`
	// Output: bytes it wrote in all; Dropped: of them, no longer kept.
	Output  int64 `json:"output_bytes"`
	Dropped int64 `json:"dropped_bytes"`
}

// Started is what BgStart prints once its command runs.
type Started struct {
	ID  string `json:"id"`
	PID int    `json:"pid"`
}

// NotStarted is what BgStart prints when it exits ExitNotStarted: Code is
// the shell's 127 (not found) or 126 (not runnable), Error its words.
type NotStarted struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
}

// ReadKilled reads KillMarked's output: how many processes it killed.
func ReadKilled(out []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("kill-marked printed %q, not a count", clip(out))
	}
	return n, nil
}

// ReadJSON reads one line of a mode's JSON output into v.
func ReadJSON(line []byte, v any) error {
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("the agent printed %q: %w", clip(line), err)
	}
	return nil
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// EachLine calls fn with each line of a mode's output r (at most 1 MiB
// each); after fn's first error the rest of r is read and dropped.
func EachLine(r io.Reader, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			_, _ = io.Copy(io.Discard, r)
			return err
		}
	}
	return sc.Err()
}
