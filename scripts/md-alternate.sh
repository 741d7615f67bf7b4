#!/usr/bin/env bash
# Old vs new release binaries on the metadata path only (bench md through the
# adapter, SCRATCH and DEFAULT, 4 processes x 5000 files), run alternately,
# each with its own daemon (RAM 2 GiB + a dir tier). Prints a table of
# median [min-max] ops/s per phase and new/old (BENCHMARKS.md, stop 52).
# usage: scripts/md-alternate.sh OLD_BIN_DIR NEW_BIN_DIR [RUNS] [WORK_DIR]
set -uo pipefail
work=${4:-$(mktemp -d /tmp/strata-mdalt.XXXXXX)}
export work
out=$work/md-alternate.jsonl; : > $out
for run in $(seq 1 ${3:-4}); do for lab in old new; do
  [ $lab = old ] && b=$1 || b=$2
  d=$work/$lab; rm -rf $d; mkdir -p $d/rt $d/dest; chmod 700 $d/rt
  cat > $d/strata.yaml <<Y
daemon: { socket: $d/rt/daemon.sock, shm_prefix: strata-mdalt-$lab, log: warn }
devices:
  - { name: ram, kind: ram, capacity: 2GiB }
  - { name: disk, kind: dir, path: $d/tier, capacity: 8GiB }
Y
  s="$b/strata --config $d/strata.yaml"
  $s daemon start > /dev/null
  for mode in scratch default; do
    rm -rf $d/dest/md; mkdir -p $d/dest/md
    $s bench md --dir $d/dest/md --via-strata $mode --procs 4 --files 5000 --write-bytes 4KiB --json | python3 -c "
import json,sys
r=json.loads(sys.stdin.read().strip().splitlines()[-1])
for name,p in r['result']['phases']:
    print(json.dumps({'bin':'$lab','run':$run,'figure':'md $mode '+name,'value':p['ops_per_s']}))" >> $out
    $s flush --wait $d/dest > /dev/null 2>&1
  done
  $s daemon stop > /dev/null
done; done
python3 - <<'P'
import json,statistics as st,collections
v=collections.defaultdict(list)
import os
for l in open(os.environ['work'] + '/md-alternate.jsonl'):
    r=json.loads(l); v[(r['figure'],r['bin'])].append(r['value'])
figs=sorted({f for f,_ in v}, key=lambda f:(f.split()[1], ['create','stat','read','remove'].index(f.split()[2]) if f.split()[2] in ['create','stat','read','remove'] else 9))
for f in figs:
    o,n=v[(f,'old')],v[(f,'new')]
    print(f"| {f} | {st.median(o):,.0f} [{min(o):,.0f}-{max(o):,.0f}] | {st.median(n):,.0f} [{min(n):,.0f}-{max(n):,.0f}] | {st.median(n)/st.median(o):.2f} |")
P
