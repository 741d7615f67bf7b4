#!/usr/bin/env bash
# Crash test of strata's durability promise: every byte acknowledged by fsync
# reaches the destination intact, even when the daemon is killed with SIGKILL
# at a random moment.
#
#   scripts/kill9.sh [ITERATIONS]        (default 100; CI runs a handful)
#
# Each iteration: a fresh destination and tier directory; a daemon with a
# small RAM tier (64 MiB) and a dir tier; a DEFAULT-mode checkpoint run under
# the adapter (python3, seeded): files of random sizes written in random
# chunks, fsync after each file, plus a log file appended with an fsync after
# every record (pages rewritten after fsync); the writer prints an ACK line
# (path, length, sha256 of the acknowledged bytes) after each fsync returns.
# After a random delay (0–1.5 s, so also during writes, fsyncs, stash and
# flush) the daemon and the writer are killed with SIGKILL. The daemon is
# restarted on the same configuration (it replays its journal), `strata
# drain wait` drains, and every ACKed file must be at the destination with
# exactly its acknowledged bytes (the log: its acknowledged prefix).
#
# Binaries: $KILL9_BIN (default target/release/strata, else target/debug)
# and libstrata_posix.so next to it ($KILL9_LIB overrides).
set -euo pipefail

ITER=${1:-100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${KILL9_BIN:-}
if [[ -z $BIN ]]; then
    for b in "$ROOT/target/release/strata" "$ROOT/target/debug/strata"; do
        if [[ -x $b && -f $(dirname "$b")/libstrata_posix.so ]]; then BIN=$b; break; fi
    done
fi
[[ -n $BIN && -x $BIN ]] || { echo "kill9: no strata binary (cargo build --release -p strata-cli -p strata-posix)" >&2; exit 2; }
LIB=${KILL9_LIB:-$(dirname "$BIN")/libstrata_posix.so}
[[ -f $LIB ]] || { echo "kill9: no $LIB (cargo build -p strata-posix)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "kill9: needs python3" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-kill9-XXXXXX")
DAEMON_PID=
APP_PID=
cleanup() {
    [[ -n $APP_PID ]] && kill -9 "$APP_PID" 2>/dev/null || true
    [[ -n $DAEMON_PID ]] && kill -9 "$DAEMON_PID" 2>/dev/null || true
    if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

cat > "$WORK/writer.py" <<'EOF'
import hashlib, os, random, sys
dest, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
out = sys.stdout
log_fd = os.open(os.path.join(dest, "log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
log_h, log_len = hashlib.sha256(), 0
for i in range(10_000):
    path = os.path.join(dest, f"ck{i:05d}")
    size = rnd.choice([0, 1, 4095, 4096, 70_000, 1 << 20, 3 << 20, rnd.randrange(1, 9 << 20)])
    data = rnd.randbytes(size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    at = 0
    while at < size:
        n = min(size - at, rnd.choice([512, 4096, 65536, 1 << 20, 4 << 20]))
        os.write(fd, data[at:at + n])
        at += n
    os.fsync(fd)
    os.close(fd)
    out.write(f"ACK {path} {size} {hashlib.sha256(data).hexdigest()}\n")
    rec = rnd.randbytes(rnd.randrange(1, 3000))
    os.write(log_fd, rec)
    os.fdatasync(log_fd)
    log_h.update(rec)
    log_len += len(rec)
    out.write(f"LOG {log_len} {log_h.hexdigest()}\n")
    out.flush()
EOF

cat > "$WORK/verify.py" <<'EOF'
import hashlib, os, sys
acks, dest = sys.argv[1], sys.argv[2]
files, log = {}, (0, hashlib.sha256().hexdigest())
for line in open(acks, errors="replace"):
    p = line.split()
    if len(p) == 4 and p[0] == "ACK":
        files[p[1]] = (int(p[2]), p[3])
    elif len(p) == 3 and p[0] == "LOG":
        log = (int(p[1]), p[2])
bad, nbytes = [], 0
for path, (size, digest) in files.items():
    try:
        b = open(path, "rb").read()
    except OSError as e:
        bad.append(f"{path}: {e}")
        continue
    if len(b) != size or hashlib.sha256(b).hexdigest() != digest:
        bad.append(f"{path}: {len(b)} bytes, want {size} with sha256 {digest[:12]}")
    nbytes += size
n, digest = log
try:
    b = open(os.path.join(dest, "log"), "rb").read()
    if len(b) < n or hashlib.sha256(b[:n]).hexdigest() != digest:
        bad.append(f"log: {len(b)} bytes, acknowledged prefix of {n} bytes differs")
except OSError as e:
    if n > 0:
        bad.append(f"log: {e}")
nbytes += n
print(f"{len(files)} {nbytes} {len(bad)}")
for x in bad[:20]:
    print("LOST", x, file=sys.stderr)
EOF

start_daemon() {
    "$BIN" --config "$1" daemon start --foreground >>"$2" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 600); do
        "$BIN" --config "$1" status >/dev/null 2>&1 && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || { echo "kill9: daemon exited at start:" >&2; tail -20 "$2" >&2; return 1; }
        sleep 0.05
    done
    echo "kill9: daemon did not come up" >&2
    return 1
}

total_files=0 total_bytes=0 failures=0 replayed=0
t0=$(date +%s)
for it in $(seq 1 "$ITER"); do
    D="$WORK/it$it"
    mkdir -p "$D/dest" "$D/tier" "$D/run"
    seed=$((RANDOM * 32768 + RANDOM))
    interval=$(( (RANDOM % 4) * 100 + 20 ))
    cat > "$D/strata.yaml" <<EOF
daemon:
  socket: $D/run/d.sock
  shm_prefix: strata-k9-$$-$it
  log: warn
devices:
  - name: ram
    kind: ram
    capacity: 64MiB
  - name: disk
    kind: dir
    path: $D/tier
    capacity: 2GiB
flush:
  interval: ${interval}ms
EOF
    start_daemon "$D/strata.yaml" "$D/daemon.log"
    STRATA_CONFIG="$D/strata.yaml" STRATA_SOCKET="$D/run/d.sock" STRATA_INCLUDE="$D/dest" STRATA_MODE=default \
        LD_PRELOAD="$LIB" python3 "$WORK/writer.py" "$D/dest" "$seed" >"$D/acks" 2>"$D/writer.err" &
    APP_PID=$!
    delay_ms=$((RANDOM % 1500))
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -9 "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    kill -9 "$APP_PID" 2>/dev/null || true
    wait "$APP_PID" 2>/dev/null || true
    APP_PID=
    # Restart on the same tiers: the journal is replayed, dirty data flushed.
    start_daemon "$D/strata.yaml" "$D/daemon.log"
    if ! "$BIN" --config "$D/strata.yaml" drain wait --timeout 300 >"$D/drain.out" 2>&1; then
        echo "iteration $it: drain wait failed:" >&2
        tail -5 "$D/drain.out" >&2
        failures=$((failures + 1))
    fi
    rb=$("$BIN" --config "$D/strata.yaml" status --json 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin).get("journal") or {}; print((j.get("replay") or {}).get("blobs", 0))' 2>/dev/null || echo 0)
    if [[ ${rb:-0} -gt 0 ]]; then
        replayed=$((replayed + 1))
    fi
    "$BIN" --config "$D/strata.yaml" daemon stop >/dev/null 2>&1 || kill -9 "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=
    read -r files bytes lost < <(python3 "$WORK/verify.py" "$D/acks" "$D/dest" 2>"$D/verify.err")
    total_files=$((total_files + files))
    total_bytes=$((total_bytes + bytes))
    if [[ $lost != 0 ]]; then
        failures=$((failures + 1))
        echo "iteration $it (seed $seed, kill after ${delay_ms} ms): $lost acknowledged files damaged" >&2
        cat "$D/verify.err" >&2
        KEEP=1
        echo "kept $D" >&2
    else
        rm -rf "$D"
    fi
    printf 'iteration %d/%d: killed after %4d ms, %3d fsync-acknowledged files (%s bytes) intact, %s blobs restored from the journal\n' "$it" "$ITER" "$delay_ms" "$files" "$bytes" "${rb:-0}"
done
echo "kill9: $ITER iterations in $(( $(date +%s) - t0 )) s: $total_files acknowledged files, $total_bytes bytes verified, $replayed restarts restored journaled blobs, $failures failures"
[[ $failures == 0 ]]
