#!/usr/bin/env python3
"""Runs fsdiff.py in a plain directory and under `strata run`, compares the
outputs line by line and, on a difference, shrinks the operation sequence
(ddmin over operation indices) to a minimal one that still differs.

usage: run.py --strata BIN --config CFG --mode default|scratch --work DIR
              --seeds FIRST:LAST --ops N [--shrink-runs N] [--procs N]
Exit 0 when every seed agrees; 1 with the seed, the first differing line
and the shrunk sequence (a command line to replay it) otherwise.

DEFAULT mode also drains (`strata flush --wait`) and compares the buffered
directory at the destination with the plain one (the `tree` lines again,
read without the adapter).
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FSDIFF = os.path.join(HERE, "fsdiff.py")
HANG_S = 300


def run(cmd, cwd, env=None):
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=HANG_S, env=env)
    except subprocess.TimeoutExpired:
        return None, "TIMEOUT (hung)"
    return r.returncode, r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


class Runner:
    def __init__(self, a):
        self.a = a
        self.n = 0
        os.makedirs(a.work, exist_ok=True)

    def fresh(self, tag):
        self.n += 1
        d = os.path.join(self.a.work, f"{tag}-{os.getpid()}-{self.n}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def both(self, seed, keep=None):
        """(plain lines, strata lines, buffered dir) with paths normalised."""
        extra = ["--keep", ",".join(map(str, sorted(keep)))] if keep is not None else []
        extra += ["--procs", str(self.a.procs)]
        if self.a.links:
            extra += ["--links"]
        if self.a.maps:
            extra += ["--maps"]
        if self.a.no_renames:
            extra += ["--no-renames"]
        p = self.fresh("plain")
        b = self.fresh("buf")
        _, po = run([sys.executable, FSDIFF, p, str(seed), str(self.a.ops)] + extra, p)
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "STRATA_MODE", "STRATA_INCLUDE", "STRATA_EXCLUDE"):
            env.pop(k, None)
        _, bo = run([self.a.strata, "--config", self.a.config, "run", "--quiet", "--mode", self.a.mode, "--include", b, "--",
                     sys.executable, FSDIFF, b, str(seed), str(self.a.ops)] + extra, b, env)
        po = po.replace(p, "ROOT").splitlines()
        bo = bo.replace(b, "ROOT").splitlines()
        return po, bo, p, b

    def differs(self, seed, keep=None):
        po, bo, p, b = self.both(seed, keep)
        d = first_diff(po, bo)
        if d is None and self.a.mode == "default":
            # At the destination after a drain, read without the adapter.
            rc, out = run([self.a.strata, "--config", self.a.config, "flush", "--wait", b], b)
            if rc != 0:
                return f"flush --wait failed: {out.strip()[:500]}"
            _, dest = run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import fsdiff; print('\\n'.join(fsdiff.tree({b!r})))"], b)
            want = [l[len("tree "):] for l in po if l.startswith("tree ")]
            got = [l for l in dest.replace(b, "ROOT").splitlines() if l]
            dd = first_diff(want, got)
            if dd is not None:
                return f"at the destination after a drain: {dd}"
        for d_ in (p, b):
            shutil.rmtree(d_, ignore_errors=True)
        return d


def first_diff(a, b):
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "<end>"
        y = b[i] if i < len(b) else "<end>"
        if x != y:
            return f"line {i + 1}:\n  plain:  {x}\n  strata: {y}"
    return None


def op_index(diff):
    """The operation index of a differing line, if it is an operation's."""
    try:
        return int(diff.split("plain:", 1)[1].split()[0])
    except (IndexError, ValueError):
        return None


def ddmin(r, seed, items, budget):
    """Smallest subset of `items` (op indices) that still differs (ddmin)."""
    n = 2
    while len(items) >= 2 and budget > 0:
        chunk = max(1, len(items) // n)
        subsets = [items[i:i + chunk] for i in range(0, len(items), chunk)]
        reduced = False
        for s in subsets:
            comp = [x for x in items if x not in s]
            budget -= 1
            if comp and r.differs(seed, set(comp)):
                items, n, reduced = comp, max(n - 1, 2), True
                break
            if budget <= 0:
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), n * 2)
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--shrink-runs", type=int, default=200)
    ap.add_argument("--procs", type=int, default=2, help="worker processes per run")
    ap.add_argument("--links", action="store_true", help="hard and symbolic links too (fsdiff.py --links)")
    ap.add_argument("--maps", action="store_true", help="shared writable mappings too (fsdiff.py --maps)")
    ap.add_argument("--no-renames", action="store_true", help="renames become stats (fsdiff.py --no-renames)")
    a = ap.parse_args()
    first, last = (int(x) for x in a.seeds.split(":"))
    r = Runner(a)
    for seed in range(first, last + 1):
        d = r.differs(seed)
        print(f"seed {seed} ({a.mode}, {a.ops} ops): {'differs' if d else 'same'}", flush=True)
        if d:
            # Only operations up to the first difference matter.
            last = op_index(d)
            items = list(range(a.ops if last is None else last + 1))
            small = ddmin(r, seed, items, a.shrink_runs)
            if small != items and not r.differs(seed, set(small)):
                print("(the shrunk sequence did not reproduce: timing-dependent; showing the prefix)")
                small = items
            po, bo, _, _ = r.both(seed, set(small))
            print(f"FAIL seed {seed} mode {a.mode}: {d}")
            print(f"shrunk to {len(small)} operations: --keep {','.join(map(str, small))}")
            print(f"replay: python3 tests/fsdiff/fsdiff.py DIR {seed} {a.ops} --procs {a.procs} --keep {','.join(map(str, small))}")
            print("--- plain ---\n" + "\n".join(po) + "\n--- strata ---\n" + "\n".join(bo))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
