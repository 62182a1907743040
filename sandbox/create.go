package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// Creating a sandbox: the run, a name another container holds, the
// leftovers of an attempt that failed, and the host directories it mounts.

// create runs the container. On any failure it removes exactly what this
// attempt made (found by its nonce label, never by name: the name may
// belong to another process's fresh sandbox by then).
func (s *Sandbox) create(ctx context.Context, name string) (string, error) {
	host, err := s.m.hostFacts(ctx)
	if err != nil {
		return "", err
	}
	mounts, err := s.mounts()
	if err != nil {
		return "", err
	}
	spec := s.spec
	image := spec.Image
	if s.fromImage != "" {
		image = s.fromImage // a snapshot's: local, never pulled
	}
	s6, missing := s.m.imageInit(ctx, image)
	pulled := false
	if missing && s.fromImage != "" {
		return "", fmt.Errorf("%w: the snapshot's image %.19s is gone", ErrNoSnapshot, s.fromImage)
	}
	if missing {
		if err := s.m.pull(ctx, spec.Image); err != nil {
			return "", err
		}
		pulled = true
		s6, _ = s.m.imageInit(ctx, spec.Image)
	}
	spec.ImageInit = s6
	if err := s.checkOCIRuntime(ctx, spec.OCIRuntime, host.OCIRuntimes); err != nil {
		return "", err
	}
	if host.NoNetwork && spec.Network && !spec.Explicit["network"] {
		spec.Network = false // learned earlier: this engine cannot network here
		s.m.c.Warn(noNetworkWarning(host))
	}
	warned := map[string]bool{}
	for {
		rs, warnings, err := buildRun(s.key, name, spec, host, mounts, s.m.getenv)
		if err != nil {
			return "", err
		}
		if spec.Egress != nil && !s.m.c.Channel {
			return "", &SpecError{"network", "network = allow relays through the exec channel, which is off here (exec_channel = false, or a host where hsbx cannot run it); set exec_channel = true, or network = off"}
		}
		for _, w := range warnings {
			if !warned[w] {
				warned[w] = true
				s.m.c.Warn(w)
			}
		}
		// What it is made from as the caller asked (s.spec, not spec as
		// adjusted to this engine: a learned no-network is no difference).
		rs.Labels[LabelConfig] = s.configLabel()
		if s.fromImage != "" {
			rs.Image = s.fromImage
		}
		nonce := randomHex(8)
		rs.Labels[LabelNonce] = nonce
		if cr := creatorLabel(); cr != "" {
			rs.Labels[LabelCreator] = cr
		}
		ca, err := s.newSecretsCA(spec, name, nonce)
		if err != nil {
			return "", err
		}
		id, err := s.rt().Run(ctx, rs)
		if err != nil && ca != nil {
			s.dropCA(nonce)
		}
		if err == nil && !spec.Network {
			err = s.proveOffline(ctx, id, name)
			if err == nil && ca != nil {
				err = s.installTrust(ctx, id, ca)
			}
			if err != nil {
				if ca != nil {
					s.dropCA(nonce)
				}
				return "", err
			}
			if ca != nil {
				egress.PruneCAs(s.keyStateDir(), nonce) // the key's earlier sandboxes' CAs
			}
		}
		if err == nil {
			s.createdNetwork = "any"
			if !spec.Network {
				s.createdNetwork = "none"
			}
			if spec.Egress != nil {
				s.createdNetwork = "allow"
			}
			return id, nil
		}
		if errors.Is(err, runtime.ErrNameInUse) {
			return "", s.checkNameOwner(ctx, name, err)
		}
		s.cleanupAttempt(ctx, nonce)
		if errors.Is(err, runtime.ErrImageNotFound) && !pulled && s.fromImage == "" && s.rt().Capabilities().Pulls {
			// The image went since it was last seen (a cached fact, or an
			// rmi between the look and the create): pull it, then once more.
			s.m.forgetImage(spec.Image)
			if err := s.m.pull(ctx, spec.Image); err != nil {
				return "", err
			}
			pulled = true
			continue
		}
		if spec.Network && !spec.Explicit["network"] && errors.Is(err, runtime.ErrNetworkSetup) {
			s.m.markNoNetwork()
			spec.Network = false
			s.m.c.Warn(noNetworkWarning(host))
			continue
		}
		if spec.OCIRuntime != "" && !errors.Is(err, runtime.ErrTimeout) && !errors.Is(err, runtime.ErrUnreachable) && !errors.Is(err, runtime.ErrImageNotFound) {
			// Refused (no such runtime) or failed to start under it.
			err = &OCIRuntimeError{Runtime: spec.OCIRuntime, Dialect: s.rt().Dialect(), Err: err}
		}
		return "", fmt.Errorf("creating sandbox %s: %w", name, err)
	}
}

// checkNameOwner tells a lost creation race (the name's owner is this key's
// sandbox) from a foreign container squatting on the name.
func (s *Sandbox) checkNameOwner(ctx context.Context, name string, inUse error) error {
	cs, err := s.rt().Inspect(ctx, name)
	if err != nil || len(cs) == 0 {
		s.clearStorageLeftover(ctx, name)
		return inUse // gone again: the caller looks once more
	}
	if !s.key.Matches(cs[0].Labels) {
		return fmt.Errorf("%w: %s (id %.12s) has no hsbx.key=%s label; remove or rename it", ErrForeignName, name, cs[0].ID, s.key.Hash())
	}
	return &nameTakenError{c: cs[0], err: inUse}
}

// clearStorageLeftover handles a name the engine says is in use while no
// container of it can be inspected: with podman, a storage container that
// an interrupted `run` left (Ctrl-C in an earlier up). Another process's
// create passes through that state for a moment, so it is removed only
// once it has stood for youngCreate as seen from here; until then the
// caller keeps looking. The name is this sandbox's (it holds the key's
// hash), and inspect has just found no container of it: `podman rm
// --storage` would remove a listed container too.
func (s *Sandbox) clearStorageLeftover(ctx context.Context, name string) {
	sr, ok := s.rt().(runtime.StorageRemover)
	if !ok || !s.rt().Capabilities().StorageLeftovers {
		return
	}
	now := time.Now()
	if s.storageSeen.IsZero() {
		s.storageSeen = now
		return
	}
	if now.Sub(s.storageSeen) < youngCreate {
		return
	}
	s.storageSeen = time.Time{}
	removed, err := sr.RemoveStorage(ctx, name)
	switch {
	case err != nil:
		s.m.log.Warn("could not remove a storage-only container holding the sandbox's name", "name", name, "error", err)
	case removed:
		s.m.c.Warn(fmt.Sprintf("removed a storage-only container that held sandbox %s's name for %s (an interrupted create had left it; podman lists no such container)", name, youngCreate))
	}
}

// nameTakenError is a lost creation race with the winner already
// inspected, so
// Ensure can act on it without listing again.
type nameTakenError struct {
	c   runtime.Container
	err error
}

func (e *nameTakenError) Error() string { return e.err.Error() }

func (e *nameTakenError) Unwrap() error { return e.err }

func noNetworkWarning(h engineHost) string {
	return fmt.Sprintf("%s cannot set up networking here (rootless, no /dev/net/tun?): default network left off, sandbox runs with --network none", h.Dialect)
}

// cleanupAttempt removes the containers one failed create left behind.
func (s *Sandbox) cleanupAttempt(ctx context.Context, nonce string) {
	ctx = context.WithoutCancel(ctx)
	cs, err := s.rt().List(ctx, runtime.ListOptions{Labels: []string{LabelNonce + "=" + nonce}})
	if err != nil {
		s.m.log.Warn("could not check for a half-made sandbox", "nonce", nonce, "error", err)
		return
	}
	var ids []string
	var kept []runtime.Container
	for _, c := range cs {
		switch {
		case c.Labels[LabelNonce] != nonce:
		case c.State.Alive():
			kept = append(kept, c) // started: a sandbox, maybe in use already
		default:
			ids = append(ids, c.ID)
		}
	}
	if err := s.rt().Remove(ctx, false, ids...); err != nil {
		// Ask the engine what is left: a start that was on its way (an
		// interrupted `run`'s) may have landed meanwhile.
		left, lerr := s.rt().List(ctx, runtime.ListOptions{Labels: []string{LabelNonce + "=" + nonce}})
		var stuck []string
		for _, c := range left {
			switch {
			case lerr != nil || c.Labels[LabelNonce] != nonce:
			case c.State.Alive():
				kept = append(kept, c)
			default:
				stuck = append(stuck, c.ID)
			}
		}
		if lerr != nil || len(stuck) > 0 {
			s.m.c.Warn(fmt.Sprintf("a failed create left container(s) %s behind and they could not be removed: %v", strings.Join(ids, " "), err))
		}
	}
	for _, c := range kept {
		s.m.c.Warn(fmt.Sprintf("the create of sandbox %s did not finish here, but the engine made and started it (%.12s): it is running, is kept, and the next up uses it (%s removes it)", c.Name, c.ID, s.remedy(RemedyDown)))
	}
}

// hostBase is where the key's persistent dirs live: Hermes's layout under
// SandboxDir (TERMINAL_SANDBOX_DIR) when set, else hsbx's own under the
// state dir ("" without either).
func (s *Sandbox) hostBase() string {
	switch {
	case s.spec.SandboxDir != "":
		return filepath.Join(s.spec.SandboxDir, "docker", TaskDirName(s.key.Task))
	case s.stateDir() != "":
		return keystate.Dir(s.stateDir(), s.key.Hash())
	}
	return ""
}

// mounts makes the per-key persistent dirs: Hermes's layout under
// SandboxDir (TERMINAL_SANDBOX_DIR) when set, so both tools see the same
// files for a task, else hsbx's own under the state dir. On Kubernetes
// there are no host dirs: the key's claim is named for the key.
func (s *Sandbox) mounts() (mountPaths, error) {
	m := mountPaths{CallerCwd: s.m.c.Cwd}
	if !s.spec.Persistent {
		return m, nil
	}
	if !s.rt().Capabilities().HostDirs {
		m.Claim = s.key.Name()
		return m, nil
	}
	if s.storage() == StorageVolume {
		m.Volumes = s.keyVolumes()
		return m, nil
	}
	base := s.hostBase()
	if base == "" {
		return m, errors.New("persistent sandboxes need a state directory ($XDG_STATE_HOME or HOME)")
	}
	m.Workspace, m.Home = filepath.Join(base, "workspace"), filepath.Join(base, "home")
	for _, d := range []string{m.Workspace, m.Home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return m, fmt.Errorf("persistent sandbox dir: %w", err)
		}
	}
	return m, nil
}
