// Package agentbin carries the exec channel's agent (cmd/hsbx-agent),
// built for every platform a sandbox may run on, inside hsbx itself: a
// cgo build, `go install`, a program embedding the Go package and a
// release binary all have the agent for the engine they reach, with no
// file to ship or name.
//
// The binaries are made by `make agents` (static, stripped, -trimpath, no
// build id: reproducible with the Go release named in toolchain.txt) and
// checked in gzipped. TestEmbeddedAgentsAreFresh rebuilds them and fails
// when they differ: a change to the agent that was not followed by
// `make agents` fails the build.
package agentbin

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

//go:embed agent-linux-*.gz toolchain.txt
var files embed.FS

// Platforms are the "os/arch" pairs hsbx carries an agent for.
func Platforms() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".gz")
		if rest, ok2 := strings.CutPrefix(name, "agent-"); ok && ok2 {
			os, arch, _ := strings.Cut(rest, "-")
			out = append(out, os+"/"+arch)
		}
	}
	slices.Sort(out)
	return out
}

// Toolchain is the Go release the embedded agents were built with.
func Toolchain() string {
	b, _ := files.ReadFile("toolchain.txt")
	return strings.TrimSpace(string(b))
}

// Agent is one embedded agent binary.
type Agent struct {
	Platform string // "os/arch"
	Bytes    []byte // the executable
	Digest   string // hex sha256 of Bytes
}

// NoAgentError says hsbx carries no agent for a platform.
type NoAgentError struct{ Platform string }

func (e *NoAgentError) Error() string {
	p := e.Platform
	if p == "" {
		p = "an unknown platform (the engine did not say)"
	}
	return fmt.Sprintf("hsbx carries no exec channel agent for %s (it has %s); set exec_channel_agent to a static hsbx-agent built for it",
		p, strings.Join(Platforms(), ", "))
}

var cache sync.Map // platform -> *Agent (decompressed once per process)

// For returns the agent for platform ("linux/amd64"), decompressed.
func For(platform string) (*Agent, error) {
	if a, ok := cache.Load(platform); ok {
		return a.(*Agent), nil
	}
	goos, arch, ok := strings.Cut(platform, "/")
	if !ok || strings.ContainsAny(platform, ".\\") || strings.Count(platform, "/") != 1 {
		return nil, &NoAgentError{Platform: platform}
	}
	gz, err := files.ReadFile("agent-" + goos + "-" + arch + ".gz")
	if err != nil {
		return nil, &NoAgentError{Platform: platform}
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("the embedded agent for %s is damaged: %w", platform, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("the embedded agent for %s is damaged: %w", platform, err)
	}
	sum := sha256.Sum256(b)
	a := &Agent{Platform: platform, Bytes: b, Digest: hex.EncodeToString(sum[:])}
	cache.Store(platform, a)
	return a, nil
}
