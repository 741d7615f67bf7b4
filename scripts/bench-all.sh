#!/usr/bin/env bash
# Every benchmark of BENCHMARKS.md's target table (issue 18) in one command:
# mounts the slow-pfs emulation (../shared/tools/slow-pfs up, relative to the
# repository, if present), builds the release binaries, installs matplotlib if
# missing, and runs scripts/bench_all.py, which writes
# bench/results/<date>-<commit>.json, .md (the target table) and -targets.png.
# Usage: scripts/bench-all.sh [--repeat N] [--quick] [--only t1,t3] ...
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/slow-pfs-args.sh
slow_pfs_args bench-all
args=("${SLOW_PFS_ARGS[@]}")
command -v redis-server >/dev/null || echo "bench-all: redis-server not on PATH (apt-get install redis-server); YCSB is skipped" >&2
python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib 2>/dev/null \
  || pip install -q --break-system-packages matplotlib || echo "bench-all: no matplotlib: tables without plots" >&2
# IOWarp CTE 2.3.2 (t4's peer) from PyPI into a private virtualenv, once.
iowarp="${XDG_CACHE_HOME:-$HOME/.cache}/strata-bench/iowarp-2.3.2"
if [ ! -x "$iowarp/bin/clio_cte_bench" ]; then
  { python3 -m venv "$iowarp" && "$iowarp/bin/pip" install -q iowarp-core==2.3.2; } \
    || echo "bench-all: cannot install iowarp-core 2.3.2: t4 runs without its IOWarp peer" >&2
fi
[ -x "$iowarp/bin/clio_cte_bench" ] && args+=(--iowarp-bin "$iowarp/bin")
cargo build --release -q -p strata-cli -p strata-posix -p strata-bench
echo "bench-all: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >&2
exec python3 scripts/bench_all.py "${args[@]}" "$@"
