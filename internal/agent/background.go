//go:build linux

package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
)

// Background processes: a command started by `bg-start` runs under a
// supervisor of its own (`bg-supervise`, this binary in a session of its
// own, without the channel's marker), so it outlives the command that
// started it, the agent, the holder and hsbx. Everything about it is in
// a directory of its user's (bgBase/ID): meta.json (what and when), pid
// (once it started), exit.json (how it ended), and its output — stdout
// and stderr as written, interleaved — in segments out.N of segSize
// bytes each; at most bgSegments are kept, so the oldest output is
// dropped first and a reader is told how much. Any later agent (of this
// build or a newer one with this layout) reads them.

// bgDirPrefix names a user's background directory, with its uid after
// it; its "1" is the layout's.
const bgDirPrefix = ".hsbx-bg1-"

// bgSegments is how many output segments are kept.
const bgSegments = 4

// bgIDOK says whether id can name a background process (hsbx makes them:
// 1 to 64 of [a-z0-9-]).
func bgIDOK(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// bgBase is this user's background directory, made when missing, checked
// to be this user's alone (as the sessions' is).
func bgBase() (string, error) {
	uid := os.Geteuid()
	var tried []string
	for _, d := range []string{os.Getenv(SessionsDirVar), "/tmp", "/dev/shm", "/run", os.Getenv("HOME")} {
		if d == "" {
			continue
		}
		base := filepath.Join(d, bgDirPrefix+strconv.Itoa(uid))
		if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			tried = append(tried, err.Error())
			continue
		}
		if err := ownDir(base, uid); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return base, nil
	}
	return "", fmt.Errorf("no private directory for background processes in the sandbox: %s", strings.Join(tried, "; "))
}

// bgMeta is meta.json.
type bgMeta struct {
	ID      string   `json:"id"`
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir,omitempty"`
	Started int64    `json:"started_ms"`
	SegSize int64    `json:"seg_size"`
}

// runBackground runs one background process mode; its status: 0, 1
// (its words on stderr), agentapi.ExitFileNotFound for an unknown id, or
// (BgStart) agentapi.ExitNotStarted.
func runBackground(c agentapi.Call) int {
	code, err := background(c)
	if err != nil {
		os.Stderr.WriteString("hsbx agent: " + err.Error() + "\n")
	}
	return code
}

// bgID is the id of a background process mode's call.
func bgID(c agentapi.Call) string {
	switch c := c.(type) {
	case agentapi.BgStart:
		return c.ID
	case agentapi.BgSupervise:
		return c.ID
	case agentapi.BgInfo:
		return c.ID
	case agentapi.BgWait:
		return c.ID
	case agentapi.BgOutput:
		return c.ID
	case agentapi.BgKill:
		return c.ID
	}
	return ""
}

func background(c agentapi.Call) (int, error) {
	base, err := bgBase()
	if err != nil {
		return 1, err
	}
	if _, ok := c.(agentapi.BgList); ok {
		return 0, bgList(os.Stdout, base)
	}
	id := bgID(c)
	if !bgIDOK(id) {
		return 1, fmt.Errorf("%s: bad id %q", c.Args()[0], id)
	}
	dir := filepath.Join(base, id)
	switch c := c.(type) {
	case agentapi.BgStart:
		if c.Bound < bgSegments {
			return 1, fmt.Errorf("bad output bound %d", c.Bound)
		}
		return bgStart(dir, id, c.Bound, c.Command)
	case agentapi.BgSupervise:
		spareThreads(2)
		bgSupervise(dir, c.Command)
		return 0, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); err != nil {
		return agentapi.ExitFileNotFound, fmt.Errorf("no background process %s here", id)
	}
	switch c := c.(type) {
	case agentapi.BgOutput:
		return 0, bgOutput(os.Stdout, os.Stderr, dir, c.From, c.Follow)
	case agentapi.BgWait:
		for {
			if st, ok := bgState(dir); ok && !st.Running {
				return 0, json.NewEncoder(os.Stdout).Encode(st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	case agentapi.BgInfo:
		st, _ := bgState(dir)
		return 0, json.NewEncoder(os.Stdout).Encode(st)
	case agentapi.BgKill:
		n := bgKill(dir, id, syscall.Signal(c.Signal))
		fmt.Fprintln(os.Stdout, n)
		return 0, nil
	}
	return 1, fmt.Errorf("%s: not a background process mode", c.Args()[0])
}

// bgStart makes dir, starts the supervisor and waits (10 s at most) for
// it to say the command started (pid) or could not (start-error).
func bgStart(dir, id string, bound int64, argv []string) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 1, fmt.Errorf("background process %s: %w", id, err)
	}
	cwd, _ := os.Getwd()
	meta := bgMeta{ID: id, Argv: argv, Dir: cwd, Started: time.Now().UnixMilli(), SegSize: max(bound/bgSegments, 1)}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o600); err != nil {
		return 1, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 1, err
	}
	defer null.Close()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HSBX_EXEC_ID=") && !strings.HasPrefix(kv, bgMarkerVar+"=") {
			env = append(env, kv) // the channel's marker would have its kill reach the process
		}
	}
	self := agentapi.AgentSelf
	p, err := os.StartProcess(self, append([]string{self}, agentapi.BgSupervise{ID: id, Command: argv}.Args()...),
		&os.ProcAttr{Env: env, Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return 1, fmt.Errorf("starting its supervisor: %w", err)
	}
	go func() { _, _ = p.Wait() }() // reaped here if it ends before this mode does
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "start-error")); err == nil {
			os.Stdout.Write(b)
			os.Stdout.WriteString("\n")
			return agentapi.ExitNotStarted, nil
		}
		if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return 1, fmt.Errorf("its supervisor wrote pid %q", b)
			}
			out, _ := json.Marshal(agentapi.Started{ID: id, PID: pid})
			os.Stdout.Write(append(out, '\n'))
			return 0, nil
		}
	}
	return 1, errors.New("its supervisor did not start it within 10s")
}

func bgState(dir string) (agentapi.Process, bool) {
	var meta bgMeta
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil || json.Unmarshal(b, &meta) != nil {
		return agentapi.Process{}, false
	}
	st := agentapi.Process{ID: meta.ID, Argv: meta.Argv, Dir: meta.Dir, Started: meta.Started}
	if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
		st.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "exit.json")); err == nil {
		var ex struct {
			Code   int   `json:"exit_code"`
			Signal int   `json:"signal"`
			Ended  int64 `json:"ended_ms"`
		}
		if json.Unmarshal(b, &ex) == nil {
			st.ExitCode, st.Signal, st.Ended = &ex.Code, ex.Signal, ex.Ended
		}
	}
	_, startErr := os.Stat(filepath.Join(dir, "start-error"))
	switch {
	case st.ExitCode != nil:
	case st.PID > 0 && bgAlive(st.PID, meta.ID):
		st.Running = true
	case st.PID > 0 && supervising(dir, meta.ID):
		// Gone, and its supervisor is about to record how: ending.
		st.Running = true
	case startErr == nil:
		st.Lost = false // it never started: bg-start said so
	default:
		st.Lost = true
	}
	st.Output, st.Dropped = bgSize(dir, meta.SegSize)
	return st, true
}

// supervising says whether the supervisor of background process id still
// runs (its pid, recorded in dir, runs `bg-supervise ID`).
func supervising(dir, id string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "supervisor"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return errors.Is(err, fs.ErrPermission) && syscall.Kill(pid, 0) == nil
	}
	args := strings.Split(string(cmd), "\x00")
	return len(args) > 2 && args[1] == agentapi.ModeBgSupervise && args[2] == id
}

// bgAlive says whether pid is the process of background process id (its
// marker in its environment: a recycled pid is not).
func bgAlive(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return errors.Is(err, fs.ErrPermission) && syscall.Kill(pid, 0) == nil
	}
	for kv := range strings.SplitSeq(string(b), "\x00") {
		if kv == bgMarkerVar+"="+id {
			return true
		}
	}
	return false
}

// bgSize is how many bytes were written in all, and of them dropped.
func bgSize(dir string, seg int64) (total, dropped int64) {
	seg = max(seg, 1)
	ents, _ := os.ReadDir(dir)
	first, last := int64(-1), int64(-1)
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "out."); ok {
			if i, err := strconv.ParseInt(n, 10, 64); err == nil {
				if first < 0 || i < first {
					first = i
				}
				last = max(last, i)
			}
		}
	}
	if last < 0 {
		if b, err := os.ReadFile(filepath.Join(dir, "size")); err == nil {
			total, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
		return total, total
	}
	fi, err := os.Stat(filepath.Join(dir, "out."+strconv.FormatInt(last, 10)))
	if err == nil {
		total = last*seg + fi.Size()
	}
	if b, err := os.ReadFile(filepath.Join(dir, "size")); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > total {
			total = n // what a full disk dropped at the end
		}
	}
	return total, first * seg
}

// bgOutput writes the output from byte off on (what is still kept of
// it: a mark on mark says how much was dropped first); with follow it
// goes on until the process ended and its output is all written.
func bgOutput(w, mark io.Writer, dir string, off int64, follow bool) error {
	var meta bgMeta
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
		_ = json.Unmarshal(b, &meta)
	}
	seg := max(meta.SegSize, 1)
	for {
		_, done := os.Stat(filepath.Join(dir, "size"))
		total, dropped := bgSize(dir, seg)
		if off < dropped {
			fmt.Fprintf(mark, "hsbx: %d bytes of the process's output were dropped (only the last %d are kept)\n", dropped-off, bgSegments*seg)
			off = dropped
		}
		for off < total {
			f, err := os.Open(filepath.Join(dir, "out."+strconv.FormatInt(off/seg, 10)))
			if err != nil {
				break // dropped meanwhile: the next round says so
			}
			n, err := io.Copy(w, io.NewSectionReader(f, off%seg, seg-off%seg))
			f.Close()
			off += n
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		if !follow || done == nil {
			if done == nil && off < total {
				continue // written after the size: read to it
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bgKill signals the process's group and everything that carries its
// marker; it returns how many processes it reached.
func bgKill(dir, id string, sig syscall.Signal) int {
	st, _ := bgState(dir)
	hit := map[int]bool{}
	if st.Running && st.PID > 0 {
		for _, pid := range groupMembers(st.PID) {
			hit[pid] = true
		}
		_ = syscall.Kill(-st.PID, sig)
	}
	for _, pid := range markedProcesses(bgMarkerVar + "=" + id) {
		if !hit[pid] {
			_ = syscall.Kill(pid, sig)
			hit[pid] = true
		}
	}
	return len(hit)
}

// bgList writes one agentapi.Process a line for each background process of this
// user, oldest first.
func bgList(w io.Writer, base string) error {
	ents, err := os.ReadDir(base)
	if err != nil {
		return err
	}
	var all []agentapi.Process
	for _, e := range ents {
		if !e.IsDir() || !bgIDOK(e.Name()) {
			continue
		}
		if st, ok := bgState(filepath.Join(base, e.Name())); ok {
			all = append(all, st)
		}
	}
	slices.SortStableFunc(all, func(a, b agentapi.Process) int { return cmp.Compare(a.Started, b.Started) })
	enc := json.NewEncoder(w)
	for _, st := range all {
		if err := enc.Encode(st); err != nil {
			return err
		}
	}
	return nil
}
