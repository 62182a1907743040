package enginecli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/hsbx/hsbx/runtime"
)

// A sandbox's variables travel to the engine in the client's environment
// (`-e NAME`, the value in NAME): never in argv, where other users read
// them. A name the client itself reads would change what the client does
// — the sandbox's PATH would be the one the CLI finds ssh on, its HOME the
// one podman reads known_hosts from, its DOCKER_HOST the engine the call
// goes to, its ALL_PROXY the proxy the docker CLI dials an ssh or tcp
// engine through (network = allow sets it: "proxy: unknown scheme: http").
// Those (runtime.ClientReads, runtime.ProxyVar) go in an env file instead
// (--env-file /dev/fd/3, a pipe), and the client keeps its own.

// sandboxEnv is how a call passes env: the arguments naming the variables
// (-e NAME, --env-file /dev/fd/3), the client's extra environment, and the
// env file's read end, the child's fd 3.
type sandboxEnv struct {
	args   []string
	client map[string]string
	files  []*os.File
}

// done closes the env file's read end: a writer the client never read
// from stops (EPIPE).
func (s sandboxEnv) done() {
	for _, f := range s.files {
		_ = f.Close()
	}
}

// passEnv parts env into what travels in the client's environment and what
// goes in an env file (clientReads): a pipe the client reads as /dev/fd/3,
// so the values are on no disk and in no argv, and a client running as
// another user (the tests' rootless podman) reads them too. A value the
// file cannot hold as it is (a line break, a NUL, bytes that are not
// UTF-8: docker and podman read it a line at a time) is refused with its
// name.
func passEnv(env map[string]string) (sandboxEnv, error) {
	var s sandboxEnv
	var lines strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if !runtime.ClientReads(k) && !runtime.ProxyVar(k) {
			if s.client == nil {
				s.client = map[string]string{}
			}
			s.client[k] = v
			s.args = append(s.args, "-e", k)
			continue
		}
		if !runtime.EnvFileSafe(v) {
			return sandboxEnv{}, fmt.Errorf("the sandbox's variable %s: the client reads %s itself, so it goes by env file, which cannot hold a line break, a NUL or non-UTF-8 bytes; pass it in a file", k, k)
		}
		lines.WriteString(k + "=" + v + "\n")
	}
	if lines.Len() == 0 {
		return s, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return sandboxEnv{}, fmt.Errorf("a pipe for the sandbox's variables: %w", err)
	}
	// Readable by a client that runs as another user (/dev/fd/3 is opened
	// anew, by the pipe's mode): only a process holding the pipe reaches it.
	_ = r.Chmod(0o444)
	go func() {
		_, _ = io.WriteString(w, lines.String())
		_ = w.Close()
	}()
	s.files = []*os.File{r}
	s.args = append(s.args, "--env-file", "/dev/fd/3")
	return s, nil
}
