package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// Drift: a sandbox is made once and then reused by every process, so a
// setting changed after it was made would silently not apply. hsbx records
// what each sandbox was made from in one label (LabelConfig: a short digest
// per setting, never a value) and compares it with the settings of every
// up, Ensure and warm exec — from the labels it already has, so the warm
// path spends no engine call on it.

// LabelConfig records what the sandbox was made from: "1" (the format),
// then "setting=digest" per setting (the first 8 hex digits of a SHA-256
// of the setting's value), space separated. Env values are not in it (a
// rotated token is not a different sandbox); their names are.
const LabelConfig = "hsbx.config"

// configFormat heads LabelConfig's value.
const configFormat = "1"

// DriftPolicy says what Ensure does with a sandbox made from other
// settings than the handle's (the on_drift setting).
type DriftPolicy string

// The drift policies.
const (
	// DriftWarn keeps using the sandbox and says once per sandbox (on this
	// host) which settings differ and how to apply them. The default.
	DriftWarn DriftPolicy = "warn"
	// DriftRecreate replaces the sandbox with one made from the current
	// settings — only when no command runs in it (else it is kept and the
	// replacement waits for a later Ensure). /workspace and /root are kept
	// when persistent; the rest of its filesystem is not.
	DriftRecreate DriftPolicy = "recreate"
	// DriftFail refuses to use the sandbox (*DriftError): on_drift = error.
	DriftFail DriftPolicy = "error"
)

// DriftPolicies are the accepted values of on_drift, the default first.
func DriftPolicies() []string {
	return []string{string(DriftWarn), string(DriftRecreate), string(DriftFail)}
}

// ErrDrift is wrapped by *DriftError.
var ErrDrift = errors.New("sandbox made from other settings")

// ErrBusy means a sandbox was not replaced because a command runs in it.
var ErrBusy = errors.New("a command runs in the sandbox")

// BusyError says a sandbox was not replaced (Recreate) because a command
// runs in it.
type BusyError struct {
	Name string
	Err  error // wraps ErrBusy and says who runs it
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("sandbox %s was not replaced: %v", e.Name, e.Err)
}

// Unwrap makes it ErrBusy.
func (e *BusyError) Unwrap() error { return e.Err }

// Hint says how to go on, in the Go package's terms (the hsbx command
// gives its own).
func (e *BusyError) Hint() string {
	return "try again when the command has ended, or Sandbox.Down removes the sandbox whatever runs in it"
}

// DriftError says the sandbox was made from other settings and on_drift =
// error refused to use it.
type DriftError struct {
	Name     string
	Settings []string // the settings that differ, as configuration keys
	Was      string   // the image it was made from, when the image differs
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("sandbox %s was made from other settings than these (%s) and on_drift = error", e.Name, describeDrift(e.Settings, e.Was))
}

// Unwrap makes it ErrDrift.
func (e *DriftError) Unwrap() error { return ErrDrift }

// Hint says how to go on, in the Go package's terms (the hsbx command
// gives its own).
func (e *DriftError) Hint() string {
	return "Sandbox.Recreate replaces it with one made from these settings (/workspace and /root are kept when persistent), Sandbox.Down removes it, or Spec.OnDrift = warn uses it as it is"
}

// configSettings are the settings a sandbox is made from, as configuration
// keys, with their values in a canonical form: the only list of them.
func (s Spec) configSettings(uid, gid int) [][2]string {
	sorted := func(xs []string) string {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return strings.Join(xs, "\x00")
	}
	b := strconv.FormatBool
	hostUser := b(s.RunAsHostUser)
	if s.RunAsHostUser {
		hostUser += " " + strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	}
	return [][2]string{
		{"image", s.Image},
		{"cwd", s.Cwd},
		{"volumes", strings.Join(s.Volumes, "\x00")},
		{"env", sorted(slices.Collect(maps.Keys(s.Env)))}, // names only
		{"forward_env", sorted(s.ForwardEnv)},
		{"extra_args", strings.Join(s.ExtraArgs, "\x00")},
		{"cpu", strconv.FormatFloat(s.CPU, 'f', -1, 64)},
		{"memory", strconv.FormatInt(s.MemoryMB, 10)},
		{"disk", strconv.FormatInt(s.DiskMB, 10)},
		{"pids_limit", strconv.FormatInt(s.PidsLimit, 10)},
		{"shm_size", s.ShmSize},
		{"network", b(s.Network)},
		{"egress_allow", s.egressSetting()},
		{"secrets", s.secretsSetting()},
		{"oci_runtime", s.OCIRuntime},
		{"run_as_host_user", hostUser},
		{"mount_cwd_to_workspace", b(s.MountCwdToWorkspace)},
		{"persistent", b(s.Persistent)},
		{"sandbox_dir", s.SandboxDir},
		{"snap_compat", b(s.SnapCompat)},
		{"kubernetes.storage_class", s.StorageClass},
		{"kubernetes.storage_size", s.StorageSize},
	}
}

// labelValue is LabelConfig's value for a sandbox made from s by the
// user uid:gid (run_as_host_user).
func (s Spec) labelValue(uid, gid int) string {
	var b strings.Builder
	b.WriteString(configFormat)
	for _, kv := range s.configSettings(uid, gid) {
		sum := sha256.Sum256([]byte(kv[1]))
		b.WriteString(" " + kv[0] + "=" + hex.EncodeToString(sum[:4]))
	}
	return b.String()
}

// parseConfigLabel reads LabelConfig's value: setting -> digest. ok is
// false for a value of another format or malformed (not judged).
func parseConfigLabel(v string) (map[string]string, bool) {
	fields := strings.Fields(v)
	if len(fields) == 0 || fields[0] != configFormat {
		return nil, false
	}
	out := make(map[string]string, len(fields)-1)
	for _, f := range fields[1:] {
		k, d, ok := strings.Cut(f, "=")
		if !ok || k == "" || d == "" {
			return nil, false
		}
		out[k] = d
	}
	return out, true
}

// driftBetween names the settings whose digests differ between a
// sandbox's LabelConfig (have) and the one wanted, in the wanted order.
// A setting the sandbox's label does not name (made by an older hsbx that
// did not record it) is not judged.
func driftBetween(have, want string) []string {
	if have == want {
		return nil
	}
	h, ok := parseConfigLabel(have)
	w, wok := parseConfigLabel(want)
	if !ok || !wok {
		return nil
	}
	var out []string
	for _, f := range strings.Fields(want)[1:] {
		k, _, _ := strings.Cut(f, "=")
		if d, ok := h[k]; ok && d != w[k] {
			out = append(out, k)
		}
	}
	return out
}

// drift names the settings c was made from that differ from spec (nil:
// none, or nothing to judge by). A sandbox without LabelConfig (made by
// the Hermes backend or an older hsbx) is judged by its image alone.
func (m *Manager) drift(c runtime.Container, spec Spec) []string {
	if c.Labels[LabelEphemeral] == "1" {
		return nil // made by its process, from that process's settings
	}
	if have, ok := c.Labels[LabelConfig]; ok {
		return driftBetween(have, spec.labelValue(m.c.UID, m.c.GID))
	}
	if c.Image != "" && normalImage(c.Image) != normalImage(spec.Image) {
		return []string{"image"}
	}
	return nil
}

func (s *Sandbox) configLabel() string { return s.spec.labelValue(s.m.c.UID, s.m.c.GID) }

// normalImage is an image reference as the engines spell it in inspect
// (podman adds docker.io/library/ or localhost/; a missing tag is latest),
// for comparing an unlabelled sandbox's image with the setting.
func normalImage(ref string) string {
	for _, p := range []string{"docker.io/", "index.docker.io/", "localhost/"} {
		ref = strings.TrimPrefix(ref, p)
	}
	ref = strings.TrimPrefix(ref, "library/")
	last := ref[strings.LastIndex(ref, "/")+1:]
	if !strings.Contains(last, ":") && !strings.Contains(ref, "@") {
		ref += ":latest"
	}
	return ref
}

// describeDrift reads "image (it was made from debian:12), memory".
func describeDrift(settings []string, was string) string {
	parts := slices.Clone(settings)
	for i, k := range parts {
		if k == "image" && was != "" {
			parts[i] = fmt.Sprintf("image: it was made from %s", was)
		}
	}
	return strings.Join(parts, ", ")
}

// policy is the handle's on_drift.
func (s *Sandbox) policy() DriftPolicy {
	if s.spec.OnDrift == "" {
		return DriftWarn
	}
	return s.spec.OnDrift
}

// judgeDrift applies the drift policy to c, a verified container of the
// key, before it is brought up. kept is false when c was replaced (removed:
// the caller makes the sandbox anew); drift names what differs in a kept c.
func (s *Sandbox) judgeDrift(ctx context.Context, c runtime.Container) (drift []string, msg string, said, kept bool, err error) {
	drift = s.m.drift(c, s.spec)
	force := s.forceRecreate
	if len(drift) == 0 && !force {
		return nil, "", false, true, nil
	}
	was := ""
	if slices.Contains(drift, "image") {
		was = c.Image
	}
	switch {
	case force || s.policy() == DriftRecreate:
		err := s.replace(ctx, c)
		switch {
		case err == nil:
			s.forceRecreate = false // what is made next is made from these settings
			_ = os.Remove(s.driftBusyFile(c.ID))
			if len(drift) > 0 {
				why := "on_drift = recreate"
				if force {
					why = "--recreate"
				}
				s.m.c.Warn(fmt.Sprintf("sandbox %s (%.12s) was made from other settings than these (%s): replaced it with one made from these (%s)",
					c.Name, c.ID, describeDrift(drift, was), why))
			}
			return drift, "", false, false, nil
		case errors.Is(err, ErrBusy) && !force:
			s.markDriftBusy(c.ID)
			msg := fmt.Sprintf("sandbox %s (%.12s) was made from other settings than these (%s), but %v, so it is used as it is; it is replaced once that ends",
				c.Name, c.ID, describeDrift(drift, was), err)
			return drift, msg, s.sayDriftOnce(c, "busy", msg), true, nil
		}
		if errors.Is(err, ErrBusy) {
			err = &BusyError{Name: c.Name, Err: err}
		}
		return drift, "", false, false, err
	case s.policy() == DriftFail:
		return drift, "", false, false, &DriftError{Name: c.Name, Settings: drift, Was: was}
	}
	msg = s.driftWarning(c.Name, c.ID, drift, was)
	return drift, msg, s.sayDriftOnce(c, "warn", msg), true, nil
}

// driftWarning is on_drift = warn's one line.
func (s *Sandbox) driftWarning(name, id string, drift []string, was string) string {
	return fmt.Sprintf("sandbox %s (%.12s) was made from other settings than these (%s) and is used as it is; %s replaces it (or on_drift = recreate)",
		name, id, describeDrift(drift, was), s.remedy(RemedyRecreate))
}

// remedy names r for this sandbox's key in the caller's terms.
func (s *Sandbox) remedy(r Remedy) string { return s.m.c.Remedies(r, s.key) }

// sayDriftOnce gives a drift warning once per container and settings on
// this host (the state dir remembers), so a program running many commands
// hears it once, not on every command.
func (s *Sandbox) sayDriftOnce(c runtime.Container, kind, msg string) bool {
	sum := sha256.Sum256([]byte(s.configLabel() + "\x00" + s.spec.Image))
	if s.stateDir() != "" && warnedOnce(s.engineDir(), "drift-"+kind+"-"+c.ID[:min(12, len(c.ID))]+"-"+hex.EncodeToString(sum[:4])) {
		return false
	}
	s.m.c.Warn(msg)
	return true
}

// DriftWarning is the warning Ensure gives (once) for r, a Result with
// Drift, for a caller that says it every time (`hsbx up`).
func (r Result) DriftWarning() string { return r.driftMsg }

// driftBusyFor is how long a warm command keeps using a drifted sandbox
// that on_drift = recreate could not replace (a command ran in it) before
// it asks the engine again.
const driftBusyFor = 30 * time.Second

// markDriftBusy records that container id could not be replaced now.
func (s *Sandbox) markDriftBusy(id string) {
	if s.stateDir() != "" {
		keystate.TouchFile(s.driftBusyFile(id))
	}
}

func (s *Sandbox) driftBusyRecently(id string) bool {
	st, err := os.Stat(s.driftBusyFile(id))
	return s.stateDir() != "" && err == nil && time.Since(st.ModTime()) < driftBusyFor
}

func (s *Sandbox) driftBusyFile(id string) string {
	return keystate.DriftBusyFile(s.stateDir(), s.key.Hash(), id)
}

// warmDrift judges the marker's container on a warm command, with no
// engine call: under warn it says so once and the command goes on (true);
// under recreate or error the caller ensures the sandbox instead (false),
// which asks the engine and applies the policy — except shortly after a
// replacement was put off because a command ran in it.
func (s *Sandbox) warmDrift(mk marker) bool {
	drift := s.m.drift(mk.container(), s.spec)
	if len(drift) == 0 {
		return true
	}
	switch s.policy() {
	case DriftWarn:
		was := ""
		if slices.Contains(drift, "image") {
			was = mk.Image
		}
		s.sayDriftOnce(mk.container(), "warn", s.driftWarning(s.name, mk.ID, drift, was))
		return true
	case DriftRecreate:
		return s.driftBusyRecently(mk.ID)
	}
	return false
}

// replace removes c, the key's sandbox, so it can be made anew — only when
// no command runs in it: no process on this host holds it in use (the
// in-use lock, taken here so none starts meanwhile), and once this host's
// holder has ended, the engine lists no running exec in it (another host's
// command, or a program holding its own channel). Otherwise it returns an
// error wrapping ErrBusy and c is kept.
func (s *Sandbox) replace(ctx context.Context, c runtime.Container) error {
	if c.State.Alive() {
		if s.stateDir() != "" {
			release, ok, err := keystate.TryIdle(s.stateDir(), s.key.Hash())
			if err != nil {
				return fmt.Errorf("replacing sandbox %s: %w", c.Name, err)
			}
			if !ok {
				return fmt.Errorf("%w: a process on this host runs a command in it", ErrBusy)
			}
			defer release()
		}
		if err := s.awaitNoExecs(ctx, c.ID); err != nil {
			return err
		}
	}
	// Ensure holds s.mu: forget the id here, not through forget.
	if s.id == c.ID {
		s.id = ""
	}
	removeMarker(s.engineDir())
	return s.removeAll(ctx, []runtime.Container{c})
}

// awaitNoExecs ends this host's holder of the container, waiting until its
// agent's exec is over, then waits a moment for the engine to list no
// running exec in it. A holder that another process's plain exec started
// a moment ago may come up meanwhile: it is ended too.
func (s *Sandbox) awaitNoExecs(ctx context.Context, id string) error {
	var deadline time.Time
	for {
		s.endChannel(ctx, id, true)
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Second)
		}
		cs, err := s.rt().Inspect(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) || (err == nil && len(cs) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("asking whether a command runs in sandbox %.12s: %w", id, err)
		}
		live, err := s.rt().LiveExecs(ctx, cs[0])
		if err != nil {
			return fmt.Errorf("asking whether a command runs in sandbox %.12s: %w", id, err)
		}
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the engine lists %d running command(s) in it (another host's, or a program's own channel)", ErrBusy, len(live))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
