#!/usr/bin/env python3
"""Every benchmark of BENCHMARKS.md's target table (issue 18) in one run.

Usage (normally through scripts/bench-all.sh, which mounts slow-pfs and builds):
    scripts/bench_all.py [--repeat N] [--quick] [--only t1,t3] [--slow-pfs MNT]
                         [--tier-fs DIR] [--out bench/results] [--bin target/release]
    scripts/bench_all.py --render bench/results/<date>-<commit>.json

Each target is a ratio against a peer measured in the same run (tmpfs, slow-pfs,
the dir tier's file system, redis-server, memcpy), peer and strata alternating
per repeat. Writes bench/results/<date>-<commit>.json (every command, its raw
JSON output, per-repeat ratios, CPU seconds of clients and daemons), then
renders <same>.md (target, measured median [min-max], verdict, CPU per op next
to the peer's) and <same>-targets.png (ratio to target per target, with spread).

CPU: user+sys of the bench processes and everything they waited for
(RUSAGE_CHILDREN: workers, private daemons and redis-servers the benches
start), plus /proc/<pid>/stat of a daemon this script started itself.
Every private daemon has its own socket, shm prefix and tiers under a
temporary directory: the user's default daemon is never touched.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")
MiB = 1 << 20

# id, name, target text, goal: ("min", x) = every ratio >= x; ("max", x) = <= x
TARGETS = {
    "t1": ("Durable checkpoint", "IOR 4 procs, 1 MiB writes, fsync each, DEFAULT RAM+dir tier -> slow-pfs, vs the dir tier's file system written directly with fsync", ("min", 0.8)),
    "t2s": ("Metadata SCRATCH", "mdtest-like 4 x 1000 x 4 KiB through the adapter vs tmpfs, every phase", ("min", 0.5)),
    "t2d": ("Metadata DEFAULT", "mdtest-like 4 x 1000 x 4 KiB, DEFAULT on slow-pfs vs slow-pfs direct, every phase", ("min", 10.0)),
    "t3": ("YCSB", "A,B,C,D,F with 4 threads vs redis-server, every workload", ("min", 5.0)),
    "t3p": ("YCSB read p99", "read p99 strata / redis, every workload", ("max", 0.2)),
    "t4": ("Small get p99 under load", "1 KiB get, 1 client thread, two busy loops on the machine: p99 in us", ("max", 10.0)),
    "t4i": ("Small get vs IOWarp", "1 KiB gets/s, 1 client thread, vs IOWarp CTE 2.3.2's clio_cte_bench Get (its better configuration), idle and under two busy loops", ("min", 1.0)),
    "t5": ("Large puts", "native put vs memcpy of the same size into warm memory, 1 MiB and 16 MiB", ("min", 0.8)),
    "t6w": ("Cold start write", "fresh daemon's first SCRATCH IOR write (4 procs, 1 MiB) vs tmpfs", ("min", 0.8)),
    "t6r": ("Cold start read", "fresh daemon's first SCRATCH IOR read vs tmpfs", ("min", 1.0)),
    "t7": ("Drain", "strata bench drain vs the destination's raw bandwidth, 8 and 32 files", ("min", 0.9)),
    "t8": ("Tiering vs prediction", "bench tiers (VPIC-like write, BD-CATS-like read): every tiered setup vs the bench's own prediction", ("min", 0.9)),
    "t8s": ("Tiering vs slowest tier", "bench tiers: every tiered setup vs its slowest tier alone", ("min", 1.0)),
}



def machine_free(text):
    """`text` without this machine's home and checkout paths (results are committed)."""
    text = str(text)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = text.replace(root + "/", "").replace(root, ".")
    home = os.path.expanduser("~")
    return text.replace(home, "~") if home not in ("", "/") else text

def log(msg):
    print(f"[bench-all {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def proc_cpu_s(pid):
    """user+sys seconds of a live process (and its waited-for children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # after the comm: state is [0]; utime [11], stime [12], cutime [13], cstime [14]
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK
    except OSError:
        return 0.0


class Runner:
    def __init__(self, args):
        self.args = args
        self.strata = os.path.join(args.bin, "strata")
        self.commands = []

    def run(self, cmd, daemon=None, env=None, timeout=3600):
        """Runs cmd; returns (stdout, cpu seconds of the bench side, of the daemon)."""
        cmd = [str(c) for c in cmd]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        d0 = proc_cpu_s(daemon.pid) if daemon and daemon.pid else 0.0
        t0 = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, timeout=timeout)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        d1 = proc_cpu_s(daemon.pid) if daemon and daemon.pid else 0.0
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        shown = " ".join(c.replace(self.args.tmp, "$TMP") for c in cmd)
        self.commands.append(shown)
        if p.returncode != 0:
            raise RuntimeError(f"`{shown}` failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
        return p.stdout, cpu, d1 - d0, wall

    def json_lines(self, out):
        return [json.loads(l) for l in out.splitlines() if l.strip().startswith("{")]

    def json_doc(self, out):
        return json.loads(out[out.index("{"):])


class Daemon:
    """A private daemon: own socket, shm prefix and tiers under the run's temp dir."""
    seq = 0

    def __init__(self, r, ram_mib, disk_dir=None, disk_mib=0, extra=""):
        Daemon.seq += 1
        self.r = r
        self.dir = os.path.join(r.args.tmp, f"d{Daemon.seq}")
        os.makedirs(self.dir, exist_ok=True)
        self.config = os.path.join(self.dir, "strata.yaml")
        y = (f"daemon:\n  socket: {self.dir}/daemon.sock\n  shm_prefix: strata-benchall-{os.getpid()}-{Daemon.seq}\n"
             f"  log: warn\ndevices:\n  - name: ram\n    kind: ram\n    capacity: {ram_mib}MiB\n")
        if disk_dir:
            os.makedirs(disk_dir, exist_ok=True)
            y += f"  - name: disk\n    kind: dir\n    path: {disk_dir}\n    capacity: {disk_mib}MiB\n"
        y += extra
        with open(self.config, "w") as f:
            f.write(y)
        self.pid = None

    def start(self):
        subprocess.run([self.r.strata, "--config", self.config, "daemon", "start"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.find_pid()
        return self

    def find_pid(self):
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if self.config.encode() in argv and b"daemon" in argv:
                return int(p)
        return None

    def flush(self):
        subprocess.run([self.r.strata, "--config", self.config, "flush"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)

    def stop(self):
        subprocess.run([self.r.strata, "--config", self.config, "daemon", "stop"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
        self.pid = None


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def spread(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)} if v else None


# ------------------------------------------------------------------ targets

def t1_checkpoint(r, reps):
    a = r.args
    block = "64MiB" if a.quick else "256MiB"
    ior = ["bench", "ior", "-n", 4, "-t", "1MiB", "-b", block, "--fsync", "--json"]
    rows = []
    d = Daemon(r, 2048, os.path.join(a.tier_fs, "t1-tier"), 8192).start()
    try:
        dest = os.path.join(a.slow_pfs, "bench-all-t1") if a.slow_pfs else fresh_dir(os.path.join(a.tmp, "dest1"))
        for rep in range(reps + 1):  # repeat 0: warm-up, not counted
            peer_dir = fresh_dir(os.path.join(a.tier_fs, "t1-peer"))
            out, pc, _, _ = r.run([r.strata] + ior[:2] + ["--dir", peer_dir] + ior[2:])
            peer = r.json_doc(out)["result"]["write"]
            fresh_dir(dest)
            out, sc, dc, _ = r.run([r.strata] + ior[:2] + ["--config", d.config, "--dir", dest, "--via-strata", "default"] + ior[2:], daemon=d)
            mine = r.json_doc(out)["result"]["write"]
            d.flush()
            slow = None
            if a.slow_pfs and rep > 0 and not a.quick:
                sd = fresh_dir(os.path.join(a.slow_pfs, "bench-all-t1-direct"))
                out, _, _, _ = r.run([r.strata] + ior[:2] + ["--dir", sd] + ior[2:])
                slow = r.json_doc(out)["result"]["write"]["mib_per_s"]
                shutil.rmtree(sd, ignore_errors=True)
            if rep == 0:
                continue
            rows.append({"rep": rep, "peer_mib_s": peer["mib_per_s"], "strata_mib_s": mine["mib_per_s"],
                         "slow_pfs_mib_s": slow, "ratio": mine["mib_per_s"] / peer["mib_per_s"],
                         "cpu_s_per_gib_peer": pc / (peer["bytes"] / (1 << 30)),
                         "cpu_s_per_gib_strata": (sc + dc) / (mine["bytes"] / (1 << 30))})
        shutil.rmtree(dest, ignore_errors=True)
    finally:
        d.stop()
    return {"t1": ([x["ratio"] for x in rows], rows)}


def md_phases(doc):
    return {name: ph["ops_per_s"] for name, ph in doc["result"]["phases"]}


def t2_metadata(r, reps):
    a = r.args
    files = 200 if a.quick else 1000
    md = ["bench", "md", "-n", 4, "-F", files, "-w", "4KiB", "--json"]
    layouts = [("per-process", [])] if a.quick else [("per-process", []), ("shared", ["--shared-dir"])]
    res = {}
    d = Daemon(r, 2048).start()
    dd = Daemon(r, 2048, os.path.join(a.tier_fs, "t2-tier"), 8192).start() if a.slow_pfs else None
    try:
        for mode, peer_base, daemon, key in [("scratch", "/dev/shm", d, "t2s"), ("default", a.slow_pfs, dd, "t2d")]:
            if daemon is None:
                continue
            rows = []
            for layout, extra in layouts:
                for rep in range(reps + 1):
                    pdir = fresh_dir(os.path.join(peer_base, "bench-all-md-peer"))
                    out, pc, _, _ = r.run([r.strata] + md[:2] + ["--dir", pdir] + md[2:] + extra)
                    peer = md_phases(r.json_doc(out))
                    shutil.rmtree(pdir, ignore_errors=True)
                    sdir = fresh_dir(os.path.join(a.slow_pfs if mode == "default" else a.tmp, "bench-all-md"))
                    out, sc, dc, _ = r.run([r.strata] + md[:2] + ["--config", daemon.config, "--dir", sdir, "--via-strata", mode] + md[2:] + extra, daemon=daemon)
                    mine = md_phases(r.json_doc(out))
                    daemon.flush()
                    shutil.rmtree(sdir, ignore_errors=True)
                    if rep == 0:
                        continue  # warm-up of the daemon
                    ops = 4 * files * 4
                    rows.append({"layout": layout, "rep": rep, "peer_ops_s": peer, "strata_ops_s": mine,
                                 "ratios": {k: mine[k] / peer[k] for k in mine},
                                 "cpu_us_per_op_peer": pc * 1e6 / ops, "cpu_us_per_op_strata": (sc + dc) * 1e6 / ops})
            res[key] = ([min(x["ratios"].values()) for x in rows], rows)
    finally:
        d.stop()
        if dd:
            dd.stop()
    return res


def t3_ycsb(r, reps):
    a = r.args
    if not shutil.which("redis-server") and not os.path.exists("/usr/bin/redis-server"):
        return {"t3": ([], [{"skipped": "redis-server not installed"}])}
    d = Daemon(r, 4096).start()
    threads = [4] if a.quick else [4, 1, 2]
    recs, ops = ("10000", "20000") if a.quick else ("100000", "200000")
    rows, p99 = [], []
    try:
        for th in threads:
            out, cpu, dc, _ = r.run([r.strata, "bench", "ycsb", "--config", d.config, "--vs-redis", "--json",
                                     "--repeat", reps, "--threads", th, "--records", recs, "--ops", ops], daemon=d)
            docs = r.json_lines(out)
            for doc in docs:
                if doc.get("kind") == "ratio":
                    rows.append({"threads": th, "workload": doc["workload"], "ratio": doc["ratio_strata_vs_redis_mean"],
                                 "ratio_min": doc["ratio_min"], "ratio_max": doc["ratio_max"]})
            summ = {(x["store"], x["workload"]): x for x in docs if x.get("kind") == "summary"}
            for (store, w), x in summ.items():
                if store == "strata" and ("redis", w) in summ and summ[("redis", w)]["read_ops"]:
                    p99.append({"threads": th, "workload": w, "ratio": x["read_p99_us"] / summ[("redis", w)]["read_p99_us"],
                                "strata_p99_us": x["read_p99_us"], "redis_p99_us": summ[("redis", w)]["read_p99_us"]})
            rows.append({"threads": th, "cpu_s_all": cpu, "cpu_s_daemon": dc})
    finally:
        d.stop()
    four = [x for x in rows if x.get("threads") == 4 and "workload" in x]
    return {"t3": ([x["ratio"] for x in four], rows),
            "t3p": ([x["ratio"] for x in p99 if x["threads"] == 4], p99)}


def busy_loops(n):
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


class IoWarp:
    """IOWarp CTE (the Hermes successor) as t4's peer: its runtime with a
    private storage root and port, measured by its own benchmark
    (clio_cte_bench --op Get, 1 KiB, 1 thread). `workers`: None = the
    package's shipped configuration (4 workers, 10 ms busy wait); else that
    many workers and a 50 us busy wait (a fit for 2 cores)."""

    def __init__(self, r, bindir, workers):
        self.r, self.bin, self.workers = r, bindir, workers
        self.root = tempfile.mkdtemp(prefix="iowarp-", dir=r.args.tmp)
        conf = self._default_conf()
        text = open(conf).read()
        if workers:
            text = text.replace("  num_threads: 4 ", f"  num_threads: {workers} ", 1)
            text = text.replace("  first_busy_wait: 10000 ", "  first_busy_wait: 50 ", 1)
        self.conf = os.path.join(self.root, "clio.yaml")
        open(self.conf, "w").write(text)
        self.env = dict(os.environ, CLIO_STORAGE_ROOT=self.root, CLIO_SERVER_CONF=self.conf,
                        CLIO_PORT=str(9600 + 10 * (workers or 0)), CTP_LOG_LEVEL="info")
        self.proc = None

    def _default_conf(self):
        import glob
        venv = os.path.dirname(os.path.abspath(self.bin))
        hits = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "iowarp_core", "data", "clio_default.yaml"))
        if not hits:
            raise RuntimeError(f"no iowarp_core/data/clio_default.yaml next to {self.bin}")
        return hits[0]

    def start(self):
        self.proc = subprocess.Popen([os.path.join(self.bin, "clio_run"), "start"], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(120):  # bounded: 60 s
            st = subprocess.run([os.path.join(self.bin, "clio_run"), "status"], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if "RUNNING" in st.stdout:
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("IOWarp runtime did not start within 60 s")

    def gets(self, count):
        """(gets per second, mean latency in us) of one clio_cte_bench Get run."""
        import re
        cmd = [os.path.join(self.bin, "clio_cte_bench"), "--op", "Get", "--threads", "1", "--depth", "1",
               "--io-size", "1k", "--io-count", str(count)]
        self.r.commands.append(" ".join(cmd) + f"   # IOWarp CTE, workers={self.workers or 'shipped default'}")
        p = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        text = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)
        iops = re.search(r"IOPS per thread \(avg\): ([0-9.e+]+)", text)
        lat = re.search(r"Avg latency per op: ([0-9.e+]+) us", text)
        if p.returncode != 0 or not iops or not lat:
            raise RuntimeError(f"clio_cte_bench failed ({p.returncode}): {text[-1500:]}")
        return float(iops.group(1)), float(lat.group(1))

    def stop(self):
        subprocess.run([os.path.join(self.bin, "clio_run"), "stop"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        subprocess.run(["sh", "-c", f"rm -f /dev/shm/*_{self.env['CLIO_PORT']}* 2>/dev/null"])


def loaded(fn, n=2):
    """fn() while n busy loops compete for the cores."""
    loops = busy_loops(n)
    try:
        return fn()
    finally:
        for p in loops:
            p.kill()
            p.wait()


def t4_small_gets(r, reps):
    d = Daemon(r, 2048).start()
    rows = []
    kv = [r.strata, "bench", "kv", "--config", d.config, "--sizes", "1KiB", "--threads", 1, "--procs", 1, "--seconds", 2, "--json"]
    no_index = dict(os.environ, STRATA_CLIENT_GET_INDEX="0")
    peers = []
    if r.args.iowarp_bin:
        peers = [IoWarp(r, r.args.iowarp_bin, None), IoWarp(r, r.args.iowarp_bin, 1)]
    count = 2000 if r.args.quick else 5000
    try:
        r.run(kv, daemon=d)  # warm-up
        for rep in range(1, reps + 1):
            idle = {x["op"]: x for x in r.json_lines(r.run(kv, daemon=d)[0])}
            out, cpu, dc, _ = loaded(lambda: r.run(kv, daemon=d))
            load = {x["op"]: x for x in r.json_lines(out)}
            # The choice measured: the same daemon, gets through the rings.
            ring = {x["op"]: x for x in r.json_lines(loaded(lambda: r.run(kv, daemon=d, env=no_index))[0])}
            row = {"rep": rep, "get_p99_us_loaded": load["get"]["p99_us"], "get_p50_us_loaded": load["get"]["p50_us"],
                   "get_ops_s_loaded": load["get"]["ops_per_s"], "get_p99_us_idle": idle["get"]["p99_us"],
                   "get_ops_s_idle": idle["get"]["ops_per_s"], "put_p99_us_loaded": load["put"]["p99_us"],
                   "ring_get_p99_us_loaded": ring["get"]["p99_us"], "ring_get_ops_s_loaded": ring["get"]["ops_per_s"],
                   "cpu_us_per_op_loaded": (cpu + dc) * 1e6 / max(1, load["get"]["ops"] + load["put"]["ops"])}
            for peer in peers:
                tag = f"iowarp_{peer.workers or 'default'}"
                peer.start()
                try:
                    ops_idle, lat_idle = peer.gets(count)
                    ops_load, lat_load = loaded(lambda: peer.gets(count))
                finally:
                    peer.stop()
                row.update({f"{tag}_get_ops_s_idle": ops_idle, f"{tag}_get_mean_us_idle": lat_idle,
                            f"{tag}_get_ops_s_loaded": ops_load, f"{tag}_get_mean_us_loaded": lat_load})
            if peers:
                best_idle = max(row[f"iowarp_{p.workers or 'default'}_get_ops_s_idle"] for p in peers)
                best_load = max(row[f"iowarp_{p.workers or 'default'}_get_ops_s_loaded"] for p in peers)
                row["ratio_vs_iowarp_idle"] = row["get_ops_s_idle"] / best_idle
                row["ratio_vs_iowarp_loaded"] = row["get_ops_s_loaded"] / best_load
            else:
                row["iowarp"] = "not found (scripts/bench-all.sh installs iowarp-core; or --iowarp-bin DIR)"
            rows.append(row)
    finally:
        d.stop()
    out = {"t4": ([x["get_p99_us_loaded"] for x in rows], rows)}
    if peers:
        out["t4i"] = ([v for x in rows for v in (x["ratio_vs_iowarp_idle"], x["ratio_vs_iowarp_loaded"])], rows)
    return out


def t5_large_puts(r, reps):
    d = Daemon(r, 6144).start()
    rows = []
    kv = [r.strata, "bench", "kv", "--config", d.config, "--sizes", "1MiB,16MiB", "--threads", 1, "--procs", 1, "--seconds", 2, "--json"]
    try:
        r.run(kv, daemon=d)  # warm-up
        for rep in range(1, reps + 1):
            out, cpu, dc, _ = r.run(kv, daemon=d)
            for x in r.json_lines(out):
                if x["op"] == "put":
                    rows.append({"rep": rep, "size_bytes": x["size_bytes"], "ratio": x["ratio_vs_memcpy"],
                                 "put_mib_s": x["mib_per_s"], "memcpy_mib_s": x["memcpy_mib_per_s"], "p99_us": x["p99_us"]})
    finally:
        d.stop()
    return {"t5": ([x["ratio"] for x in rows], rows)}


def t6_cold_start(r, reps):
    a = r.args
    block = "64MiB" if a.quick else "256MiB"
    ior = ["bench", "ior", "-n", 4, "-t", "1MiB", "-b", block, "--json"]
    rows = []
    for rep in range(1, reps + 1):
        pdir = fresh_dir("/dev/shm/bench-all-t6")
        peer = r.json_doc(r.run([r.strata] + ior[:2] + ["--dir", pdir] + ior[2:])[0])["result"]
        shutil.rmtree(pdir, ignore_errors=True)
        d = Daemon(r, 4096)  # not started: the bench's `strata run` starts it cold
        sdir = fresh_dir(os.path.join(a.tmp, "t6"))
        try:
            out, cpu, _, _ = r.run([r.strata] + ior[:2] + ["--config", d.config, "--dir", sdir, "--via-strata", "scratch"] + ior[2:])
        finally:
            d.stop()
        mine = r.json_doc(out)["result"]
        shutil.rmtree(sdir, ignore_errors=True)
        rows.append({"rep": rep, "write_ratio": mine["write"]["mib_per_s"] / peer["write"]["mib_per_s"],
                     "read_ratio": mine["read"]["mib_per_s"] / peer["read"]["mib_per_s"],
                     "tmpfs_write_mib_s": peer["write"]["mib_per_s"], "strata_write_mib_s": mine["write"]["mib_per_s"],
                     "tmpfs_read_mib_s": peer["read"]["mib_per_s"], "strata_read_mib_s": mine["read"]["mib_per_s"],
                     "cpu_s_strata_all": cpu})
    return {"t6w": ([x["write_ratio"] for x in rows], rows), "t6r": ([x["read_ratio"] for x in rows], rows)}


def t7_drain(r, reps):
    a = r.args
    if not a.slow_pfs:
        return {"t7": ([], [{"skipped": "slow-pfs not mounted"}])}
    rows = []
    ddir = fresh_dir(os.path.join(a.slow_pfs, "bench-all-drain"))
    for files in (8, 32):
        out, cpu, _, _ = r.run([r.strata, "bench", "drain", "--dir", ddir,
                                "--files", files, "--repeat", reps, "--size", "256MiB" if a.quick else "1GiB", "--json"])
        doc = r.json_doc(out)
        for rep in doc["repeats"]:
            rows.append(dict(rep, files=files))
        rows.append({"files": files, "cpu_s_all": cpu})
    shutil.rmtree(ddir, ignore_errors=True)
    # A repeat whose fresh daemon wrote most bytes through to the destination
    # (its arena not reserved yet) measured little of a drain: not counted.
    return {"t7": ([x["ratio"] for x in rows if x.get("buffered_fraction", 1.0) >= 0.9 and "ratio" in x], rows)}


def t8_tiering(r, reps):
    a = r.args
    if not a.slow_pfs:
        return {"t8": ([], [{"skipped": "slow-pfs not mounted"}])}
    cmd = [r.strata, "bench", "tiers", "--experiments", "tiering", "--repeat", reps, "--json", "--slow-pfs", a.slow_pfs,
           "--tier-dir", os.path.join(a.tier_fs, "t8")]
    if a.quick:
        cmd += ["--data", "512MiB"]
    out, cpu, _, _ = r.run(cmd)
    doc = r.json_doc(out)
    s = doc["settings"]
    f = min(1.0, s["ram"] / s["data"])
    by = {}
    for x in doc["samples"]:
        if x["exp"] == "tiering":
            by.setdefault((x["setup"], x["metric"], x["rep"]), x["value"])
    rows = []
    for (setup, metric, rep), v in sorted(by.items()):
        if setup not in ("2-tiers", "3-tiers"):
            continue
        tmpfs, dest = by.get(("tmpfs", metric, rep)), by.get(("1-tier", metric, rep))
        nxt = dest if setup == "2-tiers" else by.get(("disk", metric, rep))
        if not (tmpfs and dest and nxt):
            continue
        pred = 1.0 / (f / tmpfs + (1 - f) / nxt)
        rows.append({"setup": setup, "phase": metric, "rep": rep, "mib_s": v, "predicted_mib_s": pred,
                     "vs_prediction": v / pred, "vs_slowest_tier_alone": v / min(dest, nxt)})
    rows.append({"cpu_s_all": cpu})
    return {"t8": ([x["vs_prediction"] for x in rows if "vs_prediction" in x], rows),
            "t8s": ([x["vs_slowest_tier_alone"] for x in rows if "vs_slowest_tier_alone" in x], rows)}


STEPS = [("t1", t1_checkpoint), ("t2", t2_metadata), ("t3", t3_ycsb), ("t4", t4_small_gets),
         ("t5", t5_large_puts), ("t6", t6_cold_start), ("t7", t7_drain), ("t8", t8_tiering)]


# ------------------------------------------------------------------ render

def verdict(key, s):
    if not s:
        return "not measured"
    kind, x = TARGETS[key][2]
    # every repeat (and every phase, workload or setup) must meet it
    ok = s["min"] >= x if kind == "min" else s["max"] <= x
    return "met" if ok else "missed"


def render(doc, json_path):
    base = json_path[:-5] if json_path.endswith(".json") else json_path
    lines = [f"# strata targets, {doc['date']} at {doc['commit']}", "",
             f"Machine: {doc['machine']}. Repeats: {doc['repeat']}{' (quick)' if doc.get('quick') else ''}. "
             f"slow-pfs: {doc.get('slow_pfs') or 'not mounted'}. Command: `{doc['argv']}`", "",
             "| target | what | goal | measured median [min–max] (n) | verdict (every value) |", "|---|---|---|---|---|"]
    for key, (name, what, (kind, x)) in TARGETS.items():
        t = doc["targets"].get(key)
        s = t and t["spread"]
        meas = f"{s['median']:.3g} [{s['min']:.3g}–{s['max']:.3g}] ({s['n']})" if s else (t and t.get("note")) or "-"
        goal = ("≥ " if kind == "min" else "≤ ") + f"{x:g}"
        lines.append(f"| {key} {name} | {what} | {goal} | {meas} | {verdict(key, s)} |")
    lines += ["", "Per-target details (per repeat, CPU next to the peer's) are in the JSON: `targets.<id>.rows`."]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed (pip install matplotlib): no PNG")
        return
    keys = [k for k in TARGETS if doc["targets"].get(k) and doc["targets"][k]["spread"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(keys) + 2), 4.5))
    meds, lo, hi, colors = [], [], [], []
    for k in keys:
        s = doc["targets"][k]["spread"]
        kind, x = TARGETS[k][2]
        # plotted as "fraction of the target": >= 1 is met either way
        f = (lambda v: v / x) if kind == "min" else (lambda v: x / v if v > 0 else 10.0)
        m, a, b = f(s["median"]), f(s["min"]), f(s["max"])
        a, b = min(a, b), max(a, b)
        meds.append(m)
        lo.append(m - a)
        hi.append(b - m)
        colors.append("#4c9a4c" if verdict(k, s) == "met" else "#c05050")
    ax.bar(range(len(keys)), meds, yerr=[lo, hi], capsize=4, color=colors, edgecolor="black", linewidth=0.6)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{k}\n{TARGETS[k][0]}" for k in keys], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("measured / target (log; green: every value met it)")
    ax.set_yscale("log")
    ax.set_title(f"strata targets {doc['date']} {doc['commit']} (median, min–max over repeats)", fontsize=9)
    fig.tight_layout()
    fig.savefig(base + "-targets.png", dpi=110)
    log(f"wrote {base}.md and {base}-targets.png")


def machine():
    cpus = os.cpu_count()
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) >> 20
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{cpus} CPUs ({model}), {mem} GiB RAM, Linux {os.uname().release}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes, a smoke test of the whole run")
    p.add_argument("--only", default="", help="comma-separated steps: t1..t8")
    p.add_argument("--slow-pfs", default=os.environ.get("SLOW_PFS_MNT", ""))
    p.add_argument("--tier-fs", default="", help="a non-tmpfs directory for dir tiers and the checkpoint peer (default /var/tmp)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release"))
    p.add_argument("--iowarp-bin", default=os.environ.get("IOWARP_BIN", ""),
                   help="directory with clio_run and clio_cte_bench (IOWarp CTE, t4's peer)")
    p.add_argument("--render", default="", help="only render the tables and plot of a saved JSON")
    a = p.parse_args()
    if a.render:
        with open(a.render) as f:
            render(json.load(f), a.render)
        return
    if a.slow_pfs and not os.path.ismount(a.slow_pfs):
        sys.exit(f"bench-all: {a.slow_pfs} is not a mount point (run ../shared/tools/slow-pfs up, or leave --slow-pfs out)")
    a.tmp = tempfile.mkdtemp(prefix="strata-bench-all-", dir="/var/tmp")
    a.tier_fs = a.tier_fs or a.tmp
    only = set(filter(None, a.only.split(",")))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE, text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    doc = {"date": date, "commit": commit + ("-dirty" if dirty else ""), "machine": machine(), "repeat": a.repeat,
           "quick": a.quick, "slow_pfs": a.slow_pfs or None, "argv": " ".join(["scripts/bench_all.py"] + [machine_free(x) for x in sys.argv[1:]]),
           "load_before": open("/proc/loadavg").read().split()[:3], "targets": {}, "commands": []}
    r = Runner(a)
    started = time.monotonic()
    try:
        for step, fn in STEPS:
            if only and step not in only:
                continue
            log(f"{step}: {fn.__name__}")
            t0 = time.monotonic()
            try:
                res = fn(r, a.repeat)
            except Exception as e:  # one failing bench does not lose the others
                log(f"{step} failed: {e}")
                res = {k: ([], [{"error": str(e)}]) for k in TARGETS if k.startswith(step)}
            for key, (vals, rows) in res.items():
                note = next((x.get("skipped") or x.get("error") for x in rows if "skipped" in x or "error" in x), None)
                doc["targets"][key] = {"spread": spread(vals), "values": vals, "rows": rows, "note": note,
                                       "verdict": verdict(key, spread(vals)), "seconds": time.monotonic() - t0}
                log(f"  {key}: {doc['targets'][key]['spread']} -> {doc['targets'][key]['verdict']}")
    finally:
        shutil.rmtree(a.tmp, ignore_errors=True)
    doc["commands"] = [json.loads(machine_free(json.dumps(c))) for c in r.commands]
    if doc.get("slow_pfs"):
        doc["slow_pfs"] = machine_free(doc["slow_pfs"])
    doc["seconds"] = time.monotonic() - started
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{date}-{doc['commit']}{'-quick' if a.quick else ''}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    log(f"wrote {path}")
    render(doc, path)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
