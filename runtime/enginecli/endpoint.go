package enginecli

import (
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/hsbx/hsbx/internal/environ"
)

// endpointVars are what the docker and podman clients read to choose the
// engine they talk to (podman's CONTAINER_*, docker's DOCKER_*), and
// kubectl's configuration.
var endpointVars = []string{"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF", "KUBECONFIG"}

// Endpoint is what Runtime.Endpoint says of an engine CLI at bin run with
// env: its dialect, the binary, more (kubectl's context and namespace),
// the variables that choose the engine, and docker's current context.
func Endpoint(dialect, bin string, env []string, more ...string) string {
	fields := append([]string{dialect, bin}, more...)
	for _, k := range endpointVars {
		if v, ok := environ.Lookup(env, k); ok && v != "" {
			fields = append(fields, k+"="+v)
		}
	}
	if dialect == "docker" {
		if ctx := dockerContext(env); ctx != "" {
			fields = append(fields, "context="+ctx)
		}
	}
	return strings.Join(fields, "\x00")
}

// dockerContext is the context `docker context use` chose: the
// currentContext of the client's config.json, when neither DOCKER_HOST
// nor DOCKER_CONTEXT overrides it ("" = the default one, or unknown).
func dockerContext(env []string) string {
	for _, k := range []string{"DOCKER_HOST", "DOCKER_CONTEXT"} {
		if v, _ := environ.Lookup(env, k); v != "" {
			return ""
		}
	}
	dir := dockerConfigDir(environ.Getter(env))
	if dir == "" {
		return ""
	}
	b, err := readSmall(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if json.Unmarshal(b, &cfg) != nil || cfg.CurrentContext == "default" {
		return ""
	}
	return cfg.CurrentContext
}
