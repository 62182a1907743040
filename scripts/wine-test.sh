#!/usr/bin/env bash
# Runs hsbx's Windows code for real, under Wine (Debian's wine64): the
# exec channel's named-pipe transport and its peer check, the private
# directory and lock, the detached holder start, and the CLI's own verdict
# that the channel is on. Usage: scripts/wine-test.sh [WORKDIR]
# Installs wine64 and the MinGW compiler (for a shim Wine 8 lacks) when
# missing; needs root for that.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work=${1:-/tmp/hsbx-wine}
mkdir -p "$work"
work=$(cd "$work" && pwd)

if [ ! -x /usr/lib/wine/wine64 ] || ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
  echo "wine-test: installing wine64 and gcc-mingw-w64-x86-64-win32 (Debian)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wine64 gcc-mingw-w64-x86-64-win32
fi
wine=/usr/lib/wine/wine64
export WINEPREFIX="$work/prefix" WINEDEBUG=-all
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  echo "wine-test: making the Wine prefix"
  timeout 300 "$wine" cmd /c exit >/dev/null 2>&1 || true
fi
sys32="$WINEPREFIX/drive_c/windows/system32"
[ -d "$sys32" ] || { echo "wine-test: no $sys32 after making the prefix" >&2; exit 1; }
x86_64-w64-mingw32-gcc -shared -O2 -o "$sys32/bcryptprimitives.dll" \
  scripts/wine/bcryptprimitives.c scripts/wine/bcryptprimitives.def -ladvapi32

fail=0
run() { # package, test pattern
  local pkg=$1 pat=$2 exe="$work/$(basename "$1").test.exe"
  CGO_ENABLED=0 GOOS=windows GOARCH=amd64 go test -c -o "$exe" "./$pkg"
  echo "== $pkg ($pat) under Wine"
  local out
  out=$(timeout 300 "$wine" "$exe" -test.v -test.count=1 -test.run "$pat" 2>&1) || { echo "$out"; echo "wine-test: FAIL $pkg"; fail=1; return; }
  echo "$out" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)' || true
  # A pattern that matches nothing passes: make sure the tests ran.
  if ! echo "$out" | grep -q -- '--- PASS'; then echo "wine-test: no test of $pkg ran"; fail=1; fi
}
run internal/channel '^(TestPipe|TestSameUser)'
run internal/privdir '^(TestOpen|TestVerdict|TestTryLockWindows)'
run internal/proc '^(TestStartDetachedRunsOnWindows|TestDetachedHelper)$'

echo "== hsbx.exe doctor under Wine: the CLI's exec channel is on"
CGO_ENABLED=0 GOOS=windows GOARCH=amd64 go build -o "$work/hsbx.exe" ./cmd/hsbx
out=$(timeout 120 "$wine" "$work/hsbx.exe" doctor 2>&1 || true)
echo "$out" | grep -i 'exec channel' || true
if ! echo "$out" | grep -q '^exec channel: on '; then echo "$out"; echo "wine-test: FAIL: doctor does not say the channel is on"; fail=1; fi

echo "== an engine named by its Windows path is taken as a program (Windows files have no execute bit)"
cp "$work/hsbx.exe" "$work/engine.exe"
out=$(timeout 120 "$wine" "$work/hsbx.exe" --runtime 'Z:'"${work//\//\\}"'\engine.exe' doctor 2>&1 || true)
if echo "$out" | grep -q 'is not executable'; then echo "$out"; echo "wine-test: FAIL: an .exe named by --runtime was refused as not executable"; fail=1; fi
if ! echo "$out" | grep -q 'engine.exe'; then echo "$out"; echo "wine-test: FAIL: doctor did not name the --runtime path"; fail=1; fi

[ "$fail" = 0 ] && echo "wine-test: ok"
exit "$fail"
