#!/bin/sh
# make release: the CLI for linux, darwin and windows on amd64 and arm64,
# static, -trimpath, no build id, the version stamped in; each in an
# archive with LICENSE, README.md, SECURITY.md, CHANGELOG.md and docs/ (.tar.gz; .zip for
# windows), times set to the commit's, and SHA256SUMS. The same commit and
# Go release give the same bytes (make release-check builds twice).
#
#   scripts/release.sh OUTDIR [VERSION]   VERSION: default git describe
#   PLATFORMS="linux/amd64 ..."           only these (default: all six)
set -eu
go=${GO:-go}
out=${1:?usage: release.sh OUTDIR [VERSION]}
cd "$(dirname "$0")/.."
# A tag names a release; without one, the commit (and -dirty for
# uncommitted changes) — never a made-up number.
version=${2:-$(git describe --tags --exact-match 2>/dev/null || \
  echo "devel-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)")}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$go" build -o "$work/archive" ./scripts/archive
for p in ${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}; do
  os=${p%/*} arch=${p#*/}
  name="hsbx-$version-$os-$arch"
  exe=hsbx; ext=tar.gz
  if [ "$os" = windows ]; then exe=hsbx.exe; ext=zip; fi
  mkdir -p "$work/$name"
  echo "release $name.$ext"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$go" build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X github.com/hsbx/hsbx/internal/cli.Version=$version" \
    -o "$work/$name/$exe" ./cmd/hsbx
  "$work/archive" -o "$out/$name.$ext" -dir "$name" -epoch "$epoch" \
    "$work/$name/$exe" LICENSE README.md SECURITY.md CHANGELOG.md docs/*.md
done
(cd "$out" && sha256sum hsbx-"$version"-* > SHA256SUMS && cat SHA256SUMS)
