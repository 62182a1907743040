//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
)

// bgMarkerVar marks a background process and everything it starts.
const bgMarkerVar = "HSBX_BG_ID"

// bgSupervise runs argv and keeps its output and its end in dir.
func bgSupervise(dir string, argv []string) {
	var meta bgMeta
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
		_ = json.Unmarshal(b, &meta)
	}
	fail := func(code int, msg string) {
		b, _ := json.Marshal(agentapi.NotStarted{Code: code, Error: msg})
		bgPut(dir, "start-error", b)
	}
	// Who records the end: while it lives, a command that is gone without
	// an end recorded yet is ending, not lost (bgState).
	bgPut(dir, "supervisor", []byte(strconv.Itoa(os.Getpid())))
	// The marker is the command's, not the supervisor's: a kill by it
	// never reaches the one process that records the end.
	env := append(os.Environ(), bgMarkerVar+"="+meta.ID)
	path, code, err := lookPath(argv, env, "")
	if err != nil {
		fail(code, "hsbx: "+err.Error())
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		fail(125, err.Error())
		return
	}
	null, _ := os.Open(os.DevNull)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{null.Fd(), w.Fd(), w.Fd()},
		Sys: &syscall.SysProcAttr{Setpgid: true}})
	w.Close()
	null.Close()
	if err != nil {
		c := 126
		if errors.Is(err, os.ErrNotExist) {
			c = 127
		}
		fail(c, fmt.Sprintf("hsbx: exec: %q: %v", argv[0], err))
		return
	}
	bgPut(dir, "pid", []byte(strconv.Itoa(pid)))
	exited := make(chan struct{})
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		st := map[string]any{"exit_code": ws.ExitStatus(), "ended_ms": time.Now().UnixMilli()}
		if ws.Signaled() {
			st["exit_code"], st["signal"] = 128+int(ws.Signal()), int(ws.Signal())
		}
		b, _ := json.Marshal(st)
		bgPut(dir, "exit.json", b)
		close(exited)
	}()
	seg := max(meta.SegSize, 1)
	var n int64 // bytes written in all
	var cur *os.File
	buf := make([]byte, 64<<10)
	for {
		k, rerr := r.Read(buf)
		for p := buf[:k]; len(p) > 0; {
			idx := n / seg
			if cur == nil || n%seg == 0 {
				if cur != nil {
					cur.Close()
				}
				cur, err = os.OpenFile(filepath.Join(dir, "out."+strconv.FormatInt(idx, 10)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					cur = nil
					n += int64(len(p)) // nowhere to keep it: dropped (counted)
					break
				}
				if old := idx - bgSegments; old >= 0 {
					_ = os.Remove(filepath.Join(dir, "out."+strconv.FormatInt(old, 10)))
				}
			}
			room := seg - n%seg
			c := min(int64(len(p)), room)
			wrote, _ := cur.Write(p[:c])
			if int64(wrote) < c {
				wrote = int(c) // a full disk: dropped, counted, as if written
			}
			n += int64(wrote)
			p = p[wrote:]
		}
		if rerr != nil {
			break // every writer closed (the process and what it left behind)
		}
	}
	if cur != nil {
		cur.Close()
	}
	<-exited
	bgPut(dir, "size", []byte(strconv.FormatInt(n, 10)))
}

// bgPut writes a record of the supervisor's whole or not at all: another
// mode reads these files while it writes (bg-start waits for start-error
// or pid; an empty start-error, read between its creation and its
// write, was taken for a command that could not start — seen on a loaded
// machine as an agent failure with nothing said).
func bgPut(dir, name string, b []byte) {
	tmp := filepath.Join(dir, name+".new")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, name))
	}
}
