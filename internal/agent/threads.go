package agent

import (
	"runtime"
	"sync"
)

// A sandbox's process limit (pids_limit) counts threads, and the sandbox's
// own commands may take every one of them (a shell's `sleep &` in a loop):
// the limit is the sandbox's to fill. A Go runtime that then needs a
// thread it does not have dies ("failed to create new OS thread"), and a
// long-lived agent process (the channel's agent, the session server, a
// background process's supervisor) must not: so each makes its threads at
// its start, while there is room, and keeps them. The runtime never ends
// an idle thread, so they wait for it when every thread the agent had
// before is busy. keepRoom (pids_linux.go) is the other half: hsbx
// never fills the limit itself.

// agentProcs bounds the threads that run Go code at once in a long-lived
// agent process: it moves bytes and waits on processes, and more would
// only add threads the limit counts.
const agentProcs = 2

// spareThreads makes the runtime start n threads now and keep them idle,
// with at most agentProcs of them running Go code at once. n goroutines
// each hold a thread of their own (LockOSThread) until all n do; a thread
// released before its goroutine ends goes back to the runtime's idle
// list, where it stays.
func spareThreads(n int) {
	if runtime.GOMAXPROCS(0) > agentProcs {
		runtime.GOMAXPROCS(agentProcs)
	}
	var held, release sync.WaitGroup
	held.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	for range n {
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			held.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	release.Done()
	done.Wait()
}
