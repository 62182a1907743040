package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/rogpeppe/go-internal/testscript"
)

// client-gone: every engine client that ran an exec (as the fake engine
// recorded them) has exited (waits up to 10s).
func clientGone(ts *testscript.TestScript, neg bool, args []string) {
	b, err := os.ReadFile(filepath.Join(ts.Getenv("FAKEENGINE_DIR"), "clients.log"))
	ts.Check(err)
	pids := strings.Fields(string(b))
	if len(pids) == 0 {
		ts.Fatalf("client-gone: no exec client recorded")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		if !awaitExit(p, deadline) {
			ts.Fatalf("engine client %s still runs after hsbx was killed", p)
		}
	}
}

// awaitExit waits until process pid has exited (gone, or a zombie) and
// reports whether it did before deadline.
func awaitExit(pid string, deadline time.Time) bool {
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if err != nil || (i > 0 && i+2 < len(s) && s[i+2] == 'Z') {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execs-done: every command the fake engine ran in a container (its exec
// processes, which outlive a killed client as the engines' do) has ended
// (waits up to 30s).
func execsDone(ts *testscript.TestScript, neg bool, args []string) {
	b, err := os.ReadFile(filepath.Join(ts.Getenv("FAKEENGINE_DIR"), "state.json"))
	ts.Check(err)
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range regexp.MustCompile(`"pid":\s*(\d+)`).FindAllStringSubmatch(string(b), -1) {
		if !awaitExit(m[1], deadline) {
			ts.Fatalf("exec process %s still runs", m[1])
		}
	}
}

// channel-up: wait (up to 30 s) until an exec channel holder answers under
// $XDG_RUNTIME_DIR/hsbx. Negated (! channel-up), wait until none does.
func channelUp(ts *testscript.TestScript, neg bool, args []string) {
	alive := channel.Alive
	if len(args) == 1 && args[0] == "-any-version" {
		alive = greets // an hsbx of another protocol's holder
	}
	dir := filepath.Join(ts.Getenv("XDG_RUNTIME_DIR"), "hsbx")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
		up := false
		for _, s := range socks {
			up = up || alive(s, time.Second)
		}
		if up != neg {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if neg {
		ts.Fatalf("a holder still answers under %s", dir)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		ts.Logf("%s:\n%s", l, b)
	}
	ts.Fatalf("no holder answers under %s", dir)
}

// greets reports whether anything at socket sends a hello frame.
func greets(socket string, wait time.Duration) bool {
	nc, err := net.DialTimeout("unix", socket, wait)
	if err != nil {
		return false
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(wait))
	f, err := wire.NewReader(nc).Read()
	return err == nil && f.Type == wire.THello
}

// kill-holder SIGNAL: send SIGNAL (a number) to every exec channel holder
// serving a socket under $XDG_RUNTIME_DIR/hsbx, and wait for it to end.
func killHolder(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: kill-holder SIGNAL")
	}
	sig, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("kill-holder: %v", err)
	}
	dir := filepath.Join(ts.Getenv("XDG_RUNTIME_DIR"), "hsbx")
	ents, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv := strings.Split(string(b), "\x00")
		if !slices.Contains(argv, "hold") {
			continue
		}
		if i := slices.Index(argv, "--socket"); i >= 0 && i+1 < len(argv) && strings.HasPrefix(argv[i+1], dir+"/") {
			ts.Check(syscall.Kill(pid, syscall.Signal(sig))) // an older hsbx's holder
			killed = append(killed, pid)
			continue
		}
		// A holder's spec is in its environment (HSBX_HOLD), not its argv.
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			var spec struct{ Dir string }
			if v, ok := strings.CutPrefix(kv, "HSBX_HOLD="); ok && json.Unmarshal([]byte(v), &spec) == nil && spec.Dir == dir {
				ts.Check(syscall.Kill(pid, syscall.Signal(sig)))
				killed = append(killed, pid)
			}
		}
	}
	if len(killed) == 0 {
		ts.Fatalf("kill-holder: no holder under %s", dir)
	}
	for _, pid := range killed {
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(b), ") Z ") {
				break // a zombie: gone, its parent has not reaped it yet
			}
			if time.Now().After(deadline) {
				ts.Fatalf("holder %d still runs", pid)
			}
		}
	}
}

// rm-sockets: delete every holder socket under $XDG_RUNTIME_DIR/hsbx.
func rmSockets(ts *testscript.TestScript, neg bool, args []string) {
	socks, _ := filepath.Glob(filepath.Join(ts.Getenv("XDG_RUNTIME_DIR"), "hsbx", "*.sock"))
	if neg || len(args) != 0 || len(socks) == 0 {
		ts.Fatalf("usage: rm-sockets (with a socket to remove)")
	}
	for _, s := range socks {
		ts.Check(os.Remove(s))
	}
}
