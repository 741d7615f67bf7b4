#!/usr/bin/env bash
# fio directly on a directory vs the same jobs under `strata run` (LD_PRELOAD
# adapter), printing bandwidth per job and the ratio strata / direct.
#
# Usage: scripts/bench-fio.sh [--dir DIR] [--mode scratch|default|workflow]
#                             [--size SIZE] [--size-4k SIZE] [--jobs N]
#                             [--strata BIN] [JOB.fio ...]
#   --dir      destination directory (default: $TMPDIR or /tmp, a fresh subdirectory;
#              not under /dev, /run, /proc, /sys: the adapter never buffers those)
#   --mode     strata mode of the buffered run (default: scratch)
#   --size     bytes per fio job for the 1 MiB sequential jobs (default 256M)
#   --size-4k  bytes per fio job for the 4 KiB and verify jobs (default 32M)
#   --jobs     fio numjobs (default 4)
#   --strata   the strata binary (default: $STRATA_BIN, else target/release/strata)
#   JOB.fio    job files (default: bench/fio/*.fio)
# Needs fio (installed with apt-get when run as root) and jq. Run from anywhere
# inside the repository; build first: cargo build --release
set -euo pipefail
cd "$(dirname "$0")/.."

base=${TMPDIR:-/tmp}
mode=scratch
size=256M
size4k=32M
jobs=4
strata=${STRATA_BIN:-target/release/strata}
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) base=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --size-4k) size4k=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "bench-fio: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || files=(bench/fio/*.fio)
case "$mode" in scratch|default|workflow) ;; *) echo "bench-fio: --mode must be scratch, default or workflow" >&2; exit 2 ;; esac

if ! command -v fio >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
  else
    echo "bench-fio: fio is not installed (apt-get install fio)" >&2; exit 1
  fi
fi
command -v jq >/dev/null || { echo "bench-fio: jq is not installed (apt-get install jq)" >&2; exit 1; }
[ -x "$strata" ] || { echo "bench-fio: $strata not found; build it: cargo build --release" >&2; exit 1; }

work=$(mktemp -d "$base/strata-bench-fio.XXXXXX")
out=$(mktemp -d)
trap 'rm -rf "$work" "$out"' EXIT
mkdir -p "$work/direct" "$work/strata"
export FIO_SIZE=$size FIO_SIZE_4K=$size4k FIO_JOBS=$jobs

now() { date +%s.%N; }
echo "fio $(fio --version) — $jobs jobs, $size per 1 MiB job, $size4k per 4 KiB/verify job; direct vs strata run --mode $mode; destination $work; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %-14s %6s %12s %12s %8s\n' FILE JOB DIR 'DIRECT MiB/s' 'STRATA MiB/s' RATIO
strata=$(realpath "$strata")
abs=()
for f in "${files[@]}"; do abs+=("$(realpath "$f")"); done
cd "$work"   # fio may leave state files in its working directory
for f in "${abs[@]}"; do
  name=$(basename "$f" .fio)
  t0=$(now)
  FIO_DIR=$work/direct fio --output-format=json "$f" >"$out/$name.direct.json"
  t1=$(now)
  FIO_DIR=$work/strata "$strata" run --mode "$mode" --include "$work/strata" -- \
    fio --output-format=json "$f" >"$out/$name.strata.json" 2>"$out/$name.strata.err" || {
      echo "bench-fio: $f failed under strata run:" >&2; cat "$out/$name.strata.err" >&2; exit 1; }
  t2=$(now)
  rm -rf "$work/direct"/* "$work/strata"/*
  # fio may print warnings before its JSON document.
  q='.jobs[] | [.jobname, .error, .read.bw_bytes, .write.bw_bytes] | @tsv'
  js() { sed -n '/^{/,$p' "$1" | jq -r "$q"; }
  paste <(js "$out/$name.direct.json") <(js "$out/$name.strata.json") |
  while IFS=$'\t' read -r job err rd wr _job2 err2 rd2 wr2; do
    [ "$err" = 0 ] && [ "$err2" = 0 ] || { echo "bench-fio: $name/$job reported an error (direct $err, strata $err2)" >&2; exit 1; }
    for dirn in write read; do
      if [ $dirn = write ]; then a=$wr; b=$wr2; else a=$rd; b=$rd2; fi
      [ "$a" != 0 ] || continue
      awk -v f="$name" -v j="$job" -v d=$dirn -v a="$a" -v b="$b" \
        'BEGIN { printf "%-10s %-14s %6s %12.1f %12.1f %7.2fx\n", f, j, d, a/1048576, b/1048576, b/a }'
    done
  done
  awk -v n="$name" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "%-10s wall time: direct %.2f s, strata run %.2f s (including its drain and daemon start/stop)\n", n, b-a, c-b }'
  grep '^strata:' "$out/$name.strata.err" | sed "s/^/$name      /" || true
  if grep -q '^strata: 0B written to the buffer' "$out/$name.strata.err"; then
    echo "bench-fio: WARNING: nothing went through the buffer — is $work tracked (not under /dev, /run, the tiers or the socket directory)?" >&2
  fi
done
