package fakebin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// childEnv carries a command to the detached process that runs it.
const childEnv = "FAKEENGINE_EXEC_CHILD"

type childJob struct {
	Container Container `json:"container"`
	Cmd       []string  `json:"cmd"`
	WorkDir   string    `json:"workdir"`
	Env       []string  `json:"env"`
}

// runExec runs cmd for `exec` the way an engine does: in a process of its
// own session (the "container process") that outlives the client if the
// client is killed. The client relays its output and exit status.
// FAKEENGINE_EXEC_INPROCESS=1 runs it in this process instead (unit tests
// that call Run directly).
func (f *fake) runExec(c *Container, cmd []string, wd string, env []string) int {
	// Each fake container's sessions (hsbx's agent keeps them in a
	// directory of the sandbox's) live apart, and die with it (killExecs).
	sdir := f.st.path(filepath.Join("sessions", c.ID))
	_ = os.MkdirAll(sdir, 0o700)
	env = append(env, "HSBX_SESSIONS_DIR="+sdir)
	token := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HSBX_EXEC_ID="); ok {
			token = v
		}
	}
	if f.env["FAKEENGINE_EXEC_INPROCESS"] == "1" {
		return f.shell(c, cmd, wd, env)
	}
	// clients.log: the pid of every exec client (this process), for tests
	// that check the client dies with its parent.
	if lf, err := os.OpenFile(f.st.path("clients.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintln(lf, os.Getpid())
		lf.Close()
	}
	self, err := os.Executable()
	if err != nil {
		return f.fail(err)
	}
	job, _ := json.Marshal(childJob{Container: *c, Cmd: cmd, WorkDir: wd, Env: env})
	outR, outW, err := os.Pipe()
	if err != nil {
		return f.fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return f.fail(err)
	}
	stdin, closeIn := f.childStdin()
	childEnvs := append(os.Environ(), childEnv+"="+string(job), "FAKEENGINE_DIR="+f.st.dir)
	for k, v := range f.env {
		childEnvs = append(childEnvs, k+"="+v)
	}
	proc, err := os.StartProcess(self, []string{f.name}, &os.ProcAttr{
		Env:   childEnvs,
		Files: []*os.File{stdin, outW, errW},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	outW.Close()
	errW.Close()
	closeIn()
	if err != nil {
		return f.fail(err)
	}
	key := strconv.Itoa(proc.Pid)
	_ = f.st.update(func(st *State) error {
		if sc := st.find(c.ID); sc != nil {
			if sc.Execs == nil {
				sc.Execs = map[string]ExecProc{}
			}
			sc.Execs[key] = ExecProc{ID: st.newID("exec", f.now), Pid: proc.Pid, Cmd: cmd, Token: token}
		}
		return nil
	})
	done := make(chan struct{}, 2)
	go func() { io.Copy(f.stdout, outR); done <- struct{}{} }()
	go func() { io.Copy(f.stderr, errR); done <- struct{}{} }()
	ps, werr := proc.Wait()
	<-done
	<-done
	_ = f.st.update(func(st *State) error {
		if sc := st.find(c.ID); sc != nil {
			delete(sc.Execs, key)
		}
		return nil
	})
	if werr != nil {
		return f.fail(werr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if len(cmd) > 0 && !builtins[cmd[0]] && !strings.HasPrefix(cmd[0], "/bin/") {
		f.staleSession(c.ID, cmd) // the command could not be started
	}
	return ps.ExitCode()
}

// staleSession records, for podman, the exec session a failed start leaves
// behind: listed in ExecIDs until the container stops, running nothing.
func (f *fake) staleSession(id string, cmd []string) {
	if f.dialect != "podman" {
		return
	}
	_ = f.st.update(func(st *State) error {
		if sc := st.find(id); sc != nil {
			if sc.Execs == nil {
				sc.Execs = map[string]ExecProc{}
			}
			sid := st.newID("stale", f.now)
			sc.Execs["stale-"+sid[:12]] = ExecProc{ID: sid, Cmd: cmd, Stale: true}
		}
		return nil
	})
}

// cleanup is `container cleanup --exec SESSION CONTAINER`: podman refuses
// for a running session and tidies a finished one (exit 0; it stays listed).
func (f *fake) cleanup(args []string) int {
	p, bad := flagSet{values: set("--exec"), bools: set("--rm", "--rmi")}.parse(args)
	if bad != "" || len(p.pos) != 1 || f.dialect != "podman" {
		return f.usage(fmt.Sprintf("unknown command %q for %q", "cleanup", f.name))
	}
	sid := p.last("--exec")
	code := 0
	_ = f.st.view(func(st *State) error {
		c := st.find(p.pos[0])
		if c == nil {
			f.notFound(p.pos[0])
			code = 125
			return nil
		}
		known := false
		for _, e := range c.Execs {
			known = known || e.ID == sid
			if e.ID == sid && !e.Stale && alive(e.Pid) {
				fmt.Fprintf(f.stderr, "Error: cannot clean up container %s exec session %s as it is running: exec session state improper\n", c.ID, sid)
				code = 125
			}
		}
		if !known { // podman 4.3, measured: a session that ended and went between inspect and cleanup
			fmt.Fprintf(f.stderr, "time=%q level=error msg=\"Running container cleanup: container %s has no exec session with ID %s: no such exec session\"\nError: container %s has no exec session with ID %s: no such exec session\n",
				f.now.UTC().Format("2006-01-02T15:04:05Z"), c.ID, sid, c.ID, sid)
			code = 125
		}
		return nil
	})
	return code
}

// childStdin gives the child the client's stdin (a file), or /dev/null.
func (f *fake) childStdin() (*os.File, func()) {
	if file, ok := f.stdin.(*os.File); ok {
		return file, func() {}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, func() {}
	}
	return null, func() { null.Close() }
}

// runChild is the detached "container process": it runs the job and exits.
func runChild(name, job string) int {
	var j childJob
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		fmt.Fprintf(os.Stderr, "fake engine: bad exec job: %v\n", err)
		return 125
	}
	f := &fake{name: name, dialect: name, env: map[string]string{}, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		f.env[k] = v
	}
	if f.env["FAKEENGINE_DOCKER_IS"] == "podman" {
		f.dialect = "podman"
	}
	f.st = store{dir: f.env["FAKEENGINE_DIR"]}
	c := j.Container
	if code, ok := f.execCopied(&c, j.Cmd, j.WorkDir, j.Env); ok {
		return code
	}
	return f.shell(&c, j.Cmd, j.WorkDir, j.Env)
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// killExecs kills a container's exec processes (those whose token matches,
// or all when token is ""), returning how many it killed.
// killMarkedProcs kills the host processes whose environment holds
// HSBX_EXEC_ID=token, as the real kill script does in a sandbox: what an
// agent in a fake sandbox runs is a real process of the host. The token
// is random, so no other sandbox's process carries it. skip: the exec
// processes killExecs dealt with.
func killMarkedProcs(token string, skip map[int]bool) int {
	if token == "" {
		return 0
	}
	want := []byte("HSBX_EXEC_ID=" + token)
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || skip[pid] {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(v []byte) bool { return bytes.Equal(v, want) }) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func killExecs(c *Container, token string) int {
	n := 0
	if token == "" {
		n += killSessions(c.ID)
	}
	for key, e := range c.Execs {
		if token != "" && e.Token != token {
			continue
		}
		if alive(e.Pid) && syscall.Kill(e.Pid, syscall.SIGKILL) == nil {
			n++
		}
		delete(c.Execs, key)
	}
	return n
}

// killSessions kills the processes of a container's sessions (keepers
// and shells carry its sessions directory in their environment), as a
// real engine's stop kills everything in the container.
func killSessions(id string) int {
	want := []byte("HSBX_SESSIONS_DIR=")
	suffix := []byte(string(filepath.Separator) + filepath.Join("sessions", id))
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.HasPrefix(kv, want) && bytes.HasSuffix(kv, suffix) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
				break
			}
		}
	}
	return n
}
