#!/usr/bin/env bash
# The adapter table of BENCHMARKS.md in one run: mounts the slow-pfs emulation
# (../shared/tools/slow-pfs up, relative to the repository, if present), builds
# the release binaries and runs `strata bench adapters` with any extra options
# (e.g. --markdown --save adapters.json, --repeat 5).
# Usage: scripts/bench-adapters.sh [strata bench adapters options...]
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/slow-pfs-args.sh
slow_pfs_args bench-adapters
args=("${SLOW_PFS_ARGS[@]}")
cargo build --release -q -p strata-cli -p strata-posix -p strata-bench
echo "bench-adapters: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >&2
exec target/release/strata bench adapters "${args[@]}" "$@"
