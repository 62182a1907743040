package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/cparchive"
)

// RunMode runs the mode of the agent binary that args (os.Args[1:]) name,
// as hsbx starts it in a sandbox, and returns its exit status; ok is false
// when args name none (the binary is then free to be something else, as
// hsbx itself is). The modes, their arguments, statuses and output are
// package agentapi's: one Call type each.
func RunMode(args []string, build string) (code int, ok bool) {
	call, err := agentapi.Parse(args)
	if errors.Is(err, agentapi.ErrNotAMode) {
		return 0, false
	}
	fail := func(err error) int {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
		return 1
	}
	if err != nil {
		return fail(err), true
	}
	return run(call, build, fail), true
}

// run runs one parsed mode; fail says why it failed and is its status.
func run(call agentapi.Call, build string, fail func(error) int) int {
	switch c := call.(type) {
	case agentapi.InstallAs:
		// Not exec'd again from the new path: an agent that re-execs
		// itself outlived its ended channel on rootful podman (the drift
		// test's replacement found its exec still running). Its command
		// line keeps the install-as words for its life.
		installAs(c.Name)
		return run(c.Then, build, fail)
	case agentapi.Features:
		os.Stdout.WriteString(agentapi.AgentFeatures + "\n")
		return 0
	case agentapi.Agent:
		spareThreads(4)
		if err := Serve(os.Stdin, os.Stdout, build); err != nil {
			return fail(err)
		}
		return 0
	case agentapi.SessionServer:
		spareThreads(4)
		if err := ServeSessions(c.Base); err != nil {
			return fail(err)
		}
		return 0
	case agentapi.Trust:
		pem, err := readPEM(os.Stdin)
		if err == nil {
			_, err = InstallTrust(c.Dir, pem)
		}
		if err != nil {
			return fail(err)
		}
		return 0
	case agentapi.Unreachable:
		open := Unreachable(c.Wait, c.Addrs)
		for _, a := range open {
			os.Stdout.WriteString(a + "\n")
		}
		if len(open) > 0 {
			return 1
		}
		return 0
	case agentapi.Forward:
		return runForward(c.Addr)
	case agentapi.BgStart, agentapi.BgSupervise, agentapi.BgList, agentapi.BgInfo, agentapi.BgWait,
		agentapi.BgOutput, agentapi.BgKill:
		return runBackground(c)
	case agentapi.FileRead, agentapi.FileWrite, agentapi.FileList, agentapi.FileRemove, agentapi.FileWatch:
		return runFileMode(c)
	case agentapi.KillMarked:
		os.Stdout.WriteString(strconv.Itoa(KillMarked(c.Marker)) + "\n")
		return 0
	case agentapi.TarOut:
		if err := cparchive.Archive(os.Stdout, c.Src); err != nil {
			return fail(err)
		}
		return 0
	case agentapi.TarIn:
		if err := TarIn(os.Stdin, c.Dst); err != nil {
			return fail(err)
		}
		return 0
	case agentapi.CopyOut:
		if os.Geteuid() != 0 {
			return useEngine("the agent is not root")
		}
		if over, err := cparchive.Over(c.Src, c.Bound); err != nil || over {
			return useEngine(fmt.Sprintf("over %d bytes, or unreadable (%v)", c.Bound, err))
		}
		if err := cparchive.Archive(os.Stdout, c.Src); err != nil {
			return fail(err)
		}
		return 0
	case agentapi.CopyIn:
		if os.Geteuid() != 0 {
			return useEngine("the agent is not root")
		}
		var pe *PlacementError
		if err := TarIn(os.Stdin, c.Dst); errors.As(err, &pe) {
			return useEngine(err.Error())
		} else if err != nil {
			return fail(err)
		}
		return 0
	case agentapi.SnapshotHold:
		if os.Geteuid() != 0 {
			return fail(errors.New("snapshot-hold runs as root"))
		}
		return SnapshotHold(c.Bound, c.Paths, os.Stdin, os.Stdout)
	case agentapi.SnapshotRestore:
		if os.Geteuid() != 0 {
			return fail(errors.New("snapshot-restore runs as root"))
		}
		return SnapshotRestore(os.Stdout)
	}
	return fail(fmt.Errorf("%s: this agent does not run it", call.Args()[0]))
}

func useEngine(why string) int {
	os.Stderr.WriteString("hsbx agent: the engine's cp makes this copy: " + why + "\n")
	return agentapi.ExitUseEngine
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
