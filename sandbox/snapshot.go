package sandbox

// Snapshots: a sandbox's files saved under a name as an image of the
// engine's, and sandboxes made from it (a rollback in place, forks).
//
// The engine's commit saves the container's own layer and never its
// mounts, so hsbx's agent first stops the sandbox's other processes and
// copies the mounted paths (/workspace, /root, the memory-backed /tmp ...)
// into the layer (internal/agent, snapshot-hold); the engine commits (it
// pauses the container too) with the snapshot's labels; the agent removes
// the copy and continues the processes. A sandbox made from the image gets
// the copied paths put back over its mounts (snapshot-restore) before
// anything else runs in it. Processes and memory are not saved.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// The labels of a snapshot's image. Values the engines' change parser
// would read apart (a profile's or task's characters) are query-escaped.
const (
	LabelSnapshot        = "hsbx.snapshot"         // its name
	LabelSnapshotScope   = "hsbx.snapshot.scope"   // a digest of the profile (or shared key) it belongs to
	LabelSnapshotProfile = "hsbx.snapshot.profile" // the profile, escaped ("shared:KEY" for a shared key)
	LabelSnapshotTask    = "hsbx.snapshot.task"    // the task it was taken of, escaped
	LabelSnapshotCreated = "hsbx.snapshot.created" // RFC 3339, UTC
	LabelSnapshotSource  = "hsbx.snapshot.source"  // the image the sandbox was made from, escaped
	LabelSnapshotPaths   = "hsbx.snapshot.paths"   // the mounted paths it holds, comma-separated
	LabelSnapshotNonce   = "hsbx.snapshot.nonce"   // this commit's, to find what a failed one left
)

// Snapshot errors, for errors.Is.
var (
	// ErrNoSnapshot: the profile has no snapshot of that name.
	ErrNoSnapshot = errors.New("no such snapshot")
	// ErrSnapshotExists: the profile has a snapshot of that name already.
	ErrSnapshotExists = errors.New("a snapshot of that name exists")
	// ErrSnapshotTooLarge: the snapshot would be over snapshot_max_size;
	// nothing was kept.
	ErrSnapshotTooLarge = errors.New("snapshot over its size bound")
	// ErrSnapshotUnsupported: the engine cannot save a sandbox's files
	// (kubectl: a Pod's image layer is out of reach).
	ErrSnapshotUnsupported = errors.New("snapshots are not possible on this engine")
	// ErrSnapshotInUse: sandboxes made from the snapshot (forks, a
	// rollback) stand on its image; it goes after they do.
	ErrSnapshotInUse = errors.New("snapshot in use by a sandbox")
	// ErrNoSpace: the sandbox's disk filled while the snapshot copied its
	// files; nothing was kept.
	ErrNoSpace = errors.New("no space left in the sandbox")
)

// SnapshotInfo is one snapshot.
type SnapshotInfo struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	// Task is the task it was taken of.
	Task    string    `json:"task"`
	Created time.Time `json:"created"`
	// Size is its image's size as the engine reports it (with the layers
	// of the image it was made from).
	Size int64 `json:"size"`
	// SourceImage is the image the sandbox was made from.
	SourceImage string `json:"source_image"`
	// ID and Ref are its image's id and name in the engine.
	ID  string `json:"id"`
	Ref string `json:"ref"`
	// Paths are the mounted paths it holds besides the image's layer.
	Paths []string `json:"paths"`
}

// snapshotNameMax is the longest snapshot name (an image tag's bound).
const snapshotNameMax = 128

// ValidSnapshotName says what is wrong with a snapshot name, nil when
// nothing is: 1 to 128 letters, digits, '.', '_' and '-', starting with a
// letter or digit (what an image tag may be).
func ValidSnapshotName(name string) error {
	if name == "" || len(name) > snapshotNameMax {
		return &SpecError{"snapshot name", fmt.Sprintf("%q: want 1 to %d characters", name, snapshotNameMax)}
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return &SpecError{"snapshot name", fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' (not first)", name)}
		}
	}
	return nil
}

// scopeDigest names a scope in a label and an image name.
func scopeDigest(sc Scope) string {
	enc := "profile" + strconv.Itoa(len(sc.Profile)) + ":" + sc.Profile
	if sc.Shared != "" {
		enc = "shared" + strconv.Itoa(len(sc.Shared)) + ":" + sc.Shared
	}
	sum := sha256.Sum256([]byte("hsbx-snapshot-scope:" + enc))
	return hex.EncodeToString(sum[:8])
}

func scopeName(sc Scope) string {
	if sc.Shared != "" {
		return "shared:" + sc.Shared
	}
	return sc.Profile
}

// snapshotRef is the image name of snapshot name in scope sc.
func snapshotRef(sc Scope, name string) string {
	return "hsbx-snapshot-" + scopeDigest(sc) + ":" + name
}

func (m *Manager) committer() (runtime.Committer, error) {
	if cm, ok := m.c.Runtime.(runtime.Committer); ok {
		return cm, nil
	}
	return nil, fmt.Errorf("%w: %s cannot save a sandbox's files as an image (a Pod's image layer is out of the cluster API's reach); snapshots need docker or podman", ErrSnapshotUnsupported, m.c.Runtime.Dialect())
}

// snapshotOf reads a snapshot image's labels; ok is false for an image
// that is not one of scope sc's (labels missing or not agreeing).
func snapshotOf(img runtime.Image, sc Scope) (SnapshotInfo, bool) {
	l := img.Labels
	unesc := func(k string) string { v, _ := url.QueryUnescape(l[k]); return v }
	si := SnapshotInfo{Name: l[LabelSnapshot], Profile: unesc(LabelSnapshotProfile), Task: unesc(LabelSnapshotTask),
		SourceImage: unesc(LabelSnapshotSource), ID: img.ID, Size: img.Size}
	if si.Name == "" || ValidSnapshotName(si.Name) != nil || l[LabelSnapshotScope] != scopeDigest(sc) || si.Profile != scopeName(sc) {
		return si, false
	}
	si.Ref = snapshotRef(sc, si.Name)
	si.Created, _ = time.Parse(time.RFC3339, l[LabelSnapshotCreated])
	if si.Created.IsZero() {
		si.Created = img.Created
	}
	if p := l[LabelSnapshotPaths]; p != "" {
		si.Paths = strings.Split(p, ",")
	}
	return si, true
}

// SnapshotScope is the scope a snapshot's image belongs to, read from its
// labels; ok is false for an image that is not a snapshot.
func SnapshotScope(img runtime.Image) (Scope, bool) {
	p, err := url.QueryUnescape(img.Labels[LabelSnapshotProfile])
	if err != nil || img.Labels[LabelSnapshot] == "" {
		return Scope{}, false
	}
	if sh, ok := strings.CutPrefix(p, "shared:"); ok {
		if _, ok := snapshotOf(img, Scope{Shared: sh}); ok {
			return Scope{Shared: sh}, true
		}
	}
	_, ok := snapshotOf(img, Scope{Profile: p}) // a profile named "shared:..." too
	return Scope{Profile: p}, ok
}

// Snapshots lists scope sc's snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, sc Scope) ([]SnapshotInfo, error) {
	cm, err := m.committer()
	if err != nil {
		return nil, err
	}
	imgs, err := cm.Images(ctx, LabelSnapshotScope+"="+scopeDigest(sc))
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, img := range imgs {
		if si, ok := snapshotOf(img, sc); ok {
			out = append(out, si)
		}
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// FindSnapshot is scope sc's snapshot name (ErrNoSnapshot when none).
func (m *Manager) FindSnapshot(ctx context.Context, sc Scope, name string) (SnapshotInfo, error) {
	if err := ValidSnapshotName(name); err != nil {
		return SnapshotInfo{}, err
	}
	cm, err := m.committer()
	if err != nil {
		return SnapshotInfo{}, err
	}
	imgs, err := cm.Images(ctx, LabelSnapshotScope+"="+scopeDigest(sc), LabelSnapshot+"="+name)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("looking for snapshot %s: %w", name, err)
	}
	for _, img := range imgs {
		if si, ok := snapshotOf(img, sc); ok && si.Name == name {
			return si, nil
		}
	}
	return SnapshotInfo{}, fmt.Errorf("%w: profile %q has no snapshot %q (hsbx snapshot ls lists them)", ErrNoSnapshot, scopeName(sc), name)
}

// RemoveSnapshot removes scope sc's snapshot name, and makes sure it went.
// One a sandbox stands on (a fork, a rollback) is kept: ErrSnapshotInUse.
func (m *Manager) RemoveSnapshot(ctx context.Context, sc Scope, name string) error {
	si, err := m.FindSnapshot(ctx, sc, name)
	if err != nil {
		return err
	}
	cm, _ := m.committer()
	if err := cm.RemoveImages(ctx, si.ID); err != nil {
		if errors.Is(err, runtime.ErrImageInUse) {
			return fmt.Errorf("%w: %s: sandboxes made from it (forks, a rollback) or snapshots of them stand on its image; remove them first (hsbx down --task TASK, hsbx snapshot rm NAME): %v", ErrSnapshotInUse, name, err)
		}
		return fmt.Errorf("removing snapshot %s: %w", name, err)
	}
	if _, err := m.FindSnapshot(ctx, sc, name); !errors.Is(err, ErrNoSnapshot) {
		if err == nil {
			// podman removes only the name of an image another stands on
			// (measured): the snapshot stays, and goes with the last one.
			return fmt.Errorf("%w: %s: snapshots taken of sandboxes made from it stand on its image; it stays until they are removed (hsbx snapshot rm NAME)", ErrSnapshotInUse, name)
		}
		return fmt.Errorf("removing snapshot %s: %w", name, err)
	}
	return nil
}

// snapshotPaths are the mounted paths a snapshot copies: the persistent
// /workspace and /root (or their memory-backed stand-ins) and every
// memory-backed mount but /run (the processes' runtime files). The
// caller's directory mounted at /workspace and volumes of the user's
// are not hsbx's: left out.
func (s *Sandbox) snapshotPaths() []string {
	ps := []string{"/root"}
	if !s.spec.MountCwdToWorkspace {
		ps = append(ps, "/workspace")
	}
	for _, p := range s.spec.MemoryMounts() {
		if p != "/run" && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// Snapshots save a sandbox's files and make sandboxes of its key from them
// (Sandbox.Snapshots); Manager.Snapshots lists a profile's, FindSnapshot
// finds one, RemoveSnapshot removes it.
type Snapshots struct{ s *Sandbox }

// Snapshots are the saves of the sandbox and its key's sandboxes made
// from them.
func (s *Sandbox) Snapshots() Snapshots { return Snapshots{s} }

// Take saves the sandbox's files as snapshot name of its profile: its
// image layer, its persistent /workspace and /root, its memory-backed
// paths. While it copies, the sandbox's processes are stopped (and the
// engine pauses it while it commits), so no write lands half in it; they
// go on after. A stopped sandbox is started first. Processes and memory
// are not saved. Over Config.SnapshotMaxBytes it keeps nothing and fails
// with ErrSnapshotTooLarge.
func (n Snapshots) Take(ctx context.Context, name string) (SnapshotInfo, error) {
	s := n.s
	if err := ValidSnapshotName(name); err != nil {
		return SnapshotInfo{}, err
	}
	cm, err := s.m.committer()
	if err != nil {
		return SnapshotInfo{}, err
	}
	// Saves of one sandbox take turns: two at once wedged it (each hold
	// stopping the other's; on docker an exec racing the commit's pause
	// left runc stuck in the frozen container). On this host a second is
	// refused at once. hsbx's agent refuses a second hold too, yet two
	// hosts at once can still hang (docs/snapshots.md, a known limit).
	if dir := s.stateDir(); dir != "" && !s.ephemeral {
		switch release, ok, err := keystate.TrySnapshot(dir, s.key.Hash()); {
		case err != nil: // no lock file to take: the agent's lock still refuses a second hold
		case !ok:
			return SnapshotInfo{}, fmt.Errorf("%w: another snapshot of this sandbox is being taken on this host; try again when it is done", ErrBusy)
		default:
			defer release()
		}
	}
	sc := s.key.Scope()
	if _, err := s.m.FindSnapshot(ctx, sc, name); err == nil {
		return SnapshotInfo{}, fmt.Errorf("%w: profile %q has snapshot %q already (hsbx snapshot rm %s)", ErrSnapshotExists, scopeName(sc), name, name)
	} else if !errors.Is(err, ErrNoSnapshot) {
		return SnapshotInfo{}, err
	}
	ref := snapshotRef(sc, name)
	if img, err := s.rt().InspectImage(ctx, ref); err == nil {
		// Not found by its labels, yet the name is taken: an image of
		// someone else's, which a commit would take the name from.
		return SnapshotInfo{}, fmt.Errorf("%w: image %s (%.19s) is not a snapshot of profile %q; remove or rename it", ErrForeignName, ref, img.ID, scopeName(sc))
	} else if !errors.Is(err, runtime.ErrImageNotFound) {
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	c, err := s.copyTarget(ctx, false)
	if err != nil {
		return SnapshotInfo{}, err
	}
	cur := &c // inspected and verified the key's by copyTarget, when running
	if c.State != runtime.StateRunning || c.Labels == nil {
		res, err := s.Ensure(ctx)
		if err != nil {
			return SnapshotInfo{}, err
		}
		if cur, err = s.inspectOwn(ctx, res.ID); err != nil {
			return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
		}
		if cur == nil {
			return SnapshotInfo{}, fmt.Errorf("%w: task %q of profile %q has none", ErrNoSandbox, s.key.Task, s.key.Profile)
		}
	}
	base, err := s.rt().InspectImage(ctx, cur.Image)
	if err != nil && !errors.Is(err, runtime.ErrImageNotFound) {
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	bound := s.m.c.SnapshotMaxBytes
	h, err := s.hold(ctx, cur.ID, bound)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer h.release()
	nonce := randomHex(8)
	spec := runtime.CommitSpec{ID: cur.ID, Ref: ref, Labels: map[string]string{}}
	if host, err := s.m.hostFacts(ctx); err == nil && host.Rootless && host.CgroupV1 {
		// Such an engine cannot pause a container; the agent's hold has
		// stopped its processes, and keeps stopping any that start.
		spec.NoPause = true
	}
	for k, v := range cur.Labels { // the sandbox's own labels are not the image's: a fork is labelled anew
		if bv, ok := base.Labels[k]; (!ok || bv != v) && plainLabelKey(k) {
			spec.Labels[k] = ""
		}
	}
	for _, k := range cur.EnvNames { // values hsbx gave the sandbox stay out of the image
		if !slices.Contains(base.EnvNames, k) && !engineEnv[k] {
			spec.BlankEnv = append(spec.BlankEnv, k)
		}
	}
	created := time.Now().UTC().Truncate(time.Second)
	for k, v := range snapshotLabels(sc, name, s.key.Task, cur.Image, nonce, h.rep.Paths, created) {
		spec.Labels[k] = v
	}
	id, err := cm.Commit(ctx, spec)
	h.release()
	if herr := h.wait(); herr != nil {
		s.m.log.Warn("the snapshot's hold did not end cleanly", "sandbox", s.name, "error", herr)
	}
	if err != nil {
		s.dropSnapshot(ctx, nonce)
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	si, err := s.m.FindSnapshot(ctx, sc, name)
	if err == nil && (si.ID != id || !slices.Equal(si.Paths, h.rep.Paths)) {
		err = fmt.Errorf("the engine made image %.19s, but lists %.19s under the name with other labels", id, si.ID)
	}
	if err != nil {
		s.dropSnapshot(ctx, nonce)
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if added := si.Size - base.Size; bound > 0 && added > bound {
		s.dropSnapshot(ctx, nonce)
		return SnapshotInfo{}, fmt.Errorf("%w: snapshot %s adds %d bytes to its image, over snapshot_max_size (%d); removed", ErrSnapshotTooLarge, name, added, bound)
	}
	return si, nil
}

// dropSnapshot removes what a failed snapshot left (its image, found by
// its nonce), whatever the caller's context.
func (s *Sandbox) dropSnapshot(ctx context.Context, nonce string) {
	ctx = context.WithoutCancel(ctx)
	cm, _ := s.m.committer()
	imgs, err := cm.Images(ctx, LabelSnapshotNonce+"="+nonce)
	if err != nil {
		s.m.c.Warn(fmt.Sprintf("could not check for what a failed snapshot left: %v", err))
		return
	}
	var ids []string
	for _, img := range imgs {
		if img.Labels[LabelSnapshotNonce] == nonce {
			ids = append(ids, img.ID)
		}
	}
	if err := cm.RemoveImages(ctx, ids...); err != nil {
		s.m.c.Warn(fmt.Sprintf("a failed snapshot left image(s) %s and they could not be removed: %v", strings.Join(ids, " "), err))
	}
}

// plainLabelKey says whether a label key can be written in a commit's
// change (no quotes, backslashes, white space or '='): hsbx's and
// Hermes's all can; one a user's extra_args gave that cannot keeps its
// value in the image (a label, never a variable's value).
func plainLabelKey(k string) bool {
	return k != "" && !strings.ContainsAny(k, "\"'\\ \t\n\r=")
}

// snapshotLabels are the labels a snapshot's image carries (values free
// of what the engines' change parser reads apart: escaped).
func snapshotLabels(sc Scope, name, task, source, nonce string, paths []string, created time.Time) map[string]string {
	return map[string]string{
		LabelSnapshot: name, LabelSnapshotScope: scopeDigest(sc), LabelSnapshotProfile: url.QueryEscape(scopeName(sc)),
		LabelSnapshotTask: url.QueryEscape(task), LabelSnapshotCreated: created.UTC().Format(time.RFC3339),
		LabelSnapshotSource: url.QueryEscape(source), LabelSnapshotPaths: strings.Join(paths, ","), LabelSnapshotNonce: nonce,
	}
}

// engineEnv are the variables the engines give every container whatever
// its image (podman: all five; docker: PATH and HOSTNAME): a snapshot's
// image keeps them, or its sandboxes would start without a PATH.
var engineEnv = map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true, "TERM": true, "container": true}

// Fork makes a sandbox for this handle's key from snapshot name of its
// profile (the handle's settings, the snapshot's files) and returns it,
// up. The key must have no sandbox yet (ErrSandboxExists), nor files in
// its persistent directories. Each fork is its own: a write in one is
// seen in no other, nor in the sandbox the snapshot was taken of.
func (n Snapshots) Fork(ctx context.Context, name string) (Result, error) {
	s := n.s
	si, err := s.m.FindSnapshot(ctx, s.key.Scope(), name)
	if err != nil {
		return Result{}, err
	}
	return n.ForkFrom(ctx, si)
}

// ForkFrom is Fork from a snapshot already found (FindSnapshot): many
// forks of one snapshot look it up once.
func (n Snapshots) ForkFrom(ctx context.Context, si SnapshotInfo) (Result, error) {
	s := n.s
	if err := s.hostDirsEmpty(); err != nil {
		return Result{}, err
	}
	if err := s.volumesFree(ctx); err != nil {
		return Result{}, err
	}
	return s.createFrom(ctx, si)
}

// Rollback replaces the key's sandbox by one made from snapshot name of
// its profile: the snapshot's files everywhere (image layer, /workspace,
// /root, memory-backed paths); what was made since is gone. The key,
// labels and settings stay the handle's. Never while a command runs in
// it: an error wrapping ErrBusy, and it is kept. With no sandbox it is
// Fork.
func (n Snapshots) Rollback(ctx context.Context, name string) (Result, error) {
	s := n.s
	si, err := s.m.FindSnapshot(ctx, s.key.Scope(), name)
	if err != nil {
		return Result{}, err
	}
	var cs []runtime.Container
	if s.ephemeral {
		// A per-process sandbox: this handle's own, never another
		// process's of the same key.
		if id := s.warmTarget(); id != "" {
			if cur, err := s.inspectOwn(ctx, id); err != nil {
				return Result{}, err
			} else if cur != nil {
				cs = append(cs, *cur)
			}
		}
	} else if cs, err = s.keyOwned(ctx); err != nil {
		return Result{}, err
	}
	for _, c := range cs {
		s.mu.Lock()
		err := s.replace(ctx, c)
		s.mu.Unlock()
		if err != nil {
			return Result{}, fmt.Errorf("rolling back sandbox %s: %w", c.Name, err)
		}
	}
	return s.createFrom(ctx, si)
}
