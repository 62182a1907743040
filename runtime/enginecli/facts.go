package enginecli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// What the engine says of itself: its version, its facts, its OCI runtimes.

// Version implements runtime.Runtime. When the engine is unreachable the
// client version is still returned, with an error wrapping ErrUnreachable.
func (e *Engine) Version(ctx context.Context) (runtime.Version, error) {
	res, err := e.call(ctx, OpVersion, []string{"version", "--format", "{{json .}}"}, e.timeout)
	if err != nil && !errors.Is(err, runtime.ErrUnreachable) {
		return runtime.Version{}, err
	}
	v, perr := e.d.ParseVersion(res.Stdout)
	if perr != nil {
		if err != nil {
			return runtime.Version{}, err
		}
		return runtime.Version{}, fmt.Errorf("%w: %s version: %v", runtime.ErrBadOutput, e.d.Name(), perr)
	}
	return v, err
}

// Info implements runtime.Runtime.
func (e *Engine) Info(ctx context.Context) (runtime.Info, error) {
	args := []string{"info", "--format", e.d.InfoFormat()}
	res, err := e.call(ctx, OpInfo, args, e.timeout)
	if err != nil {
		return runtime.Info{}, err
	}
	info, err := e.d.ParseInfo(res.Stdout)
	if err != nil {
		if errors.Is(err, runtime.ErrUnreachable) {
			return info, &runtime.EngineError{Kind: runtime.ErrUnreachable, Argv: append([]string{e.bin}, args...),
				Stderr: strings.TrimPrefix(err.Error(), runtime.ErrUnreachable.Error()+": ")}
		}
		return info, fmt.Errorf("%w: %s info: %v", runtime.ErrBadOutput, e.d.Name(), err)
	}
	return info, nil
}

// OCIRuntimes implements runtime.Runtime: what info says (one call).
func (e *Engine) OCIRuntimes(ctx context.Context) (runtime.OCIRuntimes, error) {
	info, err := e.Info(ctx)
	return info.OCIRuntimes, err
}
