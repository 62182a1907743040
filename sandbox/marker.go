package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// The marker records the container this host verified for a key: its id
// (checked against the key's labels) and the network posture it was
// verified under. Warm commands address the container by that id — an id
// cannot be squatted the way a derivable name can — so a warm exec is one
// engine call and never lands in a container that is not the sandbox.
// Without a marker, Ensure probes and verifies first.
//
// The marker, the warnings given once and the sessions' shell records
// name containers of one engine, so they live in a directory of the key's
// per engine (engineDir): docker's sandbox of a key is never taken for
// podman's, nor one daemon's for another's.

func markerPath(dir string) string { return keystate.MarkerFile(dir) }

// engineDir is the directory of this host's records of the key's sandbox
// on this sandbox's engine ("" without a state directory): under the
// key's directory, named by a digest of the runtime's Endpoint.
func (s *Sandbox) engineDir() string {
	return keystate.EngineDir(s.stateDir(), s.key.Hash(), s.m.endpointDigest())
}

// marker is what the marker file holds.
type marker struct {
	ID      string
	Network string // "none" when verified air-gapped, else "any"
	// OCIRuntime is the runtime the engine said it runs under ("" its
	// default): a warm command asked under another one verifies anew.
	OCIRuntime string
	// Config is the container's LabelConfig ("" without one) and Image
	// what it was made from: what Drift judges, kept so a warm exec
	// judges drift without asking the engine (a container's labels and
	// image never change).
	Config, Image string
}

// container is what the marker knows of its container, for Drift.
func (m marker) container() runtime.Container {
	c := runtime.Container{ID: m.ID, Image: m.Image, Labels: map[string]string{}}
	if m.Config != "" {
		c.Labels[LabelConfig] = m.Config
	}
	return c
}

// markerVersion heads the file; a marker of another version (an older
// hsbx's, verified under other rules) is ignored, so it is verified anew.
const markerVersion = "hsbx-marker-4"

func readMarker(dir string) (marker, bool) {
	if dir == "" {
		return marker{}, false
	}
	b, err := os.ReadFile(markerPath(dir))
	if err != nil {
		return marker{}, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) != 7 || lines[0] != markerVersion || !isHexID(lines[1]) || lines[6] != "" {
		return marker{}, false
	}
	return marker{ID: lines[1], Network: lines[2], Config: lines[3], Image: lines[4], OCIRuntime: lines[5]}, true
}

func writeMarker(dir string, m marker) {
	if dir == "" {
		return
	}
	p := markerPath(dir)
	oneLine := func(v string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(v) }
	content := markerVersion + "\n" + m.ID + "\n" + m.Network + "\n" + oneLine(m.Config) + "\n" + oneLine(m.Image) + "\n" + oneLine(m.OCIRuntime) + "\n"
	if b, err := os.ReadFile(p); err == nil && string(b) == content {
		return
	}
	if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
		tmp := p + "." + strconv.Itoa(os.Getpid())
		if os.WriteFile(tmp, []byte(content), 0o644) == nil {
			_ = os.Rename(tmp, p)
		}
	}
}

func removeMarker(dir string) {
	if dir != "" {
		_ = os.Remove(markerPath(dir))
	}
}

// isHexID reports whether s is a full container id: 64 hex digits
// (docker, podman), or a Pod's "UID/NAME" (kubectl: a 36-character uid
// and a DNS-1123 name).
func isHexID(s string) bool {
	if uid, name, ok := strings.Cut(s, "/"); ok {
		return len(uid) == 36 && onlyChars(uid, "0123456789abcdef-") && name != "" && len(name) <= 253 &&
			onlyChars(name, "abcdefghijklmnopqrstuvwxyz0123456789-.")
	}
	return len(s) == 64 && onlyChars(s, "0123456789abcdef")
}

func onlyChars(s, set string) bool {
	for _, c := range s {
		if !strings.ContainsRune(set, c) {
			return false
		}
	}
	return true
}

// warnedOnce records, in a key's engine directory on this host, a warning
// given (what names it: the Hermes-made container hsbx will not attach
// to, a drift), so it is given once; it reports whether it was given before.
func warnedOnce(dir, what string) bool {
	if dir == "" {
		return false
	}
	p := keystate.WarnedFile(dir, what)
	if _, err := os.Stat(p); err == nil {
		return true
	}
	if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
		if f, err := os.Create(p); err == nil {
			_ = f.Close()
		}
	}
	return false
}
