#!/usr/bin/env bash
# Coverage-guided fuzzing of strata's decoders with AFL++ (cargo-afl, stable
# Rust): the ring request decoder, control-socket frames, the configuration
# reader, journal replay, and the cluster's handshake and bulk frames
# (crates/strata-fuzz). Each target starts from its checked-in corpus.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   CI runs it with 45 s per target; long runs by hand (docs/FUZZING.md).
# A crash fails the run; its input is copied to
# crates/strata-fuzz/crashes/<target>/, where tests/corpus.rs keeps
# replaying it once fixed (commit it with the fix).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ring control config journal cluster)

AFL_VERSION=0.18.2
if ! cargo afl --version 2>/dev/null | grep -q "$AFL_VERSION"; then
  echo "==> installing cargo-afl $AFL_VERSION (it builds its AFL++ runtime)"
  cargo install cargo-afl --version "$AFL_VERSION" --locked --quiet
fi
cargo afl config --build >/dev/null 2>&1 || true   # once per toolchain; a no-op after

export CARGO_TARGET_DIR="$PWD/target/afl"
cargo afl build --profile fuzz -p strata-fuzz --features afl --bins --quiet

export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_QUIET=1
# No core pinning: on a small machine another fuzzer or the tests may hold a core.
export AFL_NO_AFFINITY=1
# This machine's core pattern may pipe cores to a helper; AFL only needs
# the crash signal.
failed=0
for t in "${targets[@]}"; do
  out="$CARGO_TARGET_DIR/out/$t"
  rm -rf "$out"
  mkdir -p "$out"
  log="$out.log"
  # -V: stop after SECONDS; the outer timeout is a bound on a hung fuzzer.
  if ! timeout $((secs + 120)) cargo afl fuzz -V "$secs" -t 5000 \
      -i "crates/strata-fuzz/corpus/$t" -o "$out" "$CARGO_TARGET_DIR/fuzz/fuzz_$t" >"$log" 2>&1; then
    echo "fuzz $t: afl-fuzz failed; last lines of $log:" >&2
    tail -20 "$log" | sed 's/\x1b\[[0-9;]*m//g' >&2
    failed=1
    continue
  fi
  stats="$out/default/fuzzer_stats"
  execs=$(awk -F' *: *' '$1=="execs_done"{print $2}' "$stats")
  paths=$(awk -F' *: *' '$1=="corpus_count"{print $2}' "$stats")
  cov=$(awk -F' *: *' '$1=="bitmap_cvg"{print $2}' "$stats")
  crashes=$(find "$out/default/crashes" -type f -name 'id:*' | wc -l)
  hangs=$(find "$out/default/hangs" -type f -name 'id:*' | wc -l)
  printf 'fuzz %-8s %4ss  execs %-9s corpus %-6s coverage %-7s crashes %s  hangs %s\n' \
    "$t" "$secs" "$execs" "$paths" "$cov" "$crashes" "$hangs"
  if [ "$crashes" -gt 0 ] || [ "$hangs" -gt 0 ]; then
    mkdir -p "crates/strata-fuzz/crashes/$t"
    n=0
    for f in "$out"/default/crashes/id:* "$out"/default/hangs/id:*; do
      [ -f "$f" ] || continue
      n=$((n + 1))
      cp "$f" "crates/strata-fuzz/crashes/$t/$(date +%Y%m%d)-$n"
    done
    echo "fuzz $t: $crashes crash(es), $hangs hang(s): inputs in crates/strata-fuzz/crashes/$t/ (replay: cargo run -p strata-fuzz --bin fuzz_$t -- FILE)" >&2
    failed=1
  fi
done
exit $failed
