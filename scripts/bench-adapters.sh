#!/usr/bin/env bash
# The adapter table of BENCHMARKS.md in one run: mounts the slow-pfs emulation
# (../shared/tools/slow-pfs up, relative to the repository, if present), builds
# the release binaries and runs `strata bench adapters` with any extra options
# (e.g. --markdown --save adapters.json, --repeat 5).
# Usage: scripts/bench-adapters.sh [strata bench adapters options...]
set -euo pipefail
cd "$(dirname "$0")/.."

slow=../shared/tools/slow-pfs
args=()
if [ -x "$slow" ]; then
  if mnt=$("$slow" up | tail -n 1) && mountpoint -q "$mnt"; then
    args+=(--slow-pfs "$mnt")
  else
    echo "bench-adapters: slow-pfs could not be mounted; the slow-pfs baseline will be skipped" >&2
  fi
else
  echo "bench-adapters: $slow not found; the slow-pfs baseline will be skipped" >&2
fi
cargo build --release -q -p strata-cli -p strata-posix -p strata-bench
echo "bench-adapters: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >&2
exec target/release/strata bench adapters "${args[@]}" "$@"
