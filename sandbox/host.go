package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// hostFactsTTL bounds how long cached engine facts are trusted.
const hostFactsTTL = time.Hour

type cachedHost struct {
	Host Host      `json:"host"`
	At   time.Time `json:"at"`
}

// hostFacts returns what the engine can do (one `info` call, cached in
// memory and in CacheDir per engine, endpoint and user for an hour), so
// only creating a sandbox ever pays for it.
func (m *Manager) hostFacts(ctx context.Context) (Host, error) {
	m.hostMu.Lock()
	defer m.hostMu.Unlock()
	if m.host != nil {
		return *m.host, nil
	}
	key := m.hostCacheKey()
	if m.c.CacheDir != "" {
		file := filepath.Join(m.c.CacheDir, "engines.json")
		cache := map[string]cachedHost{}
		if b, err := os.ReadFile(file); err == nil {
			_ = json.Unmarshal(b, &cache)
		}
		if c, ok := cache[key]; ok && time.Since(c.At) < hostFactsTTL && time.Since(c.At) >= 0 {
			c.Host.UID, c.Host.GID = m.c.UID, m.c.GID
			m.host = &c.Host
			return c.Host, nil
		}
	}
	info, err := m.c.Runtime.Info(ctx)
	if err != nil {
		if errors.Is(err, runtime.ErrUnreachable) || errors.Is(err, runtime.ErrTimeout) || errors.Is(err, runtime.ErrBinaryNotFound) {
			return Host{}, err
		}
		m.log.Warn("engine info unreadable; assuming a rootful engine", "error", err)
	}
	h := Host{
		Dialect: m.c.Runtime.Dialect(), Rootless: info.Rootless,
		CgroupV1:  info.CgroupVersion == "1" || info.CgroupVersion == "v1",
		BackingFS: info.BackingFS, UID: m.c.UID, GID: m.c.GID,
	}
	m.host = &h
	if err == nil {
		m.saveHost(h)
	}
	return h, nil
}

// saveHost records the facts in the cache file (best effort).
func (m *Manager) saveHost(h Host) {
	if m.c.CacheDir == "" {
		return
	}
	file := filepath.Join(m.c.CacheDir, "engines.json")
	cache := map[string]cachedHost{}
	if b, err := os.ReadFile(file); err == nil {
		_ = json.Unmarshal(b, &cache)
	}
	cache[m.hostCacheKey()] = cachedHost{Host: h, At: time.Now()}
	if b, err := json.Marshal(cache); err == nil && os.MkdirAll(m.c.CacheDir, 0o700) == nil {
		tmp := fmt.Sprintf("%s.%d", file, os.Getpid())
		if os.WriteFile(tmp, b, 0o600) == nil {
			_ = os.Rename(tmp, file)
		}
	}
}

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
