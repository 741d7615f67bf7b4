#!/usr/bin/env bash
# The tiering figures of BENCHMARKS.md ("Tiering (issue 5)") in one run:
# `strata bench tiers` — VPIC-like writes and BD-CATS-like reads on 1, 2 and 3
# tiers (slow-pfs as destination, RAM tier, dir tier on disk), the placement
# engines on a put-heavy native-API workload — saved as JSON under
# bench/results/, printed as markdown, and plotted (scripts/plot-tiers.py,
# PNGs next to the JSON).
#
# It mounts the slow-pfs emulation (../shared/tools/slow-pfs up) and unmounts it
# at the end only if it was not mounted before; builds the release binaries
# (TIERS_BIN=path/to/strata skips the build, TIERS_COMMIT names what it was
# built from); prints the machine, the commit, the load and every command.
#
# Usage: scripts/bench-tiers.sh [extra arguments for strata bench tiers]
# Environment: REPEAT (default 3), DATA (VPIC bytes, default 2GiB), PUT_DATA
# (placement bytes, default 2GiB), TIER_DIR (dir tiers; default target/bench-tiers,
# must not be tmpfs), OUT (default bench/results), NAME (default tiers: the JSON is
# $OUT/$NAME.json), PLOT (default 1: run the plots; needs python3 with matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REPEAT=${REPEAT:-3}
DATA=${DATA:-2GiB}
PUT_DATA=${PUT_DATA:-2GiB}
TIER_DIR=${TIER_DIR:-$ROOT/target/bench-tiers}
OUT=${OUT:-bench/results}
NAME=${NAME:-tiers}
PLOT=${PLOT:-1}

slow=../shared/tools/slow-pfs
mnt=/tmp/slow-pfs/mnt
mounted_here=0
if ! mountpoint -q "$mnt"; then
    [[ -x $slow ]] || { echo "bench-tiers: $slow not found and $mnt not mounted" >&2; exit 2; }
    mnt=$("$slow" up | tail -n 1)
    mounted_here=1
fi
mountpoint -q "$mnt" || { echo "bench-tiers: $mnt is not a mount point" >&2; exit 2; }
cleanup() { if [[ $mounted_here == 1 ]]; then "$slow" down >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

if [[ -n ${TIERS_BIN:-} ]]; then
    BIN=$TIERS_BIN
else
    cargo build --release -q -p strata-cli -p strata-posix -p strata-bench
    BIN=$ROOT/target/release/strata
fi
mkdir -p "$TIER_DIR" "$OUT"

run() { printf '\n$ %s\n' "$*"; "$@"; }

echo "== machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r)"
if [[ -n ${TIERS_COMMIT:-} ]]; then commit=$TIERS_COMMIT; else
    commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes under crates/)')"; fi
echo "== commit: $commit; binary $BIN"
echo "== destination: $mnt ($(findmnt -no FSTYPE "$mnt")); dir tiers under $TIER_DIR ($(df --output=source "$TIER_DIR" | tail -1), $(findmnt -no FSTYPE -T "$TIER_DIR"))"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)

run "$BIN" bench tiers --slow-pfs "$mnt" --tier-dir "$TIER_DIR" --repeat "$REPEAT" --data "$DATA" --put-data "$PUT_DATA" \
    --save "$OUT/$NAME.json" --markdown "$@"

if [[ $PLOT == 1 ]]; then
    echo
    run python3 scripts/plot-tiers.py "$OUT/$NAME.json" "$OUT"
fi

echo; echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t0 )) s"
