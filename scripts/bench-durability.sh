#!/usr/bin/env bash
# The durability figures of BENCHMARKS.md ("Durability (issue 4)") in one run:
#   drain    strata bench drain: raw destination bandwidth vs strata's drain of
#            the same bytes (same run), on the slow-pfs mount;
#   fsync    strata bench adapters --workloads ior+fsync (tmpfs, slow-pfs direct,
#            strata DEFAULT RAM-only and RAM + dir tier), plus the same IOR
#            directly on the disk that holds the dir tier: the ceiling of any
#            fsync that is durable on that tier;
#   journal  strata bench kv on two private daemons whose only device is a dir
#            tier (every blob journaled), journal on vs `journal.enabled: false`,
#            runs alternated.
# It mounts the slow-pfs emulation (../shared/tools/slow-pfs up) and unmounts it
# at the end only if it was not mounted before; builds the release binaries
# (DUR_BIN=path/to/strata skips the build, DUR_COMMIT names what it was built
# from); prints the machine, the commit and every command before its output.
#
# Usage: scripts/bench-durability.sh [drain] [fsync] [journal]   (default: all)
# Environment: REPEAT (default 3), DRAIN_SIZE (1GiB), TIER_DIR (where the dir
# tiers live; default target/bench-durability, must not be tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(drain fsync journal)
want() { local p; for p in "${parts[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
REPEAT=${REPEAT:-3}
DRAIN_SIZE=${DRAIN_SIZE:-1GiB}
TIER_DIR=${TIER_DIR:-$ROOT/target/bench-durability}

slow=../shared/tools/slow-pfs
mnt=/tmp/slow-pfs/mnt
mounted_here=0
if ! mountpoint -q "$mnt"; then
    [[ -x $slow ]] || { echo "bench-durability: $slow not found and $mnt not mounted" >&2; exit 2; }
    mnt=$("$slow" up | tail -n 1)
    mounted_here=1
fi
mountpoint -q "$mnt" || { echo "bench-durability: $mnt is not a mount point" >&2; exit 2; }

if [[ -n ${DUR_BIN:-} ]]; then
    BIN=$DUR_BIN
else
    cargo build --release -q -p strata-cli -p strata-posix -p strata-bench
    BIN=$ROOT/target/release/strata
fi
mkdir -p "$TIER_DIR"
WORK=$(mktemp -d "$TIER_DIR/run-XXXXXX")
daemons=()
cleanup() {
    local c
    for c in "${daemons[@]}"; do "$BIN" --config "$c" daemon stop >/dev/null 2>&1 || true; done
    rm -rf "$WORK"
    if [[ $mounted_here == 1 ]]; then "$slow" down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

run() { printf '\n$ %s\n' "$*"; "$@"; }

echo "== machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r)"
if [[ -n ${DUR_COMMIT:-} ]]; then commit=$DUR_COMMIT; else
    commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes under crates/)')"; fi
echo "== commit: $commit; binary $BIN"
echo "== destination: $mnt ($(findmnt -no FSTYPE "$mnt")); dir tiers under $TIER_DIR ($(df --output=source "$TIER_DIR" | tail -1), $(findmnt -no FSTYPE -T "$TIER_DIR"))"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)

if want drain; then
    echo; echo "== drain: strata drain vs raw destination bandwidth, same run"
    run "$BIN" bench drain --dir "$mnt" --size "$DRAIN_SIZE" --files 8 --repeat "$REPEAT"
    run "$BIN" bench drain --dir "$mnt" --size "$DRAIN_SIZE" --files 32 --repeat "$REPEAT"
fi

if want fsync; then
    echo; echo "== fsync after each write: 4 processes x 256 MiB, 1 MiB writes"
    run "$BIN" bench adapters --slow-pfs "$mnt" --tier-dir "$TIER_DIR" --workloads ior+fsync \
        --setups tmpfs,slow-pfs,default-ram,default-ram+disk --repeat "$REPEAT" --markdown
    echo; echo "== the same IOR with fsync directly on the dir tier's disk (ceiling of a tier-durable fsync)"
    for r in $(seq "$REPEAT"); do
        run "$BIN" bench ior --dir "$WORK/ior-disk" --procs 4 --block-size 256MiB --transfer-size 1MiB --fsync
    done
fi

if want journal; then
    echo; echo "== journal cost on put latency: dir tier only, journal on vs off"
    for j in true false; do
        mkdir -p "$WORK/j-$j/run" "$WORK/j-$j/tier"
        cat > "$WORK/j-$j/strata.yaml" <<EOF
daemon:
  socket: $WORK/j-$j/run/d.sock
  shm_prefix: strata-bdur-$$-$j
devices:
  - name: disk
    kind: dir
    path: $WORK/j-$j/tier
    capacity: 4GiB
journal:
  enabled: $j
EOF
        "$BIN" --config "$WORK/j-$j/strata.yaml" daemon start >/dev/null
        daemons+=("$WORK/j-$j/strata.yaml")
    done
    for r in $(seq "$REPEAT"); do
        for j in true false; do
            echo; echo "-- repeat $r, journal.enabled: $j"
            run "$BIN" --config "$WORK/j-$j/strata.yaml" bench kv --sizes 4KiB,1MiB --threads 1 --procs 1 --seconds 2
        done
    done
    for j in true false; do
        echo; echo "-- journal status (journal.enabled: $j)"
        "$BIN" --config "$WORK/j-$j/strata.yaml" status --json | python3 -c 'import json,sys; j=json.load(sys.stdin).get("journal"); print(None if j is None else {k: j[k] for k in ("file_bytes","live_records","syncs","compactions")})'
    done
fi

echo; echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t0 )) s"
