package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Label keys. The hermes-* labels are exactly what the Hermes agent
// framework's Docker backend writes, so each tool sees the other's sandboxes;
// the hsbx.* labels are hsbx's own.
const (
	LabelAgent   = "hermes-agent"   // "1" on every sandbox
	LabelTask    = "hermes-task-id" // sanitized task
	LabelProfile = "hermes-profile" // sanitized profile

	// LabelKey is a hash of the raw (profile, task): two keys that sanitize
	// to the same hermes labels ("a/b" and "a_b") still differ here.
	LabelKey = "hsbx.key"
	// LabelRawProfile and LabelRawTask keep the names as the user gave them.
	LabelRawProfile = "hsbx.profile"
	LabelRawTask    = "hsbx.task"
	// LabelNonce marks one creation attempt, so a failed create can remove
	// exactly what it made and nothing else.
	LabelNonce = "hsbx.nonce"
	// LabelEphemeral marks a per-process sandbox (persist_across_processes
	// off), removed when its process ends.
	LabelEphemeral = "hsbx.ephemeral"
)

// Key identifies a sandbox: one per (profile, task).
type Key struct {
	Profile string
	Task    string
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
	// Length-prefixed, so no choice of characters makes two keys encode alike.
	sum := sha256.Sum256([]byte(strconv.Itoa(len(k.Profile)) + ":" + k.Profile + strconv.Itoa(len(k.Task)) + ":" + k.Task))
	return hex.EncodeToString(sum[:8])
}

// Labels are the labels a sandbox for k carries.
func (k Key) Labels() map[string]string {
	return map[string]string{
		LabelAgent:      "1",
		LabelTask:       SanitizeLabel(k.Task),
		LabelProfile:    SanitizeLabel(k.Profile),
		LabelKey:        k.Hash(),
		LabelRawProfile: k.Profile,
		LabelRawTask:    k.Task,
	}
}

// Filters select k's sandboxes in `ps`: the seed system's labels plus the
// exact key hash.
func (k Key) Filters() []string {
	return []string{LabelAgent + "=1", LabelKey + "=" + k.Hash()}
}

// Name is the sandbox's container name, derived from the key so that two
// processes (or two hosts sharing one engine) creating it at once collide
// in the engine, which lets exactly one win.
func (k Key) Name() string {
	return "hsbx-" + namePart(k.Profile, 16) + "-" + namePart(k.Task, 24) + "-" + k.Hash()[:12]
}

func namePart(s string, max int) string {
	s = strings.Trim(SanitizeLabel(s), "_.-")
	if len(s) > max {
		s = strings.TrimRight(s[:max], "_.-")
	}
	if s == "" {
		s = "x"
	}
	return s
}

// Matches reports whether a container's labels say it belongs to k. A
// container without hsbx.key (made by the Hermes backend) never matches:
// its sanitized labels cannot tell "a/b" from "a_b".
func (k Key) Matches(labels map[string]string) bool {
	return labels[LabelAgent] == "1" && labels[LabelKey] == k.Hash()
}

// Owner is the profile and task a sandbox's labels name: the raw names hsbx
// records, or the sanitized Hermes labels for a sandbox the Hermes backend
// made.
func Owner(labels map[string]string) (profile, task string) {
	profile, task = labels[LabelProfile], labels[LabelTask]
	if p, ok := labels[LabelRawProfile]; ok {
		profile = p
	}
	if t, ok := labels[LabelRawTask]; ok {
		task = t
	}
	return profile, task
}

// InProfile reports whether labels put a sandbox in profile: by the raw
// name when hsbx made it (so "a/b" and "a_b" stay apart), by the sanitized
// label when the Hermes backend did.
func InProfile(labels map[string]string, profile string) bool {
	if raw, ok := labels[LabelRawProfile]; ok {
		return raw == profile
	}
	return labels[LabelProfile] == SanitizeLabel(profile)
}
