package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
)

// Files: one file operation each, made by hsbx's agent inside the running
// sandbox (through the exec channel when it is up: no engine call; else
// one plain exec of the agent, installed first when missing), as the
// sandbox's exec user or FileOptions.User, so the sandbox's own
// permissions decide. Paths are the sandbox's; a relative one is taken
// from its working directory. A sandbox that is not up is brought up
// first, as Exec does. Failures a program branches on are *FileError,
// which matches fs.ErrNotExist, fs.ErrPermission, ErrIsDir, ErrNotDir,
// ErrFileTooLarge or ErrNotEmpty with errors.Is.

// FileOptions are a file operation's options.
type FileOptions struct {
	// User does it as this user of the sandbox (Command.User's forms).
	User string
	// Mode is WriteFile's permission bits (and setuid, setgid, sticky);
	// 0 keeps an existing file's mode, and makes a new one 0644.
	Mode fs.FileMode
	// Recursive: Remove takes a directory with its entries; Watch
	// follows subdirectories.
	Recursive bool
	// MaxBytes bounds ReadFile and WriteFile (0: Config.CopyMaxBytes;
	// none when that is 0 too).
	MaxBytes int64
}

// The kinds of *FileError besides fs.ErrNotExist and fs.ErrPermission.
var (
	ErrIsDir        = errors.New("is a directory")
	ErrNotDir       = errors.New("not a directory")
	ErrFileTooLarge = errors.New("file larger than the size bound")
	ErrNotEmpty     = errors.New("directory not empty")
)

// FileError is a file operation that failed for a reason of the file's:
// Kind is one of the errors above (errors.Is matches it), Msg the agent's
// words.
type FileError struct {
	Op   string // "read", "write", "list", "remove", "watch"
	Path string // the sandbox's absolute path
	Kind error
	Msg  string
}

func (e *FileError) Error() string {
	doing := map[string]string{"read": "reading", "write": "writing", "list": "listing", "remove": "removing", "watch": "watching"}[e.Op]
	if e.Msg == "" {
		return fmt.Sprintf("%s %s in the sandbox: %v", doing, e.Path, e.Kind)
	}
	return fmt.Sprintf("%s %s in the sandbox: %s", doing, e.Path, e.Msg)
}

// Unwrap gives the kind.
func (e *FileError) Unwrap() error { return e.Kind }

// FileInfo is one entry ListDir found.
type FileInfo struct {
	Name string `json:"name"`
	// Type: "file", "dir", "symlink" or "other" (a device, pipe, socket).
	Type    string      `json:"type"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"-"`
	ModTime time.Time   `json:"-"`
	Target  string      `json:"target,omitempty"` // a symlink's
}

// FileEvent is a change Watch saw: Op is "created", "written" or
// "removed" (a rename is both); "overflow" says changes were lost (the
// kernel's queue filled).
type FileEvent struct {
	Op    string `json:"event"`
	Path  string `json:"path"`
	IsDir bool   `json:"dir,omitempty"`
}

// noFileMax is "no bound" (what the agent still takes as a number).
const noFileMax = 1 << 62

func (s *Sandbox) fileMax(o FileOptions) int64 {
	switch {
	case o.MaxBytes > 0:
		return o.MaxBytes
	case s.m.c.CopyMaxBytes > 0:
		return s.m.c.CopyMaxBytes
	}
	return noFileMax
}

// ReadFile writes the regular file at path in the sandbox to w.
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer, o FileOptions) error {
	path = s.filePath(path)
	return s.fileOp(ctx, "read", path, o, nil, w, "file-read", path, strconv.FormatInt(s.fileMax(o), 10))
}

// WriteFile writes what r gives to path in the sandbox, whole or not at
// all (a reader in the sandbox never sees half of it): missing parent
// directories are made, a link at path is written through, an existing
// file keeps its owner (and its mode unless o.Mode is set).
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, o FileOptions) error {
	path = s.filePath(path)
	mode := "-"
	if o.Mode != 0 {
		mode = strconv.FormatUint(uint64(UnixMode(o.Mode)), 8)
	}
	// At most one byte over the bound is sent: the agent refuses the
	// write then, and a stream without end still ends.
	limit := s.fileMax(o)
	return s.fileOp(ctx, "write", path, o, &countingReader{r: io.LimitReader(r, limit+1)}, nil, "file-write", path, mode, strconv.FormatInt(limit, 10))
}

// ListDir lists directory path in the sandbox (links not followed).
func (s *Sandbox) ListDir(ctx context.Context, path string, o FileOptions) ([]FileInfo, error) {
	path = s.filePath(path)
	var out []FileInfo
	var perr error
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		perr = readLines(pr, func(line []byte) error {
			var e wire.FileEntry
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("%w: the agent's listing: %v", runtime.ErrBadOutput, err)
			}
			out = append(out, FileInfo{Name: e.Name, Type: e.Type, Size: e.Size, Mode: FileModeOf(e.Mode),
				ModTime: time.Unix(0, e.MTime), Target: e.Target})
			return nil
		})
		pr.CloseWithError(perr)
	}()
	err := s.fileOp(ctx, "list", path, o, nil, pw, "file-list", path)
	pw.Close()
	<-done
	if err == nil {
		err = perr
	}
	return out, err
}

// Remove removes path in the sandbox (a link, not what it names); a
// directory with entries only with o.Recursive. "/" is refused.
func (s *Sandbox) Remove(ctx context.Context, path string, o FileOptions) error {
	path = s.filePath(path)
	if base := path[strings.LastIndexByte(path, '/')+1:]; base == "." || base == ".." {
		// As rm does: "d/.." names d's parent, and removing "everything
		// in it" once emptied the parent of a path that looked like d.
		return &fs.PathError{Op: "remove", Path: path, Err: errDotPath}
	}
	return s.fileOp(ctx, "remove", path, o, nil, nil, "file-remove", path, boolArg(o.Recursive))
}

// Watch calls fn with each change under directory path in the sandbox (its
// subdirectories too with o.Recursive) until ctx ends (nil) or path goes
// (nil, after its "removed"). It returns once the watch is in place only
// through fn: the first call is a "watching" event.
func (s *Sandbox) Watch(ctx context.Context, path string, o FileOptions, fn func(FileEvent)) error {
	path = s.filePath(path)
	pr, pw := io.Pipe()
	var perr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		perr = readLines(pr, func(line []byte) error {
			var e wire.FileEvent
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("%w: the agent's watch: %v", runtime.ErrBadOutput, err)
			}
			fn(FileEvent{Op: e.Event, Path: e.Path, IsDir: e.Type == "dir"})
			return nil
		})
		pr.CloseWithError(perr)
	}()
	err := s.fileOp(ctx, "watch", path, o, nil, pw, "file-watch", path, boolArg(o.Recursive))
	pw.Close()
	<-done
	if ctx.Err() != nil {
		return nil // ended by the caller, as asked
	}
	if err == nil {
		err = perr
	}
	return err
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// unixBits are Go's names of the Unix mode bits beyond the permissions.
var unixBits = map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000}

// FileModeOf is the Unix mode u (permissions, setuid, setgid, sticky) in
// Go's spelling.
func FileModeOf(u uint32) fs.FileMode {
	m := fs.FileMode(u & 0o777)
	for bit, v := range unixBits {
		if u&v != 0 {
			m |= bit
		}
	}
	return m
}

// UnixMode is m's permissions, setuid, setgid and sticky bits as a Unix
// mode (what ls -l and chmod show).
func UnixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	for bit, v := range unixBits {
		if m&bit != 0 {
			u |= v
		}
	}
	return u
}

// readLines calls fn with each line of r (at most 1 MiB each).
func readLines(r io.Reader, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			_, _ = io.Copy(io.Discard, r)
			return err
		}
	}
	return sc.Err()
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// trimAgent is the agent's words without its prefix.
func trimAgent(b []byte) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "hsbx agent: "))
}

// SandboxPath is path as the file operations take it: the sandbox's
// absolute path (a relative one from its working directory).
func (s *Sandbox) SandboxPath(path string) string { return s.filePath(path) }

// filePath is p as the sandbox's absolute path.
func (s *Sandbox) filePath(p string) string {
	p = s.sandboxPath(p)
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/" // "//"
		}
	}
	return p
}

// errDotPath is a path to remove whose last element is . or ..: refused.
var errDotPath = errors.New("refusing to remove a path that ends in . or .. (name the directory itself)")

// fileOp runs the agent's file mode args in the running sandbox (up
// first when it is not) as o.User, and says what its status means.
//
// data, when not nil, is the operation's input: it goes chunked
// (wire.Chunked), so the agent never takes input cut short — hsbx killed,
// a holder's client gone — for the whole of it.
func (s *Sandbox) fileOp(ctx context.Context, op, path string, o FileOptions, data *countingReader, stdout io.Writer, args ...string) error {
	if err := s.key.Validate(); err != nil {
		return err
	}
	if err := validUser(o.User); err != nil {
		return err
	}
	if strings.ContainsRune(path, 0) {
		return &SpecError{Setting: "path", Msg: fmt.Sprintf("%q holds a NUL byte", path)}
	}
	began := time.Now()
	st := &execStats{in: -1, out: -1, err: -1}
	var stdin io.Reader
	if data != nil {
		stdin = wire.Chunked(data)
	}
	code, errb, err := s.agentRun(ctx, agentReq{args: args, user: o.User, stdin: stdin, stdout: stdout}, st)
	if data != nil {
		st.in = data.n // the data's bytes, not its chunks'
	}
	if !s.m.c.NoRecord {
		s.recordFile(op, path, o.User, began, code, err, st)
	}
	if err != nil {
		return fmt.Errorf("%s %s in sandbox %s: %w", op, path, s.name, err)
	}
	msg := trimAgent(errb.Bytes())
	kinds := map[int]error{wire.ExitFileNotFound: fs.ErrNotExist, wire.ExitFileIsDir: ErrIsDir, wire.ExitFileNotDir: ErrNotDir,
		wire.ExitFilePermission: fs.ErrPermission, wire.ExitFileTooLarge: ErrFileTooLarge, wire.ExitFileNotEmpty: ErrNotEmpty}
	switch kind, ok := kinds[code]; {
	case code == 0:
		return nil
	case ok:
		return &FileError{Op: op, Path: path, Kind: kind, Msg: msg}
	case code == 2:
		return fmt.Errorf("%s %s in sandbox %s: %w: hsbx's agent here has no file operations (an exec_channel_agent of an older hsbx?): %s",
			op, path, s.name, runtime.ErrEngine, msg)
	}
	return fmt.Errorf("%s %s in sandbox %s: hsbx's agent failed (exit %d): %s", op, path, s.name, code, msg)
}

// agentReq is a run of hsbx's agent: its mode's arguments, the user it
// runs as, its streams, and (for a process it starts) the environment
// values and working directory.
type agentReq struct {
	args   []string
	user   string
	stdin  io.Reader
	stdout io.Writer
	env    map[string]string
	dir    string
	steer  string    // a name in env the engine client reads: only the channel carries it
	stderr io.Writer // also given the mode's stderr, when set
}

// agentRun runs hsbx's agent with args in the sandbox's running container,
// through the exec channel when it takes the command, else as one plain
// exec of the agent (the CLI then starts its holder for the next one). A
// sandbox that is not up is ensured first; a container the engine says
// went or stopped under the plain exec is ensured once more.
func (s *Sandbox) agentRun(ctx context.Context, q agentReq, st *execStats) (int, *proc.TailBuffer, error) {
	c, errb := agentCommand(q.args, q.stdin, q.stdout)
	c.User, c.stats, c.WorkDir = q.user, st, q.dir
	var stderr io.Writer = errb
	if q.stderr != nil {
		stderr = io.MultiWriter(errb, q.stderr)
		c.Stderr = stderr
	}
	env := q.env
	if env == nil {
		env = map[string]string{}
	}
	user := q.user
	agentUser := user != "" && s.engineUserLacks() != ""
	viaAgent := s.usesChannel(c) && (user == "" || !s.spec.RunAsHostUser || agentUser)
	target := s.warmTarget()
	for attempt := 0; ; attempt++ {
		if target == "" {
			res, err := s.Ensure(ctx)
			if err != nil {
				return -1, errb, err
			}
			target = res.ID
		}
		if viaAgent {
			code, err := s.execChannel(ctx, target, c, env)
			if !errors.Is(err, errNotReached) {
				return code, errb, err
			}
		}
		if agentUser {
			// Only the agent holds the process to the user: the holder
			// this CLI starts, waited for, then asked once more.
			if viaAgent && s.awaitHolder(ctx, target) {
				if code, err := s.execChannel(ctx, target, c, env); !errors.Is(err, errNotReached) {
					return code, errb, err
				}
			}
			return -1, errb, s.userError(user, "the channel is "+s.ChannelStatus(target))
		}
		if q.steer != "" && !s.rt().Capabilities().ExecEnvInBand {
			return -1, errb, s.steerError(q.steer, "the channel is "+s.ChannelStatus(target))
		}
		a := s.agent(ctx, target, s.execUser())
		if user != "" {
			a.User = user
		}
		in := q.stdin
		if c.tap != nil {
			in = c.tap.plain()
		}
		release := s.markInUse()
		out, inCount := &countingWriter{w: io.Discard}, &countingReader{}
		if q.stdout != nil {
			out.w = q.stdout
		}
		if in != nil {
			inCount.r = in
			in = inCount
		}
		code, err := channel.RunAgent(ctx, a, channel.AgentExec{Args: q.args, Stdin: in, Stdout: out, Stderr: stderr, Env: q.env, WorkDir: q.dir})
		release()
		st.via, st.in, st.out, st.err = "engine", inCount.n, out.n, int64(len(errb.Bytes()))
		if err == nil && viaAgent {
			s.afterPlainExec(target)
		}
		if attempt == 0 && (errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotRunning)) && q.stdin == nil {
			if cur, ierr := s.inspectOwn(ctx, target); ierr == nil && (cur == nil || cur.State != runtime.StateRunning) {
				s.forget(target)
				target = ""
				continue
			}
		}
		return code, errb, err
	}
}
