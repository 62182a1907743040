package channel

import (
	"context"
	"errors"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// A sandbox can die under an exec (a crash, an OOM kill, its runtime
// killed): under runc the engine then ends the exec; under gVisor it never
// does, and the client waits for ever. WatchSandbox is the bound.

// SandboxCheck is how often WatchSandbox asks whether the sandbox still
// runs; ExitGrace is how long the engine has to end an exec whose sandbox
// stopped before the caller does.
const (
	SandboxCheck = 5 * time.Second
	ExitGrace    = 2 * time.Second
	// AgentExecWatch is how long a plain exec of the agent runs before
	// it is watched (most end well within it, at no engine call more).
	AgentExecWatch = 10 * time.Second
)

// SandboxEndedError is an exec stopped because its sandbox stopped or went
// under it while the engine kept the exec open.
type SandboxEndedError struct{ State string }

func (e *SandboxEndedError) Error() string {
	return "the engine says it is " + e.State + " and its exec did not end"
}

// WatchSandbox asks the engine about container id every SandboxCheck
// until ctx ends (nil) or the container is neither running nor paused
// (or gone): then, ExitGrace later, unless ctx ended meanwhile, it
// returns a *SandboxEndedError. An engine that does not answer is asked
// again. first, when not nil, is given the first answer's error: what it
// returns, when not nil, ends the watch (a caller's own verdict on an
// engine that does not answer).
func WatchSandbox(ctx context.Context, rt runtime.Runtime, id string, first func(error) error) error {
	for {
		cs, err := rt.Inspect(ctx, id)
		if ctx.Err() != nil {
			return nil
		}
		if first != nil {
			if ferr := first(err); ferr != nil {
				return ferr
			}
			first = nil
		}
		state := ""
		switch {
		case errors.Is(err, runtime.ErrNotFound) || err == nil && len(cs) == 0:
			state = "gone"
		case err == nil && cs[0].State != runtime.StateRunning && cs[0].State != runtime.StatePaused:
			state = string(cs[0].State)
		}
		if state != "" {
			if sleep(ctx, ExitGrace) {
				return &SandboxEndedError{State: state}
			}
			return nil
		}
		if !sleep(ctx, SandboxCheck) {
			return nil
		}
	}
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
