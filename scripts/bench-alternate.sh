#!/usr/bin/env bash
# Old vs new release binaries, run alternately (old, new, old, new, ...), each
# with its own daemon, on the adapter's metadata path (bench md, SCRATCH and
# DEFAULT), a write burst into the RAM tier (bench ior, SCRATCH), the native
# API (bench kv 4 KiB and 1 MiB, bench ycsb a and c) and the daemon's start + stop. Prints median [min-max] per figure and the ratio of
# the medians new/old.
#
# usage: scripts/bench-alternate.sh OLD_BIN_DIR NEW_BIN_DIR [RUNS] [WORK_DIR]
#   *_BIN_DIR: a directory with the `strata` binary, libstrata_posix.so (and,
#   from issue 13 on, the `strata-bench` binary) of one build (target/release of a checkout of that commit).
set -euo pipefail
old=$1 new=$2 runs=${3:-5} work=${4:-$(mktemp -d /tmp/strata-alt.XXXXXX)}
mkdir -p "$work"
out="$work/results.jsonl"
: > "$out"

cfg() { # $1 = label
  local d="$work/$1"
  rm -rf "$d" && mkdir -p "$d/rt" "$d/dest" && chmod 700 "$d/rt"
  cat > "$d/strata.yaml" <<EOF
daemon:
  socket: $d/rt/daemon.sock
  shm_prefix: strata-alt-$1
  log: warn
devices:
  - name: ram
    kind: ram
    capacity: 2GiB
  - name: disk
    kind: dir
    path: $d/tier
    capacity: 8GiB
EOF
  echo "$d"
}

one() { # $1 = label, $2 = bin dir, $3 = run
  local d; d=$(cfg "$1")
  local s=("$2/strata" --config "$d/strata.yaml")
  local t0 t1
  t0=$(date +%s.%N)
  "${s[@]}" daemon start > /dev/null
  t1=$(date +%s.%N)
  printf '{"bin":"%s","run":%s,"figure":"daemon start s","value":%.6f}\n' "$1" "$3" "$(echo "$t1 - $t0" | bc)" >> "$out"
  for mode in scratch default; do
    rm -rf "$d/dest/md" && mkdir -p "$d/dest/md"
    "${s[@]}" bench md --dir "$d/dest/md" --via-strata $mode --procs 4 --files 5000 --write-bytes 4KiB --json \
      | python3 -c "
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
for name, p in r['result']['phases']:
    print(json.dumps({'bin': '$1', 'run': $3, 'figure': 'md $mode ' + name + ' ops/s', 'value': p['ops_per_s']}))
" >> "$out"
    "${s[@]}" flush --wait "$d/dest" > /dev/null 2>&1 || true
  done
  rm -rf "$d/dest/ior" && mkdir -p "$d/dest/ior"
  "${s[@]}" bench ior --dir "$d/dest/ior" --via-strata scratch --procs 4 --block-size 256MiB --transfer-size 1MiB --json \
    | python3 -c "
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
res = r['result']
for name in ('write', 'read'):
    if name in res and isinstance(res[name], dict) and 'mib_per_s' in res[name]:
        print(json.dumps({'bin': '$1', 'run': $3, 'figure': 'ior scratch 4x256MiB ' + name + ' MiB/s', 'value': res[name]['mib_per_s']}))
" >> "$out"
  # Native API: put/get of one client thread, 4 KiB and 1 MiB.
  "${s[@]}" bench kv --sizes 4KiB,1MiB --threads 1 --procs 1 --seconds 1 --json \
    | python3 -c "
import json, sys
for l in sys.stdin:
    l = l.strip()
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    if r.get('bench') != 'kv' or r.get('op') not in ('put', 'get'):
        continue
    size = '4KiB' if r['size_bytes'] == 4096 else '1MiB'
    print(json.dumps({'bin': '$1', 'run': $3, 'figure': 'kv ' + size + ' ' + r['op'] + ' ops/s', 'value': r['ops_per_s']}))
    if r.get('p50_us') is not None:
        print(json.dumps({'bin': '$1', 'run': $3, 'figure': 'kv ' + size + ' ' + r['op'] + ' p50 us', 'value': r['p50_us']}))
" >> "$out"
  # YCSB, strata only (the Redis side does not change between binaries).
  "${s[@]}" bench ycsb --workloads a,c --records 50000 --ops 100000 --repeat 1 --json \
    | python3 -c "
import json, sys
for l in sys.stdin:
    l = l.strip()
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    if r.get('kind') == 'run' and r.get('store') == 'strata':
        print(json.dumps({'bin': '$1', 'run': $3, 'figure': 'ycsb ' + r['workload'] + ' ops/s', 'value': r['ops_per_s']}))
" >> "$out"
  t0=$(date +%s.%N)
  "${s[@]}" daemon stop > /dev/null
  t1=$(date +%s.%N)
  printf '{"bin":"%s","run":%s,"figure":"daemon stop s","value":%.6f}\n' "$1" "$3" "$(echo "$t1 - $t0" | bc)" >> "$out"
}

for r in $(seq 1 "$runs"); do
  one old "$old" "$r"
  one new "$new" "$r"
done

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
figs = []
for r in rows:
    if r["figure"] not in figs:
        figs.append(r["figure"])
print("| figure | n | old median [min-max] | new median [min-max] | new/old |")
print("|---|---|---|---|---|")
for f in figs:
    o = [r["value"] for r in rows if r["figure"] == f and r["bin"] == "old"]
    n = [r["value"] for r in rows if r["figure"] == f and r["bin"] == "new"]
    if not o or not n:
        continue
    fmt = lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3f}"
    mo, mn = statistics.median(o), statistics.median(n)
    print(f"| {f} | {len(o)} | {fmt(mo)} [{fmt(min(o))}-{fmt(max(o))}] | {fmt(mn)} [{fmt(min(n))}-{fmt(max(n))}] | {mn / mo:.2f} |")
EOF
