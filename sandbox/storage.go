package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// Where a persistent sandbox keeps /workspace and /root (Spec.Storage):
// host directories bound into it (bind), or two named volumes of the
// engine labelled with the key (volume: nothing of the host is bound).
// Either outlives the sandbox: down keeps them for the key's next one;
// Storage.Purge (down --purge) removes them once no sandbox of the key
// exists. On Kubernetes they are the key's claim (Spec.StorageClass).

// LabelVolume names what a key's volume holds ("workspace" or "home").
const LabelVolume = "hsbx.volume"

// Storage is a key's persistent files: what down keeps and down --purge
// removes (Sandbox.Storage).
type Storage struct{ s *Sandbox }

// Storage is the key's persistent files, in host directories or the
// engine's volumes.
func (s *Sandbox) Storage() Storage { return Storage{s} }

// location is where the manager's engine runs (runtime.Locator), with
// Config.SharedPaths added to what it shares; a runtime that does not say
// binds no host directory (kubectl) or is the caller's own.
func (m *Manager) location() runtime.Location {
	var l runtime.Location
	if lr, ok := m.c.Runtime.(runtime.Locator); ok {
		l = lr.Location()
	}
	for _, p := range m.c.SharedPaths {
		l.Shared = append(l.Shared, filepath.Clean(p))
	}
	return l
}

// StorageAt resolves a storage setting (Spec.Storage) for an engine at
// loc whose host directories would live under base (the state dir):
// StorageAuto is StorageVolume where loc does not reach base.
func StorageAt(setting string, loc runtime.Location, base string) string {
	switch setting {
	case StorageBind, StorageVolume:
		return setting
	}
	if !loc.Reaches(filepath.Clean(base)) {
		return StorageVolume
	}
	return StorageBind
}

// storage is where this sandbox keeps /workspace and /root: StorageBind,
// StorageVolume, or "" (not persistent, or a runtime without host
// directories: Kubernetes's claim, or memory).
func (s *Sandbox) storage() string {
	if !s.spec.Persistent || !s.rt().Capabilities().HostDirs {
		return ""
	}
	if _, ok := s.rt().(runtime.Volumes); !ok && s.spec.Storage != StorageVolume {
		return StorageBind
	}
	return StorageAt(s.spec.Storage, s.m.location(), s.hostBase())
}

// keyVolumes are the named volumes of the key's storage = volume: one for
// /workspace, one for /root, each labelled with the key.
func (s *Sandbox) keyVolumes() []runtime.Volume {
	var out []runtime.Volume
	for _, what := range []string{"workspace", "home"} {
		l := s.key.Labels()
		l[LabelVolume] = what
		out = append(out, runtime.Volume{Name: s.key.Name() + "-" + what, Labels: l})
	}
	return out
}

// checkPlace refuses, before any engine call, a setting that would hand
// an engine on another machine a host path it cannot have: the caller's
// directory, a volumes entry, /workspace and /root bound from the state
// dir, this machine's user id. Paths under the location's Shared pass.
func (s *Sandbox) checkPlace() error {
	loc := s.m.location()
	if !loc.Remote {
		return nil
	}
	return placement(s.spec, loc, s.hostBase(), s.m.c.Cwd, s.rt().Capabilities().HostDirs, s.rt().Dialect())
}

// placement is checkPlace's judgement, for a remote loc.
func placement(s Spec, loc runtime.Location, base, cwd string, hostDirs bool, d runtime.Dialect) error {
	where := fmt.Sprintf("the engine runs on another machine (%s), where this machine's paths do not exist", loc)
	shared := "; if that machine has it at the same path (podman machine's mounts, a shared file system), name it in shared_paths"
	if s.MountCwdToWorkspace && !loc.Reaches(filepath.Clean(cwd)) {
		return &SpecError{"mount_cwd_to_workspace", fmt.Sprintf("%s: the caller's directory %s would be looked up there; set mount_cwd_to_workspace = false and copy it in (hsbx cp %s/. :/workspace)%s", where, cwd, cwd, shared)}
	}
	for _, v := range s.Volumes {
		vol, err := ParseVolume(v)
		if err == nil && !loc.Reaches(filepath.Clean(vol.Host)) {
			return &SpecError{"volumes", fmt.Sprintf("%s: %s would be looked up there; remove it from volumes and copy the files in (hsbx cp), or keep them in the sandbox's /workspace (storage = volume keeps it)%s", where, vol.Host, shared)}
		}
	}
	if s.RunAsHostUser && len(loc.Shared) == 0 {
		return &SpecError{"run_as_host_user", fmt.Sprintf("%s: this machine's user id owns nothing there; set run_as_host_user = false (hsbx exec --user runs a command as a sandbox user)", where)}
	}
	if s.OCIRuntime != "" && d == runtime.Podman {
		// podman's remote client has no --runtime ("unknown flag"): the
		// service runs every container under its own default.
		return &SpecError{"oci_runtime", fmt.Sprintf("the engine is remote (%s): podman's remote client cannot choose an OCI runtime; make %s its service's default there ([engine] runtime), unset oci_runtime", loc, s.OCIRuntime)}
	}
	if hostDirs && s.Persistent && s.Storage == StorageBind && !loc.Reaches(filepath.Clean(base)) {
		return &SpecError{"storage", fmt.Sprintf("%s: /workspace and /root would be bound from %s; set storage = volume (or auto) to keep them in the engine's volumes%s", where, base, shared)}
	}
	return nil
}

// HostDirs are the key's persistent host directories that exist now: the
// /workspace and /root a persistent sandbox binds (storage = bind; none
// on Kubernetes, where they are the key's claim). Down keeps them, so the
// next sandbox of the key sees the same files; Purge removes them.
func (st Storage) HostDirs() []string {
	s := st.s
	base := s.hostBase()
	if base == "" || !s.rt().Capabilities().HostDirs {
		return nil
	}
	var out []string
	for _, d := range []string{filepath.Join(base, "workspace"), filepath.Join(base, "home")} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// Volumes are the key's named volumes that exist now, when its storage is
// volume (none, with no engine call, otherwise), verified by their labels
// (one engine call, two when there are some): kept by down, removed by
// Purge.
func (st Storage) Volumes(ctx context.Context) ([]string, error) {
	if st.s.storage() != StorageVolume {
		return nil, nil
	}
	return st.volumes(ctx)
}

// volumes are the key's volumes whatever its storage is now.
func (st Storage) volumes(ctx context.Context) ([]string, error) {
	vr, ok := st.s.rt().(runtime.Volumes)
	if !ok {
		return nil, nil
	}
	vs, err := vr.ListVolumes(ctx, map[string]string{LabelKey: st.s.key.Hash()})
	if err != nil {
		return nil, fmt.Errorf("listing the key's volumes: %w", err)
	}
	var out []string
	for _, v := range vs {
		if st.s.key.Matches(v.Labels) && v.Labels[LabelVolume] != "" {
			out = append(out, v.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// VolumeListing is one key's volume as `hsbx ls --volumes` shows it.
type VolumeListing struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Task    string `json:"task"`
	Holds   string `json:"holds"` // "workspace" (/workspace) or "home" (/root)
}

// Volumes lists the volumes hsbx made for the keys of scope sc (every
// profile's with all), by their labels: what down keeps and down --purge
// removes. None where the engine has no named volumes.
func (m *Manager) Volumes(ctx context.Context, sc Scope, all bool) ([]VolumeListing, error) {
	vr, ok := m.c.Runtime.(runtime.Volumes)
	if !ok {
		return nil, nil
	}
	filter := map[string]string{LabelAgent: "1", LabelVolume: ""}
	if !all {
		filter[LabelProfile] = sc.HermesProfile()
	}
	vs, err := vr.ListVolumes(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	var out []VolumeListing
	for _, v := range vs {
		if v.Labels[LabelKey] == "" || !all && v.Labels[LabelShared] != sc.Shared {
			continue
		}
		p := v.Labels[LabelRawProfile]
		if s := v.Labels[LabelShared]; s != "" {
			p = s
		}
		out = append(out, VolumeListing{Name: v.Name, Profile: p, Task: v.Labels[LabelRawTask], Holds: v.Labels[LabelVolume]})
	}
	slices.SortFunc(out, func(a, b VolumeListing) int {
		return strings.Compare(a.Profile+"\x00"+a.Task+"\x00"+a.Name, b.Profile+"\x00"+b.Task+"\x00"+b.Name)
	})
	return out, nil
}

// ErrSandboxExists says the key has a sandbox (made meanwhile, or never taken
// down), whose files Purge will not remove under it.
var ErrSandboxExists = errors.New("the key has a sandbox")

// Purged is what Storage.Purge removed.
type Purged struct {
	Dirs    []string // host directories (storage = bind)
	Volumes []string // the engine's volumes (storage = volume)
}

// Purge removes the key's persistent files, its host directories and its
// volumes, once the engine shows no sandbox of the key: files a sandbox
// mounts are never removed under it. Links inside a directory are
// removed, never followed; a volume goes only with the key's labels, and
// the engine is asked that it went.
func (st Storage) Purge(ctx context.Context) (Purged, error) {
	s := st.s
	var p Purged
	dirs := st.HostDirs()
	_, volumes := s.rt().(runtime.Volumes)
	if len(dirs) == 0 && !volumes {
		return p, nil
	}
	cs, err := s.keyOwned(ctx)
	if err != nil {
		return p, err
	}
	if len(cs) > 0 {
		return p, fmt.Errorf("%w (%s, %.12s): its files stay; run down again", ErrSandboxExists, cs[0].Name, cs[0].ID)
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return p, fmt.Errorf("removing %s: %w (files a rootless engine's other users made: podman unshare rm -rf %s)", d, err, d)
		}
		p.Dirs = append(p.Dirs, d)
	}
	if !volumes {
		return p, nil
	}
	vols, err := st.volumes(ctx)
	if err != nil || len(vols) == 0 {
		return p, err
	}
	if err := s.rt().(runtime.Volumes).RemoveVolumes(ctx, vols...); err != nil {
		return p, fmt.Errorf("removing the key's volumes: %w", err)
	}
	p.Volumes = vols
	return p, nil
}

// volumesFree refuses a fork into a key whose volumes exist (a task taken
// down without --purge): their files would not be replaced.
func (s *Sandbox) volumesFree(ctx context.Context) error {
	if s.storage() != StorageVolume {
		return nil
	}
	vols, err := s.Storage().volumes(ctx)
	if err != nil || len(vols) == 0 {
		return err
	}
	return fmt.Errorf("%w: task %q keeps files in volumes %s; fork into a new task, or remove them (hsbx down --purge --task %s)", ErrSandboxExists, s.key.Task, strings.Join(vols, ", "), s.key.Task)
}
