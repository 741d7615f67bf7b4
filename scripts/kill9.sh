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
# chunks (one in four overwrites an earlier file with O_TRUNC), fsync after
# each file, plus a log file appended with an fdatasync
# after every record (pages rewritten after their fsync); the writer prints
# "SYNC n" before each sync and, after it returns, an ACK line (path, length,
# sha256 of the acknowledged bytes, whether the descriptor was a strata
# placeholder) or a LOG line (acknowledged length and sha256 of the log).
# Every line is flushed at once. The kill moment is drawn per iteration:
#   time   the script kills the daemon after a random 0–1.5 s (before the
#          first file, during writes, fsyncs, stash copies, background
#          flushes), then the writer;
#   fsync  the writer itself, at its K-th sync (K random 1–60), starts a
#          thread that SIGKILLs the daemon after a random 0–4 ms while the
#          main thread is inside fsync; the writer lives on for 0.3 s (a sync
#          that returns success after the daemon died is acknowledged and
#          checked like any other), then is killed;
# and in one iteration out of four the restarted daemon is killed again
# after a random 0–400 ms (during journal replay or the first flushes) and
# restarted once more (a crash during recovery).
# The daemon is restarted on the same configuration, `strata drain wait`
# must succeed, and then — with the daemon still running, so nothing but the
# drain wait put the bytes there — every ACKed file must be at the
# destination with exactly its acknowledged bytes (the log: its acknowledged
# prefix). The restarted daemon's journal replay report must show no corrupt
# range, no dropped blob record and no checksum mismatch (after a kill -9 the
# kernel keeps every write, so any of these is a bug; a torn last record is
# expected and ignored).
#
# Exit status: 0 when nothing acknowledged was lost, no anomaly was reported,
# and at least one acknowledged file went through strata; 1 otherwise.
# Binaries: $KILL9_BIN (default target/release/strata, else target/debug)
# and libstrata_posix.so next to it ($KILL9_LIB overrides). KEEP=1 keeps the
# work directory; a failing iteration's directory is always kept.
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
KEEP=${KEEP:-0}
cleanup() {
    [[ -n $APP_PID ]] && kill -9 "$APP_PID" 2>/dev/null || true
    [[ -n $DAEMON_PID ]] && kill -9 "$DAEMON_PID" 2>/dev/null || true
    if [[ $KEEP != 1 ]]; then rm -rf "$WORK"; else echo "kill9: kept $WORK" >&2; fi
}
trap cleanup EXIT

cat > "$WORK/writer.py" <<'EOF'
import hashlib, os, random, signal, sys, threading, time
dest, seed, daemon_pid, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
kill_after_us = int(sys.argv[5])
rnd = random.Random(seed)
out = sys.stdout
syncs = 0

def say(line):
    out.write(line + "\n")
    out.flush()

def tracked(fd):
    # A descriptor the adapter buffers is a memfd placeholder named strata:…
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:strata:")
    except OSError:
        return False

def killer():
    time.sleep(kill_after_us / 1e6)
    os.kill(daemon_pid, signal.SIGKILL)

def sync(fd, data_only):
    global syncs
    syncs += 1
    say(f"SYNC {syncs}")
    if syncs == kill_at:
        threading.Thread(target=killer, daemon=True).start()
    (os.fdatasync if data_only else os.fsync)(fd)

def write_all(fd, b):
    mv = memoryview(b)
    while len(mv):
        mv = mv[os.write(fd, mv):]

log_fd = os.open(os.path.join(dest, "log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
log_tracked = tracked(log_fd)
log_h, log_len = hashlib.sha256(), 0
for i in range(10_000):
    # One file in four overwrites (O_TRUNC) an earlier, acknowledged one.
    # "OPEN" first: until its next ACK the file may hold old or new bytes.
    j = rnd.randrange(i) if i and rnd.random() < 0.25 else i
    path = os.path.join(dest, f"ck{j:05d}")
    if j != i:
        say(f"OPEN {path}")
    size = rnd.choice([0, 1, 4095, 4096, 70_000, 1 << 20, 3 << 20, rnd.randrange(1, 9 << 20)])
    data = rnd.randbytes(size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    t = tracked(fd)
    at = 0
    while at < size:
        n = min(size - at, rnd.choice([512, 4096, 65536, 1 << 20, 4 << 20]))
        write_all(fd, data[at:at + n])
        at += n
    sync(fd, False)
    say(f"ACK {path} {size} {hashlib.sha256(data).hexdigest()} {int(t)}")
    os.close(fd)
    rec = rnd.randbytes(rnd.randrange(1, 3000))
    write_all(log_fd, rec)
    sync(log_fd, True)
    log_h.update(rec)
    log_len += len(rec)
    say(f"LOG {log_len} {log_h.hexdigest()} {int(log_tracked)}")
EOF

cat > "$WORK/verify.py" <<'EOF'
# Prints: files bytes lost_files tracked_files tracked_bytes in_sync syncs
import hashlib, os, sys
acks, dest = sys.argv[1], sys.argv[2]
files, log, last, syncs = {}, (0, hashlib.sha256().hexdigest(), 0), "", 0
for line in open(acks, errors="replace"):
    p = line.split()
    if not p:
        continue
    last = p[0]
    if len(p) == 5 and p[0] == "ACK":
        files[p[1]] = (int(p[2]), p[3], p[4] == "1")
    elif len(p) == 4 and p[0] == "LOG":
        log = (int(p[1]), p[2], p[3] == "1")
    elif len(p) == 2 and p[0] == "SYNC":
        syncs = int(p[1])
    elif len(p) == 2 and p[0] == "OPEN":
        files.pop(p[1], None)  # being overwritten: no promise until its ACK
bad, nbytes, tfiles, tbytes = [], 0, 0, 0
for path, (size, digest, t) in files.items():
    try:
        b = open(path, "rb").read()
    except OSError as e:
        bad.append(f"{path}: {e}")
        continue
    if len(b) != size or hashlib.sha256(b).hexdigest() != digest:
        bad.append(f"{path}: {len(b)} bytes, want {size} with sha256 {digest[:12]}")
    nbytes += size
    if t:
        tfiles += 1
        tbytes += size
n, digest, t = log
try:
    b = open(os.path.join(dest, "log"), "rb").read()
    if len(b) < n or hashlib.sha256(b[:n]).hexdigest() != digest:
        bad.append(f"log: {len(b)} bytes, acknowledged prefix of {n} bytes differs")
except OSError as e:
    if n > 0:
        bad.append(f"log: {e}")
nbytes += n
if t:
    tbytes += n
# The writer died inside a sync when its last line is a SYNC without its ACK/LOG.
print(len(files), nbytes, len(bad), tfiles, tbytes, int(last == "SYNC"), syncs)
for x in bad[:20]:
    print("LOST", x, file=sys.stderr)
EOF

# Replay report of the running daemon: "blobs anomalies message…"
cat > "$WORK/replay.py" <<'EOF'
import json, sys
try:
    j = json.load(sys.stdin).get("journal") or {}
except Exception as e:
    print(0, 1, f"status --json unreadable: {e}")
    sys.exit()
r = j.get("replay") or {}
bad = {k: r.get(k, 0) for k in ("corrupt_ranges", "dropped_blobs", "crc_mismatches") if r.get(k, 0)}
msg = " ".join(f"{k}={v}" for k, v in bad.items())
if bad and r.get("messages"):
    msg += " | " + " | ".join(r["messages"][:5])
if j.get("failed"):
    bad["failed"] = 1
    msg += f" journal failed: {j.get('error')}"
print(r.get("blobs", 0), len(bad), msg)
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

# sleep for a number of milliseconds
msleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

total_files=0 total_bytes=0 tracked_files=0 tracked_bytes=0 lost_files=0 anomalies=0
failures=0 replayed=0 n_time=0 n_fsync=0 in_sync=0 double=0
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
    if (( RANDOM % 2 )); then
        mode=fsync; kill_at=$((RANDOM % 60 + 1)); kill_us=$((RANDOM % 4000)); n_fsync=$((n_fsync + 1))
        what="at sync #$kill_at +${kill_us} us"
    else
        mode=time; kill_at=0; kill_us=0; delay_ms=$((RANDOM % 1500)); n_time=$((n_time + 1))
        what="after ${delay_ms} ms"
    fi
    STRATA_CONFIG="$D/strata.yaml" STRATA_SOCKET="$D/run/d.sock" STRATA_INCLUDE="$D/dest" STRATA_MODE=default \
        LD_PRELOAD="$LIB" python3 "$WORK/writer.py" "$D/dest" "$seed" "$DAEMON_PID" "$kill_at" "$kill_us" \
        >"$D/acks" 2>"$D/writer.err" &
    APP_PID=$!
    if [[ $mode == time ]]; then
        msleep "$delay_ms"
        kill -9 "$DAEMON_PID" 2>/dev/null || true
    else
        # The writer kills the daemon; if it never reaches that sync in 20 s
        # (it died, or is slow), fall back to a kill now.
        # (stderr off: bash reports the daemon's SIGKILL death as "Killed")
        for _ in $(seq 400); do
            kill -0 "$DAEMON_PID" 2>/dev/null && kill -0 "$APP_PID" 2>/dev/null || break
            sleep 0.05
        done 2>/dev/null
        if kill -0 "$DAEMON_PID" 2>/dev/null; then
            kill -9 "$DAEMON_PID" 2>/dev/null || true
            what="$what (not reached: writer gone or 20 s passed; killed by the script)"
        fi
    fi
    { wait "$DAEMON_PID" || true; } 2>/dev/null
    [[ $mode == fsync ]] && sleep 0.3
    kill -9 "$APP_PID" 2>/dev/null || true
    wait "$APP_PID" 2>/dev/null || true
    APP_PID=
    # Restart on the same tiers: the journal is replayed, dirty data flushed.
    start_daemon "$D/strata.yaml" "$D/daemon.log"
    if (( RANDOM % 4 == 0 )); then
        d2=$((RANDOM % 400))
        msleep "$d2"
        kill -9 "$DAEMON_PID" 2>/dev/null || true
        { wait "$DAEMON_PID" || true; } 2>/dev/null
        start_daemon "$D/strata.yaml" "$D/daemon.log"
        what="$what, restarted daemon killed after ${d2} ms"
        double=$((double + 1))
    fi
    failed=0
    if ! "$BIN" --config "$D/strata.yaml" drain wait --timeout 300 >"$D/drain.out" 2>&1; then
        echo "iteration $it: drain wait failed:" >&2
        tail -5 "$D/drain.out" >&2
        failed=1
    fi
    # Verify while the daemon runs: only the drain wait put the bytes there.
    files=0 bytes=0 lost=1 tfiles=0 tbytes=0 died_in_sync=0 syncs=0 rb=0 anom=1 amsg="no status"
    read -r files bytes lost tfiles tbytes died_in_sync syncs < <(python3 "$WORK/verify.py" "$D/acks" "$D/dest" 2>"$D/verify.err") || true
    read -r rb anom amsg < <("$BIN" --config "$D/strata.yaml" status --json 2>/dev/null | python3 "$WORK/replay.py") || true
    "$BIN" --config "$D/strata.yaml" daemon stop >/dev/null 2>&1 || kill -9 "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=
    [[ ${rb:-0} -gt 0 ]] && replayed=$((replayed + 1))
    total_files=$((total_files + files)); total_bytes=$((total_bytes + bytes))
    tracked_files=$((tracked_files + tfiles)); tracked_bytes=$((tracked_bytes + tbytes))
    lost_files=$((lost_files + lost)); in_sync=$((in_sync + died_in_sync))
    if [[ $lost != 0 ]]; then
        echo "iteration $it (seed $seed, $mode kill $what): $lost acknowledged files damaged" >&2
        cat "$D/verify.err" >&2
        failed=1
    fi
    if [[ ${anom:-1} != 0 ]]; then
        echo "iteration $it (seed $seed, $mode kill $what): journal replay anomaly: $amsg" >&2
        anomalies=$((anomalies + 1))
        failed=1
    fi
    if [[ $failed == 1 ]]; then
        failures=$((failures + 1))
        KEEP=1
        echo "kept $D" >&2
    elif [[ $KEEP != 1 ]]; then
        rm -rf "$D"
    fi
    sync_note=""
    [[ $died_in_sync == 1 ]] && sync_note=" (writer died inside sync #$syncs)"
    printf 'iteration %d/%d: %s kill %s%s: %d fsync-acknowledged files (%d via strata), %s bytes intact, %s blobs restored from the journal\n' \
        "$it" "$ITER" "$mode" "$what" "$sync_note" "$files" "$tfiles" "$bytes" "${rb:-0}"
done
echo "kill9: $ITER iterations in $(( $(date +%s) - t0 )) s ($n_time timed kills, $n_fsync kills triggered inside fsync, $in_sync with the writer inside a sync at death, $double crashes during recovery): $total_files acknowledged files ($tracked_files via strata), $total_bytes bytes verified ($tracked_bytes via strata), $lost_files files lost, $anomalies journal anomalies, $replayed restarts restored journaled blobs, $failures failed iterations"
if [[ $tracked_files == 0 ]]; then
    echo "kill9: no acknowledged file went through strata (adapter not active?): nothing was tested" >&2
    exit 1
fi
[[ $failures == 0 ]]
