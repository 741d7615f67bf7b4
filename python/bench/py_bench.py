"""The Python side of `strata bench python` (issue 17's benchmark); also
runnable by hand. Prints one JSON object per measurement on stdout.

  python py_bench.py --socket S --redis-port P --dir /dev/shm/D \
      --sizes 1024,1048576 --procs 1,4 --seconds 1 --file-mib 256

Per size and process count, each for --seconds: strata put / get (bytes) /
get_into (a preallocated buffer), redis-py SET / GET on a real
redis-server, and the built-in file I/O on tmpfs (write a file per key;
read it into a buffer). Then strata.open sequential 1 MiB writes and reads
of --file-mib MiB (SCRATCH and DEFAULT) against the built-in open on tmpfs,
each after one untimed pass (unless --cold).
"""

import argparse
import json
import multiprocessing as mp
import os
import time

KEYS_BYTES = 256 << 20  # keys held per system and process: bounded memory


def keys_for(size: int) -> int:
    return max(1, min(64, KEYS_BYTES // max(size, 1)))


class Strata:
    name = "strata"

    def __init__(self, a, tag):
        import strata

        self.c = strata.connect(a.socket)
        self.b = self.c.bucket(f"pybench-{tag}")

    def put(self, k, data):
        self.b.put(k, data)

    def get(self, k, size):
        return self.b.get(k)

    def get_into(self, k, buf):
        return self.b.get_into(k, buf)

    def close(self):
        for n in self.b.list():
            self.b.delete(n)
        self.c.close()


class Redis:
    name = "redis-py"

    def __init__(self, a, tag):
        import redis

        self.r = redis.Redis(host="127.0.0.1", port=a.redis_port)
        self.tag = tag

    def put(self, k, data):
        self.r.set(f"{self.tag}:{k}", data)

    def get(self, k, size):
        return self.r.get(f"{self.tag}:{k}")

    get_into = None

    def close(self):
        self.r.flushall()
        self.r.close()


class Files:
    name = "file on tmpfs"

    def __init__(self, a, tag):
        self.dir = os.path.join(a.dir, f"files-{tag}")
        os.makedirs(self.dir, exist_ok=True)

    def put(self, k, data):
        with open(os.path.join(self.dir, k), "wb", buffering=0) as f:
            f.write(data)

    def get(self, k, size):
        with open(os.path.join(self.dir, k), "rb", buffering=0) as f:
            return f.read()

    def get_into(self, k, buf):
        with open(os.path.join(self.dir, k), "rb", buffering=0) as f:
            return f.readinto(buf)

    def close(self):
        for n in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, n))
        os.rmdir(self.dir)


SYSTEMS = {"strata": Strata, "redis": Redis, "files": Files}


def worker(a, system, size, op, rank, start_at, out):
    s = SYSTEMS[system](a, f"{os.getpid()}-{rank}")
    try:
        n_keys = keys_for(size)
        data = os.urandom(size)
        names = [f"k{i}" for i in range(n_keys)]
        if op != "put":
            for k in names:
                s.put(k, data)
        buf = bytearray(size)
        f = {"put": lambda k: s.put(k, data), "get": lambda k: s.get(k, size),
             "get_into": lambda k: s.get_into(k, buf)}[op]
        while time.time() < start_at:
            time.sleep(0.001)
        ops = 0
        t0 = time.perf_counter()
        deadline = t0 + a.seconds
        while True:
            for k in names:
                f(k)
            ops += len(names)
            if time.perf_counter() >= deadline:
                break
        out.put((ops, time.perf_counter() - t0))
    finally:
        s.close()


def measure(a, system, size, op, procs):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 0.3 + 0.1 * procs
    ps = [ctx.Process(target=worker, args=(a, system, size, op, r, start_at, q)) for r in range(procs)]
    for p in ps:
        p.start()
    res = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    ops = sum(r[0] for r in res)
    secs = max(r[1] for r in res)
    return ops / secs


def files_seq(a, opener, label, path):
    """Sequential 1 MiB writes then reads of a --file-mib file."""
    chunk = os.urandom(1 << 20)
    n = a.file_mib
    t0 = time.perf_counter()
    with opener(path, "wb") as f:
        for _ in range(n):
            f.write(chunk)
    w = n / (time.perf_counter() - t0)
    buf = bytearray(1 << 20)
    t0 = time.perf_counter()
    got = 0
    with opener(path, "rb") as f:
        while True:
            k = f.readinto(buf)
            if not k:
                break
            got += k
    r = n / (time.perf_counter() - t0)
    assert got == n << 20, (label, got)
    return w, r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--redis-port", type=int, default=0)
    p.add_argument("--dir", required=True, help="a tmpfs directory for the file peers")
    p.add_argument("--sizes", default="1024,4096,65536,1048576,16777216")
    p.add_argument("--procs", default="1,4")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--file-mib", type=int, default=256)
    p.add_argument("--dest", help="a directory for strata.open's files (default --dir)")
    p.add_argument("--cold", action="store_true",
                   help="no untimed warm-up pass before the sequential runs (a fresh daemon's "
                        "arena pages are then faulted in by the timed writes)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    procs = [int(s) for s in a.procs.split(",")]
    systems = ["strata", "files"] + (["redis"] if a.redis_port else [])
    for n in procs:
        for size in sizes:
            for op in ["put", "get", "get_into"]:
                for system in systems:
                    if op == "get_into" and system == "redis":
                        continue
                    ops = measure(a, system, size, op, n)
                    print(json.dumps({"kind": "kv", "system": system, "op": op, "size": size,
                                      "procs": n, "ops_s": ops, "mib_s": ops * size / (1 << 20)}),
                          flush=True)
    if a.file_mib:
        import strata

        c = strata.connect(a.socket)
        dest = a.dest or a.dir
        plain = os.path.join(a.dir, "seq-plain.bin")
        for label, opener, path in [
            ("builtin open on tmpfs", lambda p_, m: open(p_, m), plain),
            ("strata.open SCRATCH", lambda p_, m: strata.open(p_, m, persist="scratch", client=c),
             os.path.join(dest, "seq-scratch.bin")),
            ("strata.open DEFAULT", lambda p_, m: strata.open(p_, m, persist="default", client=c),
             os.path.join(dest, "seq-default.bin")),
        ]:
            if not a.cold:
                files_seq(a, opener, label, path)  # untimed: a long-running daemon's arena is warm
            w, r = files_seq(a, opener, label, path)
            print(json.dumps({"kind": "seq", "system": label, "write_mib_s": w, "read_mib_s": r}), flush=True)
            if path == plain:
                os.unlink(plain)
        c.close()


if __name__ == "__main__":
    main()
