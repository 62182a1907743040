//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hsbx/hsbx/internal/wire"
)

// hasVar says whether env (NAME=value entries) sets name.
func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// groupMembers lists the processes in process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	forEachProc(func(pid int) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	})
	return out
}

// markedProcesses lists the processes whose environment holds marker.
func markedProcesses(marker string) []int {
	self := os.Getpid()
	var out []int
	want := []byte(marker)
	forEachProc(func(pid int) {
		if pid == self {
			return
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			return
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.Equal(kv, want) {
				out = append(out, pid)
				return
			}
		}
	})
	return out
}

func forEachProc(fn func(pid int)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			fn(pid)
		}
	}
}

// mergeEnv returns base with add's entries set (later wins).
func mergeEnv(base, add []string) []string {
	if len(add) == 0 {
		return base
	}
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range append(append([]string{}, base...), add...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// lookPath finds argv[0] as exec would: a name with a slash is taken as
// it is (relative to dir), anything else is searched on the command's PATH.
// The code is what the engines report: 127 not found, 126 not runnable.
func lookPath(argv, env []string, dir string) (string, int, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", 127, errors.New("no command given")
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		code, err := checkExec(p, name)
		return name, code, err
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, 0, nil
		}
	}
	return "", 127, fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func checkExec(p, name string) (int, error) {
	fi, err := os.Stat(p)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		return 127, fmt.Errorf("exec: %q: no such file or directory", name)
	case err != nil:
		return 126, fmt.Errorf("exec: %q: %v", name, err)
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return 126, fmt.Errorf("exec: %q: permission denied", name)
	}
	return 0, nil
}

// KillMarked kills (SIGKILL) every process carrying marker ("NAME=token")
// and returns how many it reached: what `AGENT kill-marked MARKER` does as
// a plain exec, for a sandbox without the shell hsbx's kill script needs.
// The processes are stopped first so that none forks past the count.
// Only hsbx's own marker is taken (HSBX_EXEC_ID=token, runtime.ExecMarker).
func KillMarked(marker string) int {
	if token, ok := strings.CutPrefix(marker, "HSBX_EXEC_ID="); !ok || token == "" {
		return 0
	}
	return killMarker(marker)
}

// killMarker kills every process whose environment holds marker
// ("NAME=VALUE"), stopping them first so that none forks past it.
func killMarker(marker string) int {
	pids := markedProcesses(marker)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	pids = append(pids, markedProcesses(marker)...)
	seen := map[int]bool{}
	n := 0
	for _, pid := range pids {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func startMessage(st wire.Start, err error) string {
	if st.Dir != "" {
		if _, serr := os.Stat(st.Dir); serr != nil {
			return fmt.Sprintf("chdir to %q failed: %v", st.Dir, serr)
		}
	}
	return fmt.Sprintf("exec: %q: %v", st.Argv[0], err)
}
