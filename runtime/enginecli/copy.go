package enginecli

import (
	"context"
	"io"

	"github.com/hsbx/hsbx/internal/hostcopy"
	"github.com/hsbx/hsbx/internal/proc"
)

// Copies with the engine's cp, in and out of a container.

// CopyTimeout is how long a copy may take, in engine timeouts: copies
// carry data, so they get ten times an engine call's bound.
const CopyTimeout = 10

// CopyIn implements runtime.Runtime: the archive streams through the
// client's stdin.
func (e *Engine) CopyIn(ctx context.Context, id, dir string, archive io.Reader) error {
	return e.copy(ctx, []string{"-", id + ":" + dir}, archive, nil)
}

// CopyOut implements runtime.Runtime: the archive streams from the
// client's stdout.
func (e *Engine) CopyOut(ctx context.Context, id, src string, w io.Writer) error {
	return e.copy(ctx, []string{id + ":" + src, "-"}, nil, w)
}

// CopyTo implements runtime.Runtime.
func (e *Engine) CopyTo(ctx context.Context, id, src, dst string) error {
	return e.copy(ctx, []string{"--", src, id + ":" + dst}, nil, nil)
}

// CopyFrom implements runtime.Runtime: the archive of `cp ID:SRC -`,
// placed on the host by internal/hostcopy, not by the engine's cp (which
// would plant the sandbox's links to the host's files as they are).
func (e *Engine) CopyFrom(ctx context.Context, id, src, dst string) error {
	return hostcopy.CopyFrom(dst, src, func(w io.Writer) error { return e.CopyOut(ctx, id, src, w) }, hostcopy.Options{})
}

func (e *Engine) copy(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	argv := append([]string{e.bin, "cp"}, args...)
	res, err := e.runner.Run(ctx, proc.Cmd{Argv: argv, Env: e.clientEnv(nil), Stdin: stdin, Stdout: stdout, Timeout: CopyTimeout * e.timeout})
	if err != nil {
		return e.runError(argv, err)
	}
	if res.ExitCode != 0 {
		return e.classify(OpCopy, argv, res.ExitCode, string(res.Stderr))
	}
	return nil
}
