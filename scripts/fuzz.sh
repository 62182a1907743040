#!/usr/bin/env bash
# fuzz.sh — run the fuzz targets: all of them (make soak, make fuzz), or a
# few picked in turn (the merge gate). Every target's seed corpus already
# runs inside go test; this is the coverage-guided search on top.
#
# Usage: scripts/fuzz.sh FUZZTIME [PICK [TURN]]
#   FUZZTIME  -fuzztime for each target: a count (30000x) or a time (60s)
#   PICK      how many targets to fuzz (default: all)
#   TURN      which PICK in turn (default: the commit's number of commits),
#             so successive commits fuzz successive targets and a re-run
#             of one commit fuzzes the same ones
#
# Prints which targets it picked and which it left to other turns.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go=${GO:-go}
fuzztime=${1:?usage: fuzz.sh FUZZTIME [PICK [TURN]]}

targets=()
for pkg in $("$go" list ./...); do
  for f in $("$go" test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    targets+=("$pkg $f")
  done
done
n=${#targets[@]}
[ "$n" -gt 0 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
pick=${2:-$n}
[ "$pick" -le "$n" ] || pick=$n
turn=${3:-$(git rev-list --count HEAD 2>/dev/null || echo 0)}
first=$(((turn * pick) % n))

echo "fuzz: $pick of $n targets (turn $turn), $fuzztime each"
for ((i = 0; i < pick; i++)); do
  read -r pkg f <<<"${targets[$(((first + i) % n))]}"
  echo "fuzz $pkg $f ($fuzztime)"
  "$go" test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime"
done
