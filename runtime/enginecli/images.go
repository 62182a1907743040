package enginecli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
)

// Images: inspected, committed (a snapshot's), listed, removed and pulled.

// InspectImage implements runtime.Runtime.
func (e *Engine) InspectImage(ctx context.Context, ref string) (runtime.Image, error) {
	res, err := e.call(ctx, OpImage, []string{"image", "inspect", ref}, e.timeout)
	if err != nil {
		return runtime.Image{}, err
	}
	img, err := ParseImageInspect(res.Stdout)
	if err != nil {
		return runtime.Image{}, fmt.Errorf("%w: %s image inspect: %v", runtime.ErrBadOutput, e.d.Name(), err)
	}
	return img, nil
}

// Commit implements runtime.Committer: `commit --pause=true` (podman's
// default is not to pause), one --change a label or variable.
func (e *Engine) Commit(ctx context.Context, s runtime.CommitSpec) (string, error) {
	args := []string{"commit", "--pause=" + strconv.FormatBool(!s.NoPause)}
	if e.d.Name() == runtime.Podman {
		args = append(args, "-q") // the id alone, not the copy's progress
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		v := s.Labels[k]
		if strings.ContainsAny(k+v, "\\\"' \t\n\r") || k == "" {
			return "", fmt.Errorf("commit: label %q=%q has a character the engines' change parser reads apart", k, v)
		}
		if v == "" {
			v = `""`
		}
		args = append(args, "--change", "LABEL "+k+"="+v)
	}
	for _, k := range s.BlankEnv {
		if strings.ContainsAny(k, "\\\"' \t\n\r=") || k == "" {
			continue // no such name can be set by -e either
		}
		args = append(args, "--change", "ENV "+k+`=""`)
	}
	args = append(args, s.ID, s.Ref)
	res, err := e.call(ctx, OpCommit, args, 4*e.timeout)
	if err != nil {
		return "", err
	}
	id := ImageID(lastLine(res.Stdout))
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+64 {
		return "", fmt.Errorf("%w: %s commit printed %q, not an image id", runtime.ErrBadOutput, e.d.Name(), clip(res.Stdout))
	}
	return id, nil
}

// Images implements runtime.Committer.
func (e *Engine) Images(ctx context.Context, labels ...string) ([]runtime.Image, error) {
	args := []string{"image", "ls", "-q", "--no-trunc"}
	for _, l := range labels {
		args = append(args, "--filter", "label="+l)
	}
	res, err := e.call(ctx, OpImages, args, e.timeout)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, f := range strings.Fields(string(res.Stdout)) {
		if id := ImageID(f); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	res, err = e.call(ctx, OpImage, append([]string{"image", "inspect"}, ids...), e.timeout)
	if err != nil && !errors.Is(err, runtime.ErrImageNotFound) {
		return nil, err
	}
	imgs, perr := ParseImagesInspect(res.Stdout)
	if perr != nil {
		if err != nil {
			return nil, nil // every one went between the two calls
		}
		return nil, fmt.Errorf("%w: %s image inspect: %v", runtime.ErrBadOutput, e.d.Name(), perr)
	}
	return imgs, nil
}

// RemoveImages implements runtime.Committer: `image rm` of each id, one
// call each (an image in use must not keep the others).
func (e *Engine) RemoveImages(ctx context.Context, ids ...string) error {
	var errs []error
	for _, id := range ids {
		if _, err := e.call(ctx, OpImageRm, []string{"image", "rm", id}, e.timeout); err != nil && !errors.Is(err, runtime.ErrImageNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PullRules classify a failed pull by the words both engines pass on from
// their registry client — Go's network and TLS errors, the registry API's
// codes — before the dialect's own rules (podman's "initializing source"
// heads network failures and missing images alike). Captured here: docker
// 20.10's and podman 4.3's DNS failure; the others are those libraries'
// fixed texts.
var PullRules = []Rule{
	{Fragment: "tls handshake timeout", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "x509:", Kind: runtime.ErrRegistryTLS},
	{Fragment: "tls: ", Kind: runtime.ErrRegistryTLS},
	{Fragment: "certificate signed by unknown authority", Kind: runtime.ErrRegistryTLS},
	{Fragment: "no such host", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "connection refused", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "network is unreachable", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "no route to host", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "i/o timeout", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "server misbehaving", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "proxyconnect", Kind: runtime.ErrRegistryUnreachable},
	{Fragment: "unauthorized", Kind: runtime.ErrRegistryAuth},
	{Fragment: "authentication required", Kind: runtime.ErrRegistryAuth},
	{Fragment: "incorrect username or password", Kind: runtime.ErrRegistryAuth},
	{Fragment: "manifest unknown", Kind: runtime.ErrImageNotFound},
	{Fragment: "repository does not exist", Kind: runtime.ErrImageNotFound},
	{Fragment: "name unknown", Kind: runtime.ErrImageNotFound},
	{Fragment: "not found", Kind: runtime.ErrImageNotFound},
}

// DefaultPullTimeout bounds an image pull when the caller gives no bound.
const DefaultPullTimeout = 10 * time.Minute

// Pull implements runtime.Runtime: `pull -- REF`, the engine's progress to
// progress (nil: discarded; a terminal gets the engine's own progress
// bars), its stderr kept for the error. A failure the engine does not
// otherwise explain is ErrImageNotFound; running out of time is
// ErrPullTimeout.
func (e *Engine) Pull(ctx context.Context, ref string, progress io.Writer, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultPullTimeout
	}
	if progress == nil {
		progress = io.Discard
	}
	argv := []string{e.bin, "pull", "--", ref}
	cmd := proc.Cmd{Argv: argv, Env: e.clientEnv(nil), Stdout: progress, Timeout: timeout}
	if progress != io.Discard && e.d.Name() == runtime.Podman {
		// podman draws its progress on stderr (docker on stdout): shown
		// too, less its final "Error: " line, which the error carries.
		cmd.Stderr = newErrorLineFilter(progress, "Error: ")
	}
	res, err := e.runner.Run(ctx, cmd)
	if err != nil {
		err = e.runError(argv, err)
		if errors.Is(err, runtime.ErrTimeout) {
			return fmt.Errorf("%w after %s (pull_timeout): %w", runtime.ErrPullTimeout, timeout, err)
		}
		return err
	}
	if res.ExitCode != 0 {
		kind := Match(PullRules, string(res.Stderr))
		if kind == nil {
			kind = e.d.Classify(OpPull, res.ExitCode, string(res.Stderr))
		}
		if kind == nil || errors.Is(kind, runtime.ErrEngine) {
			kind = runtime.ErrImageNotFound
		}
		return &runtime.EngineError{Kind: kind, Argv: argv, ExitCode: res.ExitCode, Stderr: strings.TrimSpace(string(res.Stderr))}
	}
	return nil
}
