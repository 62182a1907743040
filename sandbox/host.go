package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/hsbx/hsbx/internal/channel"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/cachefile"
	"github.com/hsbx/hsbx/runtime"
)

// hostFactsTTL bounds how long cached engine facts are trusted.
const hostFactsTTL = time.Hour

type cachedHost struct {
	Host engineHost `json:"host"`
	At   time.Time  `json:"at"`
}

// hostFacts returns what the engine can do (one `info` call, cached in
// memory and in CacheDir per engine, endpoint and user for an hour), so
// only creating a sandbox ever pays for it.
func (m *Manager) hostFacts(ctx context.Context) (engineHost, error) {
	m.hostMu.Lock()
	defer m.hostMu.Unlock()
	if m.host != nil {
		return *m.host, nil
	}
	if m.c.CacheDir != "" {
		if c, ok := cachefile.Get[cachedHost](m.hostCacheFile(), m.hostCacheKey()); ok && time.Since(c.At) < hostFactsTTL && time.Since(c.At) >= 0 {
			c.Host.UID, c.Host.GID = m.c.UID, m.c.GID
			c.Host.Caps = m.c.Runtime.Capabilities()
			m.host = &c.Host
			return c.Host, nil
		}
	}
	info, err := m.c.Runtime.Info(ctx)
	if err != nil {
		if errors.Is(err, runtime.ErrUnreachable) || errors.Is(err, runtime.ErrTimeout) || errors.Is(err, runtime.ErrBinaryNotFound) {
			return engineHost{}, err
		}
		m.log.Warn("engine info unreadable; assuming a rootful engine", "error", err)
	}
	h := engineHost{
		Dialect: m.c.Runtime.Dialect(), Caps: m.c.Runtime.Capabilities(), Rootless: info.Rootless,
		CgroupV1:  info.CgroupsV1(),
		BackingFS: info.BackingFS, UID: m.c.UID, GID: m.c.GID, OCIRuntimes: info.OCIRuntimes,
	}
	m.host = &h
	if err == nil {
		m.saveHost(h)
	}
	return h, nil
}

// platform is the engine's "os/arch" (which agent its sandboxes run),
// asked of the engine once (one `version` call) and kept in the cache
// file beside the host facts; "" when it cannot be had (the agent's run
// then asks itself, and says what failed).
func (m *Manager) platform(ctx context.Context) string {
	m.hostMu.Lock()
	p := m.plat
	m.hostMu.Unlock()
	if p != "" {
		return p
	}
	key := m.hostCacheKey() + " platform"
	if m.c.CacheDir != "" {
		if c, ok := cachefile.Get[cachedPlatform](m.hostCacheFile(), key); ok && time.Since(c.At) < hostFactsTTL && time.Since(c.At) >= 0 && c.Platform != "" {
			p = c.Platform
		}
	}
	if p == "" {
		var err error
		if p, err = channel.Platform(ctx, m.c.Runtime); err != nil {
			return ""
		}
		if m.c.CacheDir != "" {
			cachefile.Put(m.hostCacheFile(), key, cachedPlatform{Platform: p, At: time.Now()})
		}
	}
	m.hostMu.Lock()
	m.plat = p
	m.hostMu.Unlock()
	return p
}

// cachedPlatform is platform's entry in the cache file.
type cachedPlatform struct {
	Platform string
	At       time.Time
}

// agent is hsbx's agent in sandbox id, run as user, with the engine's
// platform known.
func (s *Sandbox) agent(ctx context.Context, id, user string) channel.Agent {
	return channel.Agent{Runtime: s.rt(), ID: id, User: user, Binary: s.m.c.Agent, Log: s.m.log, Platform: s.m.platform(ctx)}
}

// saveHost records the facts in the cache file (best effort).
func (m *Manager) saveHost(h engineHost) {
	if m.c.CacheDir != "" {
		cachefile.Put(m.hostCacheFile(), m.hostCacheKey(), cachedHost{Host: h, At: time.Now()})
	}
}

func (m *Manager) hostCacheFile() string { return filepath.Join(m.c.CacheDir, "engines.json") }

// markNoNetwork remembers that networked sandboxes cannot start here.
func (m *Manager) markNoNetwork() {
	m.hostMu.Lock()
	defer m.hostMu.Unlock()
	if m.host == nil || m.host.NoNetwork {
		return
	}
	m.host.NoNetwork = true
	m.saveHost(*m.host)
}

// hostCacheKey names the engine endpoint: binary, the variables that point
// it elsewhere, and the user.
func (m *Manager) hostCacheKey() string {
	parts := []string{m.c.Runtime.Binary(), fmt.Sprint(m.c.UID)}
	for _, v := range []string{"DOCKER_HOST", "DOCKER_CONTEXT", "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF"} {
		val, _ := m.getenv(v)
		parts = append(parts, v+"="+val)
	}
	return strings.Join(parts, "|")
}

// s6Entrypoints are the entrypoints of s6-overlay images, which run their
// own init as PID 1 (the Hermes backend's list).
var s6Entrypoints = map[string]bool{"/init": true, "/package/admin/s6-overlay/command/init": true}

type cachedImage struct {
	ID     string    `json:"id"`
	S6Init bool      `json:"s6_init"`
	At     time.Time `json:"at"`
}

// imageInit reports whether image brings its own init (s6-overlay), from
// its entrypoint: one `image inspect`, cached per engine endpoint and image
// reference for an hour, so only the first create of an image pays for it.
// missing says the engine does not have the image (it must be pulled); any
// other failure keeps the hardened default.
func (m *Manager) imageInit(ctx context.Context, image string) (s6, missing bool) {
	key := m.hostCacheKey() + "|" + image
	file := filepath.Join(m.c.CacheDir, "images.json")
	if m.c.CacheDir != "" {
		if c, ok := cachefile.Get[cachedImage](file, key); ok && time.Since(c.At) < hostFactsTTL && time.Since(c.At) >= 0 {
			return c.S6Init, false
		}
	}
	img, err := m.c.Runtime.InspectImage(ctx, image)
	if err != nil {
		m.log.Debug("image not inspectable; assuming it has no init of its own", "image", image, "error", err)
		return false, errors.Is(err, runtime.ErrImageNotFound)
	}
	s6 = len(img.Entrypoint) > 0 && s6Entrypoints[strings.TrimSpace(img.Entrypoint[0])]
	if s6 {
		m.log.Info("image runs s6-overlay's /init: no --init, /run mounted exec", "image", image)
	}
	if m.c.CacheDir != "" {
		cachefile.Put(file, key, cachedImage{ID: img.ID, S6Init: s6, At: time.Now()})
	}
	return s6, false
}

// forgetImage drops what the cache says about image on this engine: the
// engine said it does not have it.
func (m *Manager) forgetImage(image string) {
	if m.c.CacheDir != "" {
		cachefile.Delete(filepath.Join(m.c.CacheDir, "images.json"), m.hostCacheKey()+"|"+image)
	}
}

// pull fetches an image the engine does not have, before the create that
// needs it, bounded by its own timeout (Config.PullTimeout), with the
// engine's progress where Config.OnPull says.
func (m *Manager) pull(ctx context.Context, image string) error {
	var progress io.Writer
	if m.c.OnPull != nil {
		progress = m.c.OnPull(image)
	}
	start := time.Now()
	if err := m.c.Runtime.Pull(ctx, image, progress, m.c.PullTimeout); err != nil {
		return fmt.Errorf("image %s is not present locally and pulling it failed: %w", image, err)
	}
	m.log.Info("pulled image", "image", image, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkClientVar refuses a command env value that would steer the engine
// client (see steersClient).
func (m *Manager) checkClientVar(k, v string) error {
	return clientVarError("env", k, v, m.getenv, m.c.Runtime.Capabilities())
}
