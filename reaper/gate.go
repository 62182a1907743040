package reaper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/filelock"
)

// Gate lets the automatic sweep run at most once per process and at most
// once per window per profile on this host (every CLI call is a new
// process, so the window is recorded in the state dir). It is safe for
// concurrent goroutines.
type Gate struct {
	StateDir string
	Window   time.Duration
	Now      func() time.Time

	mu  sync.Mutex
	ran map[string]bool
}

// Maybe runs sweep for profile unless this process already did, or any
// process on this host did within the window, or another is sweeping now.
// It reports whether it ran the sweep. The sweep's error is the caller's
// to log; it must never fail the command that triggered it.
func (g *Gate) Maybe(ctx context.Context, profile string, sweep func(context.Context) error) (bool, error) {
	g.mu.Lock()
	if g.ran == nil {
		g.ran = map[string]bool{}
	}
	if g.ran[profile] {
		g.mu.Unlock()
		return false, nil
	}
	g.ran[profile] = true // claimed for this process, swept or not
	g.mu.Unlock()

	if g.StateDir != "" {
		claimed, err := g.claim(profile)
		if err != nil || !claimed {
			return false, err
		}
	}
	return true, sweep(ctx)
}

// claim takes the window for profile: false when a sweep ran within it or
// another process holds the claim right now.
func (g *Gate) claim(profile string) (bool, error) {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	dir := filepath.Join(g.StateDir, "reaper")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	sum := sha256.Sum256([]byte(profile))
	base := filepath.Join(dir, hex.EncodeToString(sum[:8]))
	release, ok, err := filelock.TryExclusive(base + ".lock")
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil // another process is deciding or sweeping
	}
	defer release()
	if b, err := os.ReadFile(base + ".last"); err == nil {
		if sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			if since := now().Sub(time.Unix(sec, 0)); since >= 0 && since < g.Window {
				return false, nil
			}
		}
	}
	tmp := base + ".last." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(now().Unix(), 10)), 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, base+".last")
}
