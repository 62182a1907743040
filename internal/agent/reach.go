package agent

import (
	"net"
	"slices"
	"sync"
	"time"
)

// dialWait bounds one connection attempt of Unreachable: a policy that
// drops (rather than refuses) is seen as this long without an answer.
const dialWait = time.Second

// Unreachable connects to each TCP address in addrs, again every quarter
// second while any answers, until none does or wait has passed; it
// returns those that answered on the last try (none: every address is out
// of reach). It is how hsbx proves, from inside a new Pod and before
// anything else runs there, that the cluster enforces the NetworkPolicy
// that keeps the Pod off the network: a policy takes a moment to apply
// after the Pod starts, so an answer is tried again, and only a lasting
// one counts.
func Unreachable(wait time.Duration, addrs []string) []string {
	deadline := time.Now().Add(wait)
	for {
		var (
			mu   sync.Mutex
			open []string
			wg   sync.WaitGroup
		)
		for _, a := range addrs {
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", a, dialWait)
				if err != nil {
					return
				}
				_ = c.Close()
				mu.Lock()
				open = append(open, a)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(open) == 0 || time.Now().After(deadline) {
			slices.Sort(open)
			return open
		}
		time.Sleep(250 * time.Millisecond)
	}
}
