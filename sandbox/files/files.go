// Package files reads, writes, lists, removes and watches files in a
// sandbox: one operation each, made by hsbx's agent inside the running
// sandbox (through the exec channel when it is up: no engine call; else
// one plain exec of the agent, installed first when missing), as the
// sandbox's exec user or Options.User, so the sandbox's own permissions
// decide. Paths are the sandbox's; a relative one is taken from its
// working directory. A sandbox that is not up is brought up first, as
// Exec does. Failures a program branches on are *Error, which matches
// fs.ErrNotExist, fs.ErrPermission, ErrIsDir, ErrNotDir, ErrTooLarge or
// ErrNotEmpty with errors.Is.
//
//	f := files.Of(sb)
//	err := f.Write(ctx, "notes.txt", strings.NewReader("hi\n"), files.Options{})
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/iocount"
	"github.com/hsbx/hsbx/internal/wire"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/sandbox"
)

// Files are a sandbox's files.
type Files struct{ d sandbox.Door }

// Of is sb's files.
func Of(sb *sandbox.Sandbox) Files { return Files{sb.Door()} }

// Options are a file operation's options.
type Options struct {
	// User does it as this user of the sandbox (Command.User's forms).
	User string
	// Mode is Write's permission bits (and setuid, setgid, sticky); 0
	// keeps an existing file's mode, and makes a new one 0644.
	Mode fs.FileMode
	// Recursive: Remove takes a directory with its entries; Watch
	// follows subdirectories.
	Recursive bool
	// MaxBytes bounds Read and Write (0: Config.CopyMaxBytes; none when
	// that is 0 too).
	MaxBytes int64
}

// The kinds of *Error besides fs.ErrNotExist and fs.ErrPermission.
var (
	ErrIsDir    = errors.New("is a directory")
	ErrNotDir   = errors.New("not a directory")
	ErrTooLarge = errors.New("file larger than the size bound")
	ErrNotEmpty = errors.New("directory not empty")
)

// Error is a file operation that failed for a reason of the file's: Kind
// is one of the errors above (errors.Is matches it), Msg the agent's
// words.
type Error struct {
	Op   string // "read", "write", "list", "remove", "watch"
	Path string // the sandbox's absolute path
	Kind error
	Msg  string
}

func (e *Error) Error() string {
	doing := map[string]string{"read": "reading", "write": "writing", "list": "listing", "remove": "removing", "watch": "watching"}[e.Op]
	if e.Msg == "" {
		return fmt.Sprintf("%s %s in the sandbox: %v", doing, e.Path, e.Kind)
	}
	return fmt.Sprintf("%s %s in the sandbox: %s", doing, e.Path, e.Msg)
}

// Unwrap gives the kind.
func (e *Error) Unwrap() error { return e.Kind }

// Info is one entry List found.
type Info struct {
	Name string `json:"name"`
	// Type: "file", "dir", "symlink" or "other" (a device, pipe, socket).
	Type    string      `json:"type"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"-"`
	ModTime time.Time   `json:"-"`
	Target  string      `json:"target,omitempty"` // a symlink's
}

// Event is a change Watch saw: Op is "created", "written" or "removed"
// (a rename is both); "overflow" says changes were lost (the kernel's
// queue filled).
type Event struct {
	Op    string `json:"event"`
	Path  string `json:"path"`
	IsDir bool   `json:"dir,omitempty"`
}

// noMax is "no bound" (what the agent still takes as a number).
const noMax = 1 << 62

func (f Files) max(o Options) int64 {
	switch {
	case o.MaxBytes > 0:
		return o.MaxBytes
	case f.d.MaxBytes() > 0:
		return f.d.MaxBytes()
	}
	return noMax
}

// Path is path as the file operations take it: the sandbox's absolute
// path (a relative one from its working directory).
func (f Files) Path(path string) string { return f.d.Path(path) }

// Read writes the regular file at path in the sandbox to w.
func (f Files) Read(ctx context.Context, path string, w io.Writer, o Options) error {
	path = f.d.Path(path)
	return f.op(ctx, "read", path, o, nil, w, agentapi.FileRead{Path: path, Max: f.max(o)})
}

// Write writes what r gives to path in the sandbox, whole or not at all
// (a reader in the sandbox never sees half of it): missing parent
// directories are made, a link at path is written through, an existing
// file keeps its owner (and its mode unless o.Mode is set).
func (f Files) Write(ctx context.Context, path string, r io.Reader, o Options) error {
	path = f.d.Path(path)
	mode := int64(agentapi.KeepMode)
	if o.Mode != 0 {
		mode = int64(UnixMode(o.Mode))
	}
	// At most one byte over the bound is sent: the agent refuses the
	// write then, and a stream without end still ends.
	limit := f.max(o)
	return f.op(ctx, "write", path, o, &iocount.Reader{R: io.LimitReader(r, limit+1)}, nil, agentapi.FileWrite{Path: path, Mode: mode, Max: limit})
}

// List lists directory path in the sandbox (links not followed).
func (f Files) List(ctx context.Context, path string, o Options) ([]Info, error) {
	path = f.d.Path(path)
	var out []Info
	err := f.lines(ctx, "list", path, o, agentapi.FileList{Path: path}, func(line []byte) error {
		var e agentapi.FileEntry
		if err := agentapi.ReadJSON(line, &e); err != nil {
			return fmt.Errorf("%w: the agent's listing: %v", runtime.ErrBadOutput, err)
		}
		out = append(out, Info{Name: e.Name, Type: e.Type, Size: e.Size, Mode: FileModeOf(e.Mode),
			ModTime: time.Unix(0, e.MTime), Target: e.Target})
		return nil
	})
	return out, err
}

// Remove removes path in the sandbox (a link, not what it names); a
// directory with entries only with o.Recursive. "/" is refused.
func (f Files) Remove(ctx context.Context, path string, o Options) error {
	path = f.d.Path(path)
	if base := path[strings.LastIndexByte(path, '/')+1:]; base == "." || base == ".." {
		// As rm does: "d/.." names d's parent, and removing "everything
		// in it" once emptied the parent of a path that looked like d.
		return &fs.PathError{Op: "remove", Path: path, Err: errDotPath}
	}
	return f.op(ctx, "remove", path, o, nil, nil, agentapi.FileRemove{Path: path, Recursive: o.Recursive})
}

// errDotPath is a path to remove whose last element is . or ..: refused.
var errDotPath = errors.New("refusing to remove a path that ends in . or .. (name the directory itself)")

// Watch calls fn with each change under directory path in the sandbox
// (its subdirectories too with o.Recursive) until ctx ends (nil) or path
// goes (nil, after its "removed"). It returns once the watch is in place
// only through fn: the first call is a "watching" event.
func (f Files) Watch(ctx context.Context, path string, o Options, fn func(Event)) error {
	path = f.d.Path(path)
	err := f.lines(ctx, "watch", path, o, agentapi.FileWatch{Path: path, Recursive: o.Recursive}, func(line []byte) error {
		var e agentapi.FileEvent
		if err := agentapi.ReadJSON(line, &e); err != nil {
			return fmt.Errorf("%w: the agent's watch: %v", runtime.ErrBadOutput, err)
		}
		fn(Event{Op: e.Event, Path: e.Path, IsDir: e.Type == "dir"})
		return nil
	})
	if ctx.Err() != nil {
		return nil // ended by the caller, as asked
	}
	return err
}

// lines runs call, whose output is lines each given to fn as it comes.
func (f Files) lines(ctx context.Context, op, path string, o Options, call agentapi.Call, fn func([]byte) error) error {
	pr, pw := io.Pipe()
	var perr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		perr = agentapi.EachLine(pr, fn)
		pr.CloseWithError(perr)
	}()
	err := f.op(ctx, op, path, o, nil, pw, call)
	pw.Close()
	<-done
	if err == nil {
		err = perr
	}
	return err
}

// op runs the agent's file mode call in the running sandbox (up first
// when it is not) as o.User, and says what its status means.
//
// data, when not nil, is the operation's input: it goes chunked
// (wire.Chunked), so the agent never takes input cut short — hsbx killed,
// a holder's client gone — for the whole of it.
func (f Files) op(ctx context.Context, op, path string, o Options, data *iocount.Reader, stdout io.Writer, call agentapi.Call) error {
	if err := f.d.Check(o.User); err != nil {
		return err
	}
	if strings.ContainsRune(path, 0) {
		return &sandbox.SpecError{Setting: "path", Msg: fmt.Sprintf("%q holds a NUL byte", path)}
	}
	began := time.Now()
	var stdin io.Reader
	if data != nil {
		stdin = wire.Chunked(data)
	}
	res, err := f.d.Run(ctx, sandbox.AgentRun{Args: call.Args(), User: o.User, Stdin: stdin, Stdout: stdout})
	if data != nil {
		res.In = data.N // the data's bytes, not its chunks'
	}
	f.d.Record(sandbox.Ran{Kind: "file " + op, Path: path, User: o.User, Began: began, Res: res, Err: err})
	if err != nil {
		return fmt.Errorf("%s %s in sandbox %s: %w", op, path, f.d.Name(), err)
	}
	msg := res.Message()
	kinds := map[int]error{agentapi.ExitFileNotFound: fs.ErrNotExist, agentapi.ExitFileIsDir: ErrIsDir, agentapi.ExitFileNotDir: ErrNotDir,
		agentapi.ExitFilePermission: fs.ErrPermission, agentapi.ExitFileTooLarge: ErrTooLarge, agentapi.ExitFileNotEmpty: ErrNotEmpty}
	switch kind, ok := kinds[res.Code]; {
	case res.Code == 0:
		return nil
	case ok:
		return &Error{Op: op, Path: path, Kind: kind, Msg: msg}
	case res.Code == 2:
		return fmt.Errorf("%s %s in sandbox %s: %w: hsbx's agent here has no file operations (an exec_channel_agent of an older hsbx?): %s",
			op, path, f.d.Name(), runtime.ErrEngine, msg)
	}
	return fmt.Errorf("%s %s in sandbox %s: hsbx's agent failed (exit %d): %s", op, path, f.d.Name(), res.Code, msg)
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
