// Package agentapi is the contract between hsbx on the host and its agent
// in the sandbox, for everything but the exec channel's frames (package
// wire): the modes the agent binary runs, each as a type whose Args are
// the binary's arguments and which Parse reads back; the statuses they
// exit with; and what they print. The host builds a Call and runs the
// agent with its Args; the agent parses its arguments into the same Call.
// Neither side spells a mode's name or arguments anywhere else.
package agentapi

import (
	"strconv"
	"time"
)

// The modes' names: the first of the agent binary's arguments.
const (
	ModeAgent           = "agent"
	ModeFeatures        = "features"
	ModeInstallAs       = "install-as"
	ModeKillMarked      = "kill-marked"
	ModeTarOut          = "tar-out"
	ModeTarIn           = "tar-in"
	ModeCopyOut         = "copy-out"
	ModeCopyIn          = "copy-in"
	ModeSessionServer   = "session-server"
	ModeTrust           = "trust"
	ModeUnreachable     = "unreachable"
	ModeForward         = "forward"
	ModeFileRead        = "file-read"
	ModeFileWrite       = "file-write"
	ModeFileList        = "file-list"
	ModeFileRemove      = "file-remove"
	ModeFileWatch       = "file-watch"
	ModeBgStart         = "bg-start"
	ModeBgSupervise     = "bg-supervise"
	ModeBgList          = "bg-list"
	ModeBgInfo          = "bg-info"
	ModeBgWait          = "bg-wait"
	ModeBgOutput        = "bg-output"
	ModeBgKill          = "bg-kill"
	ModeSnapshotHold    = "snapshot-hold"
	ModeSnapshotRestore = "snapshot-restore"
)

// A Call is one run of the agent binary in a mode: Args are its arguments
// (the mode's name first), as Parse reads them.
type Call interface {
	Args() []string
}

// Agent serves the exec channel on stdin and stdout (package wire).
type Agent struct{}

// Features prints AgentFeatures: what this agent can do.
type Features struct{}

// InstallAs renames the binary, copied in as Name.new-RANDOM, to Name in
// its own directory, then runs Then.
type InstallAs struct {
	Name string
	Then Call
}

// KillMarked kills the processes whose environment carries Marker and
// prints how many (ReadKilled).
type KillMarked struct{ Marker string }

// TarOut writes a tar archive of Src to stdout, in docker cp's shape.
type TarOut struct{ Src string }

// TarIn extracts the tar archive on stdin at Dst, placed as docker cp
// places it.
type TarIn struct{ Dst string }

// CopyOut is TarOut for a copy the engine's cp could make too: as root
// only, and only when Src holds at most Bound bytes (else it exits
// ExitUseEngine, having written nothing).
type CopyOut struct {
	Src   string
	Bound int64
}

// CopyIn is TarIn, likewise as root only, and only when the archive's
// place is there (else ExitUseEngine, nothing written).
type CopyIn struct{ Dst string }

// SessionServer keeps this user's sessions, in directory Base (started by
// the agent).
type SessionServer struct{ Base string }

// Trust writes the sandbox's CA certificate (stdin, PEM) into Dir as
// ca.pem, and the image's CA bundle with it as ca-bundle.pem.
type Trust struct{ Dir string }

// Unreachable connects to each TCP address until none answers or Wait has
// passed; it prints those that still answer, one a line, and exits 1 if
// any does.
type Unreachable struct {
	Wait  time.Duration
	Addrs []string
}

// Forward connects to TCP Addr and relays stdin and stdout to it (one
// connection of a port forward).
type Forward struct{ Addr string }

// FileRead writes the regular file Path to stdout, at most Max bytes.
type FileRead struct {
	Path string
	Max  int64
}

// FileWrite writes stdin (Chunked) to Path whole or not at all, parents
// made, with permission bits Mode (KeepMode: the file's own), at most Max
// bytes.
type FileWrite struct {
	Path string
	Mode int64
	Max  int64
}

// KeepMode is FileWrite's Mode that keeps an existing file's bits.
const KeepMode = -1

// FileList prints one FileEntry a line for each entry of Path.
type FileList struct{ Path string }

// FileRemove removes Path (a directory's entries too when Recursive).
type FileRemove struct {
	Path      string
	Recursive bool
}

// FileWatch prints one FileEvent a line for each change under Path (its
// subdirectories too when Recursive) until it goes.
type FileWatch struct {
	Path      string
	Recursive bool
}

// BgStart starts Command in the background under a supervisor of its own
// (BgSupervise), its output kept (Bound bytes at most), and prints a
// Started once it runs (or exits ExitNotStarted, printing a NotStarted).
type BgStart struct {
	ID      string
	Bound   int64
	Command []string
}

// BgSupervise is the supervisor BgStart starts: it runs Command and keeps
// its output and its end.
type BgSupervise struct {
	ID      string
	Command []string
}

// BgList prints one Process a line for each of this user's background
// processes.
type BgList struct{}

// BgInfo prints process ID's Process at once; BgWait once it ended.
type BgInfo struct{ ID string }

// BgWait prints process ID's Process once it ended.
type BgWait struct{ ID string }

// BgOutput writes process ID's output from byte From (Follow: until it
// ended).
type BgOutput struct {
	ID     string
	From   int64
	Follow bool
}

// BgKill sends Signal to process ID's group and to all that carry its
// marker.
type BgKill struct {
	ID     string
	Signal int
}

// SnapshotHold stops the sandbox's other processes, copies each of Paths
// (at most Bound bytes in all) into SnapshotStage, prints a
// SnapshotReport line, and on a line of input (or its end) removes the
// copy, continues them and prints another.
type SnapshotHold struct {
	Bound int64
	Paths []string
}

// SnapshotRestore copies the staged paths back over the sandbox's,
// removes the stage, and prints a SnapshotReport line.
type SnapshotRestore struct{}

// Args implements Call.
func (Agent) Args() []string { return []string{ModeAgent} }

// Args implements Call.
func (Features) Args() []string { return []string{ModeFeatures} }

// Args implements Call.
func (c InstallAs) Args() []string {
	return append([]string{ModeInstallAs, c.Name}, c.Then.Args()...)
}

// Args implements Call.
func (c KillMarked) Args() []string { return []string{ModeKillMarked, c.Marker} }

// Args implements Call.
func (c TarOut) Args() []string { return []string{ModeTarOut, c.Src} }

// Args implements Call.
func (c TarIn) Args() []string { return []string{ModeTarIn, c.Dst} }

// Args implements Call.
func (c CopyOut) Args() []string { return []string{ModeCopyOut, c.Src, num(c.Bound)} }

// Args implements Call.
func (c CopyIn) Args() []string { return []string{ModeCopyIn, c.Dst} }

// Args implements Call.
func (c SessionServer) Args() []string { return []string{ModeSessionServer, c.Base} }

// Args implements Call.
func (c Trust) Args() []string { return []string{ModeTrust, c.Dir} }

// Args implements Call.
func (c Unreachable) Args() []string {
	return append([]string{ModeUnreachable, c.Wait.String()}, c.Addrs...)
}

// Args implements Call.
func (c Forward) Args() []string { return []string{ModeForward, c.Addr} }

// Args implements Call.
func (c FileRead) Args() []string { return []string{ModeFileRead, c.Path, num(c.Max)} }

// Args implements Call.
func (c FileWrite) Args() []string {
	mode := "-"
	if c.Mode != KeepMode {
		mode = strconv.FormatInt(c.Mode, 8)
	}
	return []string{ModeFileWrite, c.Path, mode, num(c.Max)}
}

// Args implements Call.
func (c FileList) Args() []string { return []string{ModeFileList, c.Path} }

// Args implements Call.
func (c FileRemove) Args() []string { return []string{ModeFileRemove, c.Path, flag(c.Recursive)} }

// Args implements Call.
func (c FileWatch) Args() []string { return []string{ModeFileWatch, c.Path, flag(c.Recursive)} }

// Args implements Call.
func (c BgStart) Args() []string {
	return append([]string{ModeBgStart, c.ID, num(c.Bound)}, c.Command...)
}

// Args implements Call.
func (c BgSupervise) Args() []string { return append([]string{ModeBgSupervise, c.ID}, c.Command...) }

// Args implements Call.
func (BgList) Args() []string { return []string{ModeBgList} }

// Args implements Call.
func (c BgInfo) Args() []string { return []string{ModeBgInfo, c.ID} }

// Args implements Call.
func (c BgWait) Args() []string { return []string{ModeBgWait, c.ID} }

// Args implements Call.
func (c BgOutput) Args() []string {
	return []string{ModeBgOutput, c.ID, num(c.From), flag(c.Follow)}
}

// Args implements Call.
func (c BgKill) Args() []string { return []string{ModeBgKill, c.ID, strconv.Itoa(c.Signal)} }

// Args implements Call.
func (c SnapshotHold) Args() []string {
	return append([]string{ModeSnapshotHold, num(c.Bound)}, c.Paths...)
}

// Args implements Call.
func (SnapshotRestore) Args() []string { return []string{ModeSnapshotRestore} }

func num(n int64) string { return strconv.FormatInt(n, 10) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
