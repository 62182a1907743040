package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/hostcopy"
	"github.com/hsbx/hsbx/internal/wire"
)

// RunMode runs the mode of the agent binary that args (os.Args[1:]) name,
// as hsbx starts it in a sandbox, and returns its exit status; ok is false
// when args name none (the binary is then free to be something else, as
// hsbx itself is):
//
//	agent              serve the exec channel on stdin and stdout
//	kill-marked MARKER kill the processes carrying MARKER, print how many
//	tar-out SRC        write a tar archive of SRC to stdout (docker cp's shape)
//	tar-in DST         extract the tar archive on stdin at DST (docker cp's placement)
//	copy-out SRC BOUND tar-out, for a copy the engine's cp could make too: as
//	                   root only, and only when SRC holds at most BOUND bytes
//	copy-in DST        tar-in, likewise as root only, and only when the
//	                   archive's place is there (else nothing is written)
//	session-server BASE
//	                   keep this user's sessions, in BASE (started by the agent;
//	                   see ServeSessions)
//	install-as NAME MODE...
//	                   rename this binary to NAME in its own directory (when
//	                   hsbx copied it in under a name of its own), then run MODE
//	features           print wire.AgentFeatures (what this agent can do)
//	trust DIR          write the sandbox's CA certificate (stdin) into DIR
//	                   as ca.pem, and the image's CA bundle with it as
//	                   ca-bundle.pem (InstallTrust)
//	file-read PATH MAX write the regular file PATH to stdout (at most MAX bytes)
//	file-write PATH MODE MAX (its input wire.Chunked)
//	                   write stdin to PATH whole or not at all (parents made;
//	                   MODE octal, or - to keep the file's; at most MAX bytes)
//	file-list PATH     one wire.FileEntry a line for each entry of PATH
//	file-remove PATH R remove PATH (a directory's entries too when R is 1)
//	file-watch PATH R  one wire.FileEvent a line for each change under PATH
//	                   (its subdirectories too when R is 1) until it goes
//	                   (the file modes exit with a wire.ExitFile* status)
//	bg-start ID BOUND ARGV...
//	                   start ARGV in the background under a supervisor of its
//	                   own (bg-supervise), its output kept (BOUND bytes at
//	                   most); print {"id","pid"} once it started
//	bg-list            one BgState a line for each of this user's
//	bg-info ID / bg-wait ID
//	                   its BgState, at once / once it ended
//	bg-output ID OFF F its output from byte OFF (F 1: until it ended)
//	bg-kill ID SIG     signal its group and all that carry its marker
//	snapshot-hold BOUND PATH...
//	                   stop the sandbox's other processes, copy each PATH
//	                   (at most BOUND bytes) into wire.SnapshotStage, print a
//	                   wire.SnapshotReport line, and on a line of input (or
//	                   its end) remove the copy, continue them, print another
//	snapshot-restore   copy the staged paths back over the sandbox's, remove
//	                   the stage, print a wire.SnapshotReport line
//	forward ADDR       connect to TCP ADDR and relay stdin and stdout to it
//	                   (one connection of a port forward)
//	unreachable WAIT ADDR...
//	                   connect to each TCP ADDR until none answers or WAIT
//	                   (a duration) has passed; print those that still
//	                   answer, one a line, and exit 1 if any does
//
// copy-out and copy-in exit wire.ExitUseEngine, having written nothing, when
// the copy is the engine's to make.
func RunMode(args []string, build string) (code int, ok bool) {
	fail := func(err error) int {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
		return 1
	}
	switch {
	case len(args) >= 3 && args[0] == "install-as":
		// Not exec'd again from the new path: an agent that re-execs
		// itself outlived its ended channel on rootful podman (the drift
		// test's replacement found its exec still running). Its command
		// line keeps the install-as words for its life.
		installAs(args[1])
		return RunMode(args[2:], build)
	case len(args) == 1 && args[0] == "features":
		os.Stdout.WriteString(wire.AgentFeatures + "\n")
		return 0, true
	case len(args) == 1 && args[0] == "agent":
		spareThreads(4)
		if err := Serve(os.Stdin, os.Stdout, build); err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) == 2 && args[0] == "trust":
		pem, err := readPEM(os.Stdin)
		if err == nil {
			_, err = InstallTrust(args[1], pem)
		}
		if err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) >= 3 && args[0] == "unreachable":
		wait, err := time.ParseDuration(args[1])
		if err != nil {
			return fail(err), true
		}
		open := Unreachable(wait, args[2:])
		for _, a := range open {
			os.Stdout.WriteString(a + "\n")
		}
		if len(open) > 0 {
			return 1, true
		}
		return 0, true
	case len(args) == 2 && args[0] == "forward":
		return runForward(args[1]), true
	case len(args) >= 1 && bgModes[args[0]]:
		return runBackground(args[0], args[1:]), true
	case len(args) >= 2 && fileModes[args[0]]:
		return runFileMode(args[0], args[1:]), true
	case len(args) == 2 && args[0] == "kill-marked":
		os.Stdout.WriteString(strconv.Itoa(KillMarked(args[1])) + "\n")
		return 0, true
	case len(args) == 2 && args[0] == "tar-out":
		if err := hostcopy.Archive(os.Stdout, args[1]); err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) == 2 && args[0] == "session-server":
		spareThreads(4)
		if err := ServeSessions(args[1]); err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) == 2 && args[0] == "tar-in":
		if err := TarIn(os.Stdin, args[1]); err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) == 3 && args[0] == "copy-out":
		bound, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return fail(err), true
		}
		if os.Geteuid() != 0 {
			return useEngine("the agent is not root"), true
		}
		if over, err := hostcopy.Over(args[1], bound); err != nil || over {
			return useEngine(fmt.Sprintf("over %d bytes, or unreadable (%v)", bound, err)), true
		}
		if err := hostcopy.Archive(os.Stdout, args[1]); err != nil {
			return fail(err), true
		}
		return 0, true
	case len(args) >= 2 && args[0] == "snapshot-hold":
		bound, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || os.Geteuid() != 0 {
			return fail(fmt.Errorf("snapshot-hold BOUND PATH... runs as root (bound %q)", args[1])), true
		}
		return SnapshotHold(bound, args[2:], os.Stdin, os.Stdout), true
	case len(args) == 1 && args[0] == "snapshot-restore":
		if os.Geteuid() != 0 {
			return fail(errors.New("snapshot-restore runs as root")), true
		}
		return SnapshotRestore(os.Stdout), true
	case len(args) == 2 && args[0] == "copy-in":
		if os.Geteuid() != 0 {
			return useEngine("the agent is not root"), true
		}
		var pe *PlacementError
		if err := TarIn(os.Stdin, args[1]); errors.As(err, &pe) {
			return useEngine(err.Error()), true
		} else if err != nil {
			return fail(err), true
		}
		return 0, true
	}
	return 0, false
}

var bgModes = map[string]bool{"bg-start": true, "bg-supervise": true, "bg-list": true, "bg-output": true, "bg-wait": true,
	"bg-info": true, "bg-kill": true}

var fileModes = map[string]bool{"file-read": true, "file-write": true, "file-list": true, "file-remove": true, "file-watch": true}

func useEngine(why string) int {
	os.Stderr.WriteString("hsbx agent: the engine's cp makes this copy: " + why + "\n")
	return wire.ExitUseEngine
}

// installAs renames this binary, copied in as NAME.new-RANDOM, to NAME in
// the same directory: one atomic step that replaces what another host
// installed there (a running agent keeps its own file), so no process
// ever runs the agent's file while it is being written. Nothing is said
// on failure (the agent's stderr is the engine's before its hello): the
// binary then runs from where it is, and the next start installs again.
func installAs(name string) {
	self, err := os.Executable()
	if err != nil || name != filepath.Base(name) || !strings.HasPrefix(filepath.Base(self), name+".new-") {
		return
	}
	_ = os.Rename(self, filepath.Join(filepath.Dir(self), name))
}
