#!/bin/sh
# Builds the agents hsbx carries (`make agents`): static, stripped,
# -trimpath, no build id, so the same Go release makes the same bytes
# (TestEmbeddedAgentsAreFresh checks). Usage: build.sh [GO] [OUTDIR]
set -eu
go=${1:-go}
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here}
for arch in amd64 arm64; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$go" build -trimpath -ldflags='-s -w -buildid=' \
    -o "$out/agent-linux-$arch" "$here/../../cmd/hsbx-agent"
  # Its digest beside it: what names it in a sandbox, known without
  # decompressing it (a holder whose sandbox has it never does).
  sha256sum "$out/agent-linux-$arch" | cut -d' ' -f1 > "$out/agent-linux-$arch.sha256"
  gzip -9 -n -f "$out/agent-linux-$arch"
done
"$go" env GOVERSION > "$out/toolchain.txt"
