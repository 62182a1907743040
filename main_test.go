package hsbx_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hsbx/hsbx/internal/enginetest"
)

// TestMain gives the examples the environment a user's shell would: the
// fake docker on PATH (enginetest.Main), the configuration and state under
// a temp dir, a profile and an image of their own.
func TestMain(m *testing.M) {
	enginetest.MainWith(m, nil, func() {
		dir, err := enginetest.TempDir("hsbx-examples-")
		if err != nil {
			panic(err)
		}
		for k, v := range map[string]string{
			"XDG_STATE_HOME": filepath.Join(dir, "state"), "XDG_CACHE_HOME": filepath.Join(dir, "cache"),
			"XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
			"HSBX_RUNTIME": "docker", "HSBX_PROFILE": "examples", "TERMINAL_DOCKER_IMAGE": "busybox",
		} {
			os.Setenv(k, v)
		}
		for _, k := range []string{"HSBX_CONFIG", "HSBX_TASK", "HSBX_EXEC_CHANNEL_AGENT", "HSBX_LOG_LEVEL"} {
			os.Unsetenv(k)
		}
	})
}
