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
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
)

//go:embed agent-linux-*.gz agent-linux-*.sha256 toolchain.txt
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

// readAllInto is io.ReadAll into b's spare capacity first.
func readAllInto(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// fileBase is the embedded files' name for platform ("agent-linux-amd64").
func fileBase(platform string) (string, error) {
	goos, arch, ok := strings.Cut(platform, "/")
	if !ok || strings.ContainsAny(platform, ".\\") || strings.Count(platform, "/") != 1 {
		return "", &NoAgentError{Platform: platform}
	}
	return "agent-" + goos + "-" + arch, nil
}

// Digest is the hex sha256 of the agent for platform, without
// decompressing it: what names it in a sandbox, so a process that finds it
// there already never holds its bytes.
func Digest(platform string) (string, error) {
	base, err := fileBase(platform)
	if err != nil {
		return "", err
	}
	b, err := files.ReadFile(base + ".sha256")
	if err != nil {
		return "", &NoAgentError{Platform: platform}
	}
	return strings.TrimSpace(string(b)), nil
}

// For returns the agent for platform ("linux/amd64"), decompressed
// anew on each call and kept by nobody here: it is needed only to install
// it in a sandbox (once per sandbox), and a long-lived process (a holder)
// should not carry its megabytes after that.
func For(platform string) (*Agent, error) {
	base, err := fileBase(platform)
	if err != nil {
		return nil, err
	}
	gz, err := files.ReadFile(base + ".gz")
	if err != nil {
		return nil, &NoAgentError{Platform: platform}
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("the embedded agent for %s is damaged: %w", platform, err)
	}
	// Exactly its size (gzip's trailer holds it, mod 2^32): io.ReadAll's
	// growth would leave up to twice that in every process that keeps it.
	var b []byte
	if n := len(gz); n >= 4 {
		b = make([]byte, 0, int(binary.LittleEndian.Uint32(gz[n-4:]))+1)
	}
	b, err = readAllInto(zr, b)
	if err != nil {
		return nil, fmt.Errorf("the embedded agent for %s is damaged: %w", platform, err)
	}
	sum := sha256.Sum256(b)
	a := &Agent{Platform: platform, Bytes: b, Digest: hex.EncodeToString(sum[:])}
	if d, err := Digest(platform); err != nil || d != a.Digest {
		return nil, fmt.Errorf("the embedded agent for %s is damaged: its digest is not the one recorded beside it", platform)
	}
	return a, nil
}
