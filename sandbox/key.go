package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hsbx/hsbx/runtime"
)

// Label keys. The hermes-* labels are exactly what the Hermes agent
// framework's Docker backend writes and filters on (see HermesContract), so
// each tool finds the other's sandboxes; the hsbx.* labels are hsbx's own.
const (
	LabelAgent   = "hermes-agent"   // "1" on every sandbox
	LabelTask    = "hermes-task-id" // sanitized task
	LabelProfile = "hermes-profile" // sanitized profile, or the shared-key identity
	// LabelEgress is Hermes's egress-proxy posture: "off" when no egress
	// proxy is configured (hsbx has none, so it always writes "off").
	LabelEgress = "hermes-egress"

	// LabelKey is a hash of the raw key: two keys that sanitize to the same
	// hermes labels ("a/b" and "a_b") still differ here.
	LabelKey = "hsbx.key"
	// LabelRawProfile, LabelRawTask and LabelShared keep the names as the
	// user gave them.
	LabelRawProfile = "hsbx.profile"
	LabelRawTask    = "hsbx.task"
	LabelShared     = "hsbx.shared"
	// LabelNonce marks one creation attempt, so a failed create can remove
	// exactly what it made and nothing else.
	LabelNonce = "hsbx.nonce"
	// LabelEphemeral marks a per-process sandbox (persist_across_processes
	// off), removed when its process ends.
	LabelEphemeral = "hsbx.ephemeral"
	// LabelCreator names the process that created the sandbox
	// ("<boot id>/<pid>"), so a "created" container whose creator died
	// (a killed `up`) is recovered at once rather than waited for.
	LabelCreator = "hsbx.creator"
)

// EgressOff is the hermes-egress value of a sandbox without an egress proxy.
const EgressOff = "off"

// HermesContract is the label and filter contract with the Hermes Docker
// backend, one row per label: what Hermes writes, and whether its reuse
// probe (`ps -a --filter label=K=V` for each filtered label) selects on it.
// An hsbx sandbox carries every row with the value Hermes would write for
// the same configuration, so Hermes attaches to it; hsbx attaches to a
// Hermes-made sandbox only when these labels identify its key exactly
// (see Key.adoptable).
var HermesContract = []struct {
	Label    string
	Filtered bool   // Hermes's reuse probe filters on it
	Value    string // what Hermes writes
}{
	{LabelAgent, true, `"1"`},
	{LabelTask, true, "the task id through SanitizeLabel"},
	{LabelProfile, true, "SanitizeLabel(profile), or with a shared container key SanitizeLabel(key)[:50] + \"-\" + sha256(key)[:12]"},
	{LabelEgress, true, `"off" without an egress proxy (else a digest of the proxy settings)`},
}

// Key identifies a sandbox: one per (profile, task), or per (shared key,
// task) when Shared is set (Hermes's docker_shared_container_key: trusted
// profiles share one container).
type Key struct {
	Profile string
	Task    string
	Shared  string
}

// Validate says whether k can name a sandbox: its names must be valid
// UTF-8. Labels are JSON strings to the engines, which turn other bytes
// into U+FFFD, so "k\xff" would read back as another name than it was
// made under (a second sandbox for one name).
func (k Key) Validate() error {
	for _, n := range []struct{ setting, v string }{{"profile", k.Profile}, {"task", k.Task}, {"shared_container_key", k.Shared}} {
		if !utf8.ValidString(n.v) {
			return &SpecError{Setting: n.setting, Msg: fmt.Sprintf("%q is not valid UTF-8; name it in UTF-8 text", n.v)}
		}
	}
	return nil
}

// Scope is the set of sandboxes a profile (or a shared key) owns: what ls
// and the reaper act on.
type Scope struct {
	Profile string
	Shared  string
}

// Scope is the key without its task.
func (k Key) Scope() Scope { return Scope{Profile: k.Profile, Shared: k.Shared} }

// HermesProfile is the hermes-profile label value for the scope, as the
// Hermes backend computes it.
func (s Scope) HermesProfile() string {
	if s.Shared == "" {
		return SanitizeLabel(s.Profile)
	}
	sum := sha256.Sum256([]byte(s.Shared))
	id := SanitizeLabel(s.Shared)
	if len(id) > 50 {
		id = id[:50]
	}
	return id + "-" + hex.EncodeToString(sum[:])[:12]
}

// Contains reports whether labels put a sandbox in the scope: by the raw
// names when hsbx made it (so "a/b" and "a_b" stay apart), by the Hermes
// profile label when the Hermes backend did.
func (s Scope) Contains(labels map[string]string) bool {
	_, hasRaw := labels[LabelRawProfile]
	shared, hasShared := labels[LabelShared]
	switch {
	case hasShared:
		return s.Shared != "" && shared == s.Shared
	case hasRaw:
		return s.Shared == "" && labels[LabelRawProfile] == s.Profile
	}
	return labels[LabelProfile] == s.HermesProfile()
}

// SanitizeLabel makes a label value that round-trips through the engines'
// `--filter label=k=v`: every character outside [A-Za-z0-9_.-] becomes
// "_", the result is cut to 63 characters, and an empty value is "unknown"
// (the Hermes backend's _sanitize_label_value, character for character).
func SanitizeLabel(v string) string {
	var b strings.Builder
	for _, r := range v {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	if s == "" {
		return "unknown"
	}
	return s
}

// Hash is a short digest of the raw key; equal only for equal keys.
func (k Key) Hash() string {
	// Length-prefixed, so no choice of characters makes two keys encode
	// alike; a shared key is marked so it never equals a profile's.
	enc := strconv.Itoa(len(k.Profile)) + ":" + k.Profile + strconv.Itoa(len(k.Task)) + ":" + k.Task
	if k.Shared != "" {
		enc = "shared" + strconv.Itoa(len(k.Shared)) + ":" + k.Shared + strconv.Itoa(len(k.Task)) + ":" + k.Task
	}
	sum := sha256.Sum256([]byte(enc))
	return hex.EncodeToString(sum[:8])
}

// Labels are the labels a sandbox for k carries: Hermes's contract plus
// hsbx's own.
func (k Key) Labels() map[string]string {
	l := map[string]string{
		LabelAgent:   "1",
		LabelTask:    SanitizeLabel(k.Task),
		LabelProfile: k.Scope().HermesProfile(),
		LabelEgress:  EgressOff,
		LabelKey:     k.Hash(),
		LabelRawTask: k.Task,
	}
	if k.Shared != "" {
		l[LabelShared] = k.Shared
	} else {
		l[LabelRawProfile] = k.Profile
	}
	return l
}

// Filters select the candidates for k in `ps`: the labels Hermes's own
// reuse probe filters on (but the egress posture, checked from inspect, so
// sandboxes made before hsbx wrote it are still found). Both hsbx-made and
// Hermes-made sandboxes pass; Owns decides.
func (k Key) Filters() []string {
	return []string{LabelAgent + "=1", LabelProfile + "=" + k.Scope().HermesProfile(), LabelTask + "=" + SanitizeLabel(k.Task)}
}

// Name is the sandbox's container name, derived from the key so that two
// processes (or two hosts sharing one engine) creating it at once collide
// in the engine, which lets exactly one win. A name is a lock, never proof
// of identity: hsbx acts on ids whose labels it checked.
func (k Key) Name() string {
	scope := k.Profile
	if k.Shared != "" {
		scope = k.Shared
	}
	return "hsbx-" + namePart(scope, 16) + "-" + namePart(k.Task, 24) + "-" + k.Hash()[:12]
}

func namePart(s string, limit int) string {
	s = strings.Trim(SanitizeLabel(s), "_.-")
	if len(s) > limit {
		s = strings.TrimRight(s[:limit], "_.-")
	}
	if s == "" {
		s = "x"
	}
	return s
}

// Matches reports whether labels say hsbx made the container for k.
func (k Key) Matches(labels map[string]string) bool {
	return labels[LabelAgent] == "1" && labels[LabelKey] == k.Hash()
}

// Owns reports whether a container is k's sandbox: made by hsbx for k, or
// made by the Hermes backend for exactly this key (see Adoptable).
func (k Key) Owns(c runtime.Container) bool {
	return k.Matches(c.Labels) || k.Adoptable(c) == nil
}

// Adoptable says whether a container the Hermes backend made (a
// `hermes-<8 hex>` name, Hermes's labels, no hsbx.* labels) is k's
// sandbox: its labels must name k unambiguously, that is Hermes's
// sanitizer leaves the task unchanged (so "a/b" and "a_b" cannot meet),
// the profile label is the scope's and the egress posture is "off". It
// returns why not, or nil. ErrNotHermes means the container is not
// Hermes-made at all.
func (k Key) Adoptable(c runtime.Container) error {
	l := c.Labels
	if l[LabelAgent] != "1" || !hermesName(c.Name) {
		return ErrNotHermes
	}
	for name := range l {
		if strings.HasPrefix(name, "hsbx.") {
			return ErrNotHermes
		}
	}
	if l[LabelProfile] != k.Scope().HermesProfile() || l[LabelTask] != SanitizeLabel(k.Task) {
		return ErrNotHermes // another key's
	}
	switch {
	case SanitizeLabel(k.Task) != k.Task:
		return fmt.Errorf("task %q is changed by Hermes's label sanitizer (%q), so its labels may belong to another task", k.Task, SanitizeLabel(k.Task))
	case k.Shared == "" && SanitizeLabel(k.Profile) != k.Profile:
		return fmt.Errorf("profile %q is changed by Hermes's label sanitizer (%q), so its labels may belong to another profile", k.Profile, SanitizeLabel(k.Profile))
	case l[LabelEgress] != EgressOff:
		return fmt.Errorf("its egress posture is %q (hsbx runs without an egress proxy: %q)", l[LabelEgress], EgressOff)
	}
	return nil
}

// ErrNotHermes says the container is not a Hermes-made sandbox for the key.
var ErrNotHermes = errors.New("not a Hermes-made sandbox for this key")

// hermesName reports whether name is what the Hermes backend names its
// containers: "hermes-" and 8 hex digits.
func hermesName(name string) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "hermes-")
	if !ok || len(rest) != 8 {
		return false
	}
	for _, c := range rest {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Owner is the profile and task a sandbox's labels name: the raw names hsbx
// records ("shared:KEY" for a shared key), or the sanitized Hermes labels
// for a sandbox the Hermes backend made.
func Owner(labels map[string]string) (profile, task string) {
	profile, task = labels[LabelProfile], labels[LabelTask]
	if p, ok := labels[LabelRawProfile]; ok {
		profile = p
	}
	if sh, ok := labels[LabelShared]; ok {
		profile = "shared:" + sh
	}
	if t, ok := labels[LabelRawTask]; ok {
		task = t
	}
	return profile, task
}

// InProfile reports whether labels put a sandbox in profile (no shared
// key); see Scope.Contains.
func InProfile(labels map[string]string, profile string) bool {
	return Scope{Profile: profile}.Contains(labels)
}

// TaskDirName is the directory name the Hermes backend gives a task's
// persistent dirs under TERMINAL_SANDBOX_DIR/docker: the task itself when
// it is already safe ([A-Za-z0-9._-], at most 128 characters, not "." or
// "..", not ending in "." or " "), else the cleaned name cut short plus
// "-" and 12 hex digits of its sha256, so "a:b" and "a_b" never share.
func TaskDirName(task string) string {
	const maxLen, hashLen = 128, 12
	if task == "" {
		return "default"
	}
	var b strings.Builder
	n := 0
	for _, r := range task {
		n++
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	cleaned := b.String()
	if cleaned == task && n <= maxLen && task != "." && task != ".." && !strings.HasSuffix(task, ".") {
		return task
	}
	sum := sha256.Sum256([]byte(task))
	stem := cleaned
	if len(stem) > maxLen-hashLen-1 {
		stem = stem[:maxLen-hashLen-1]
	}
	stem = strings.Trim(stem, "._")
	if stem == "" {
		stem = "task"
	}
	return stem + "-" + hex.EncodeToString(sum[:])[:hashLen]
}
