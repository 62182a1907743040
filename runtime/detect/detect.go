// Package detect finds the engine CLI to drive and decides its dialect.
//
// kubectl is driven only when chosen (--runtime kubectl or a path to one):
// automatic detection looks for a local engine.
//
// Order: Options.Runtime (a name looked up on PATH, or a path: hsbx's
// configuration resolves it from --runtime, HSBX_RUNTIME,
// HERMES_DOCKER_BINARY or the file), then docker on PATH, podman on PATH,
// then the known install paths. The dialect is what
// the binary says it is (`<bin> --version`), not its file name, so a docker
// that is really podman (the podman-docker shim) is driven as podman. The
// verdict is cached per binary (path, size, mtime) so a command costs no
// extra process once the binary has been seen.
package detect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/cachefile"
	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/docker"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/kubectl"
	"github.com/hsbx/hsbx/runtime/podman"
)

// KnownPaths returns the install locations tried when nothing on PATH
// matches (Docker Desktop and Homebrew installs are often missing from a
// non-login PATH).
func KnownPaths() []string {
	return []string{
		"/usr/local/bin/docker",
		"/opt/homebrew/bin/docker",
		"/Applications/Docker.app/Contents/Resources/bin/docker",
		"/opt/podman/bin/podman",
	}
}

// Options say where to look and how to run the binary.
type Options struct {
	// Runtime is the --runtime flag or HSBX_RUNTIME: "", "auto", "docker",
	// "podman", another name on PATH, or a path.
	Runtime string
	// RuntimeSource names where Runtime came from, for messages
	// (default "--runtime/HSBX_RUNTIME").
	RuntimeSource string
	// LookPath resolves a name on PATH; defaults to proc.LookPath.
	LookPath func(string) (string, error)
	// Known replaces KnownPaths() (nil: the defaults).
	Known []string
	// CacheDir holds the dialect cache; "" disables caching.
	CacheDir string
	// Fresh ignores cached verdicts (hsbx doctor always asks the binary).
	Fresh bool
	// Engine configures the returned Runtime (runner, env, timeout).
	Engine enginecli.Options
	// Kubernetes is the context and namespace a kubectl runtime works
	// in; docker and podman have no such setting.
	Kubernetes kubectl.Target
}

// Found is the binary detection settled on.
type Found struct {
	Path    string          `json:"binary"`
	Dialect runtime.Dialect `json:"runtime"`
	// Source says which rule chose it: Options.RuntimeSource,
	// "PATH" or "known path".
	Source string `json:"source"`
	// VersionLine is the first line of `<bin> --version` (empty when the
	// dialect came from the cache).
	VersionLine string `json:"-"`
	// ClientVersion is the client's version from that line ("" when the
	// dialect came from the cache).
	ClientVersion string `json:"client_version,omitempty"`
}

// Open finds the engine and returns a Runtime for it.
func Open(ctx context.Context, o Options) (runtime.Runtime, Found, error) {
	f, err := Find(ctx, o)
	if err != nil {
		return nil, f, err
	}
	return New(f, o), f, nil
}

// New returns the Runtime for a found binary, configured by o.Engine (and
// o.Kubernetes for kubectl).
func New(f Found, o Options) runtime.Runtime {
	switch f.Dialect {
	case runtime.Podman:
		return podman.New(f.Path, o.Engine)
	case runtime.Kubectl:
		return kubectl.New(f.Path, o.Engine, o.Kubernetes)
	}
	return docker.New(f.Path, o.Engine)
}

// Find locates the binary and its dialect.
func Find(ctx context.Context, o Options) (Found, error) {
	if o.LookPath == nil {
		o.LookPath = proc.LookPath
	}
	if o.Known == nil {
		o.Known = KnownPaths()
	}
	f, err := locate(o)
	if err != nil {
		return f, err
	}
	f.Path, _ = filepath.Abs(f.Path)
	f.Dialect, f.VersionLine, err = identify(ctx, o, f.Path)
	f.ClientVersion = ClientVersion(f.VersionLine)
	if err != nil {
		return f, fmt.Errorf("%s (chosen by %s): %w", f.Path, f.Source, err)
	}
	return f, nil
}

func locate(o Options) (Found, error) {
	if r := strings.TrimSpace(o.Runtime); r != "" && r != "auto" {
		src := o.RuntimeSource
		if src == "" {
			src = "--runtime/HSBX_RUNTIME"
		}
		p, err := resolve(o, r)
		if err != nil {
			return Found{}, fmt.Errorf("%w: %s %q: %v", runtime.ErrBinaryNotFound, src, r, err)
		}
		return Found{Path: p, Source: src}, nil
	}
	for _, name := range []string{"docker", "podman"} {
		if p, err := o.LookPath(name); err == nil {
			return Found{Path: p, Source: "PATH"}, nil
		}
	}
	for _, p := range o.Known {
		if executable(p) {
			return Found{Path: p, Source: "known path"}, nil
		}
	}
	return Found{}, fmt.Errorf("%w: no docker or podman on PATH or at %s", runtime.ErrBinaryNotFound, strings.Join(o.Known, ", "))
}

// resolve turns a name (looked up on PATH) or a path into an executable path.
func resolve(o Options, s string) (string, error) {
	if !strings.ContainsRune(s, os.PathSeparator) {
		p, err := o.LookPath(s)
		if err != nil {
			for _, known := range []string{"docker", "podman", "kubectl"} {
				if s != known && near(s, known) {
					return "", fmt.Errorf("not found on PATH (did you mean %s?)", known)
				}
			}
			return "", fmt.Errorf("not found on PATH")
		}
		return p, nil
	}
	st, err := os.Stat(s)
	switch {
	case err != nil:
		return "", errors.Unwrap(err)
	case st.IsDir():
		return "", errors.New("is a directory")
	case !runnable(s, st):
		return "", errors.New("is not executable")
	}
	return s, nil
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && runnable(p, st)
}

// runnable: an execute bit on Unix; on Windows, where files have none, an
// extension Windows runs (as exec.LookPath judges there).
func runnable(p string, st os.FileInfo) bool {
	if goruntime.GOOS == "windows" {
		switch strings.ToLower(filepath.Ext(p)) {
		case ".exe", ".com", ".bat", ".cmd":
			return true
		}
		return false
	}
	return st.Mode()&0o111 != 0
}

// identify asks the binary what it is, unless the cache already knows.
func identify(ctx context.Context, o Options, path string) (runtime.Dialect, string, error) {
	key, keyErr := cacheKey(path)
	if keyErr == nil && o.CacheDir != "" && !o.Fresh {
		if d, ok := cachefile.Get[runtime.Dialect](filepath.Join(o.CacheDir, cacheFile), key); ok {
			return d, "", nil
		}
	}
	// The engine's own defaults: its runner, and the process environment
	// when the caller gives none (an empty one would reach no engine that
	// reads its configuration from the environment).
	eng := o.Engine.WithDefaults()
	argv := []string{path, "--version"}
	// Bounded as every engine call is (engine_timeout): docker 20.10's
	// client reaches its engine before it prints even its version (over
	// ssh: a connection to a machine that may not answer).
	bound := eng.Timeout
	res, err := eng.Runner.Run(ctx, proc.Cmd{Argv: argv, Env: eng.Env, Timeout: bound})
	if err != nil {
		if errors.Is(err, proc.ErrProcessTimeout) {
			return "", "", fmt.Errorf("%w: %s --version did not answer in %s (engine_timeout)", runtime.ErrTimeout, path, bound)
		}
		if ctx.Err() != nil { // the caller gave up (Ctrl-C): not a missing binary
			return "", "", enginecli.RunError(argv, err)
		}
		return "", "", fmt.Errorf("%w: %v", runtime.ErrBinaryNotFound, err)
	}
	line := enginecli.FirstLine(string(res.Stdout))
	d, ok := DialectOf(line)
	if !ok && res.ExitCode != 0 && strings.Contains(string(res.Stderr), "unknown flag: --version") {
		// kubectl has no --version; its `version --client` says what it is.
		d, line, ok = identifyKubectl(ctx, eng, path)
		res.ExitCode = 0
	}
	if !ok || res.ExitCode != 0 {
		return "", line, fmt.Errorf("%w: `%s --version` printed %q (exit %d); expected docker, podman or kubectl", runtime.ErrUnsupported, path, line, res.ExitCode)
	}
	if keyErr == nil && o.CacheDir != "" {
		// One entry a path: the binary's earlier size and mtime are gone
		// (every hsbx start reads this file). A failed write costs a
		// --version next time.
		cachefile.PutReplacing(filepath.Join(o.CacheDir, cacheFile), key, d, func(k string) bool { return keyPath(k) == path })
	}
	return d, line, nil
}

// identifyKubectl asks a binary that has no --version whether it is
// kubectl (`version --client -o json`); the line it returns reads like
// the other engines' ("kubectl version v1.34.4").
func identifyKubectl(ctx context.Context, eng enginecli.Options, path string) (runtime.Dialect, string, bool) {
	res, err := eng.Runner.Run(ctx, proc.Cmd{Argv: []string{path, "version", "--client", "-o", "json"}, Env: eng.Env, Timeout: 15 * time.Second})
	if err != nil || res.ExitCode != 0 {
		return "", "", false
	}
	var v struct {
		Client *struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if json.Unmarshal(res.Stdout, &v) != nil || v.Client == nil || v.Client.GitVersion == "" {
		return "", "", false
	}
	return runtime.Kubectl, "kubectl version " + strings.TrimPrefix(v.Client.GitVersion, "v"), true
}

// ClientVersion reads the version from the first line `--version` prints
// ("Docker version 28.2.2, build e6534b4" -> "28.2.2"; "podman version
// 4.3.1" -> "4.3.1"); "" when there is none.
func ClientVersion(versionLine string) string {
	fields := strings.Fields(versionLine)
	for i, f := range fields {
		if strings.EqualFold(f, "version") && i+1 < len(fields) {
			return strings.TrimSuffix(fields[i+1], ",")
		}
	}
	return ""
}

// DialectOf reads the dialect from the first line `--version` prints:
// "Docker version 28.2.2, build e6534b4" or "podman version 4.3.1".
func DialectOf(versionLine string) (runtime.Dialect, bool) {
	l := strings.ToLower(strings.TrimSpace(versionLine))
	switch {
	case strings.HasPrefix(l, "podman version"), strings.HasPrefix(l, "podman-remote version"):
		return runtime.Podman, true
	case strings.HasPrefix(l, "docker version"):
		return runtime.Docker, true
	}
	return "", false
}

func cacheKey(path string) (string, error) {
	st, err := os.Stat(path) // follows symlinks: the key is the real file
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s|%d|%d", path, st.Size(), st.ModTime().UnixNano()), nil
}

// keyPath is the binary's path in a cacheKey (a path may hold '|').
func keyPath(key string) string {
	for range 2 {
		i := strings.LastIndexByte(key, '|')
		if i < 0 {
			return ""
		}
		key = key[:i]
	}
	return key
}

// cacheFile holds the dialect verdicts, by cacheKey.
const cacheFile = "dialects.json"

// near reports whether a is a likely typo of b: one edit, or two letters
// swapped ("dokcer", "podmna").
func near(a, b string) bool {
	if len(a) == len(b) {
		diff := []int{}
		for i := range a {
			if a[i] != b[i] {
				diff = append(diff, i)
			}
		}
		return len(diff) == 1 || (len(diff) == 2 && diff[1] == diff[0]+1 && a[diff[0]] == b[diff[1]] && a[diff[1]] == b[diff[0]])
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) != 1 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i:] == b[i+1:]
		}
	}
	return true
}
