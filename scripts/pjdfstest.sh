#!/bin/sh
# Runs the pjdfstest POSIX conformance suite plainly and under `strata run`
# in DEFAULT and SCRATCH mode, and prints the failed-assertion counts of each.
# pjdfstest is not packaged (no network in CI): give its source directory.
#
#   scripts/pjdfstest.sh PJDFSTEST_SRC [STRATA_BIN] [WORK_DIR]
#
# Needs root (the suite switches uids), autoconf, a C compiler and prove.
# Each run takes about 4 minutes on 2 cores; the three run one after another
# (the suite's ctime tests sleep and compare seconds).
set -eu
src=$(cd "${1:?usage: $0 PJDFSTEST_SRC [STRATA_BIN] [WORK_DIR]}" && pwd)
strata=${2:-$(dirname "$0")/../target/debug/strata}
strata=$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")
work=${3:-$(mktemp -d /tmp/strata-pjdfstest.XXXXXX)}
[ "$(id -u)" = 0 ] || { echo "pjdfstest switches uids: run as root" >&2; exit 2; }
if [ ! -x "$src/pjdfstest" ]; then
    (cd "$src" && autoreconf -ifs && ./configure && make pjdfstest) > "$work/build.log" 2>&1 ||
        { echo "building pjdfstest failed: $work/build.log" >&2; exit 1; }
fi
# a private zero-config identity: never the user's daemon or tiers
export HOME="$work/home" XDG_RUNTIME_DIR="$work/run"
mkdir -p "$HOME" "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
unset STRATA_SOCKET STRATA_CONFIG || true
summary() {
    # "Failed N/M subtests" per test file, then the total of failed assertions
    awk '/^Files=/{print} /Failed: [0-9]+/{n+=$NF} END{print "failed assertions: " n+0}' "$1"
}
for mode in plain default scratch; do
    rm -rf "$work/$mode"; mkdir -p "$work/$mode"; cd "$work/$mode"
    if [ "$mode" = plain ]; then
        prove -r "$src/tests" > "$work/$mode.log" 2>&1 || true
    else
        timeout 2400 "$strata" run --mode "$mode" -- prove -r "$src/tests" > "$work/$mode.log" 2>&1 || true
    fi
    echo "== $mode ($work/$mode.log)"
    summary "$work/$mode.log"
    grep -B0 -E "^$src/tests/.*\(Wstat" "$work/$mode.log" | sed "s#$src/tests/##" || true
done
