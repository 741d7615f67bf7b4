#!/usr/bin/env bash
# Issue 18 target 1, the drain's pace: the durable checkpoint (bench ior, 4
# processes x 256 MiB, 1 MiB writes, fsync after each, DEFAULT, RAM 2 GiB +
# dir tier, destination on slow-pfs) with several flusher settings, and the
# peer (the same workload written directly with fsync on the dir tier's file
# system), alternated per repeat. Each variant has its own warm daemon.
# Prints write MiB/s per repeat and variant.
#
# usage: scripts/bench-t1-pace.sh [REPEATS] [VARIANTS]
#   VARIANTS (default "yield noyield noflush"): yield = the defaults;
#   noyield = flush.busy_window: 0; noflush = flush.enabled: false;
#   busyN = flush.busy_bandwidth_max: N MiB/s; old = OLD_BIN's defaults.
# env: BIN (target/release), OLD_BIN, TIER_FS (/var/tmp), DEST (/tmp/slow-pfs/mnt)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3} vars=${2:-"yield noyield noflush"}
bin=${BIN:-$PWD/target/release} tierfs=${TIER_FS:-/var/tmp} dest=${DEST:-/tmp/slow-pfs/mnt}
work=$(mktemp -d /tmp/strata-t1.XXXXXX)
bin_of() { if [ "$1" = old ]; then echo "${OLD_BIN:?OLD_BIN for the old variant}"; else echo "$bin"; fi; }
cfg() {
  local v=$1 x=""
  case $v in
    noyield) x="flush: { busy_window: 0 }" ;;
    noflush) x="flush: { enabled: false }" ;;
    busy*) x="flush: { busy_bandwidth_max: ${v#busy}MiB/s }" ;;
  esac
  mkdir -p "$work/$v"
  cat > "$work/$v.yaml" <<EOC
daemon: { socket: $work/$v/daemon.sock, shm_prefix: strata-t1-$v }
devices:
  - { name: ram, kind: ram, capacity: 2GiB }
  - { name: disk0, kind: dir, path: $tierfs/strata-t1-tier-$v, capacity: 8GiB }
$x
EOC
}
mib() { python3 -c 'import json,sys;t=sys.stdin.read();d=json.loads(t[t.index("{"):]);print(round(d["result"]["write"]["mib_per_s"]))'; }
ior=(bench ior -n 4 -t 1MiB -b 256MiB --fsync --json)
one() {
  local v=$1 b; b=$(bin_of "$v")
  if [ "$v" = peer ]; then
    rm -rf "$tierfs/strata-t1-peer"; mkdir -p "$tierfs/strata-t1-peer"
    "$b/strata" "${ior[@]}" --dir "$tierfs/strata-t1-peer" | mib
    # the peer's writeback must not land in the next variant's fdatasyncs
    rm -rf "$tierfs/strata-t1-peer"; sync; return
  fi
  local d="$dest/strata-t1-$v"; rm -rf "$d"; mkdir -p "$d"
  "$b/strata" "${ior[@]}" --config "$work/$v.yaml" --dir "$d" --via-strata default | mib
  "$b/strata" flush --config "$work/$v.yaml" --wait >/dev/null 2>&1 || true
  rm -rf "$d"; sync
}
for v in $vars; do
  cfg "$v"; rm -rf "$tierfs/strata-t1-tier-$v"
  "$(bin_of "$v")/strata" daemon start --config "$work/$v.yaml" >/dev/null
  one "$v" >/dev/null   # warm-up
done
for r in $(seq 1 "$reps"); do
  line="rep $r:"
  for v in peer $vars; do line="$line $v=$(one "$v")"; done
  echo "$line"
done
for v in $vars; do
  "$(bin_of "$v")/strata" daemon stop --config "$work/$v.yaml" >/dev/null || true
  rm -rf "$tierfs/strata-t1-tier-$v"
done
rm -rf "$work"
