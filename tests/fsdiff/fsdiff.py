#!/usr/bin/env python3
"""Differential file-system exerciser (issue 12, "beyond the list").

Runs a random but seed-determined sequence of POSIX operations in ROOT and
prints one normalised line per operation (return value or errno name,
hashes of bytes read, the stat fields that must agree). The same command
run in a buffered directory under `strata run` and in a plain twin must
print the same lines; crates/strata-cli/tests/fsdiff.rs compares them,
shrinks a failing sequence and checks the destination after a drain.

Operations run in several worker processes (forked at start, so they live
under the same LD_PRELOAD): each holds its own open descriptors, and the
driver hands them operations one at a time (deterministic interleaving).

usage: fsdiff.py ROOT SEED OPS [--keep i,j,...] [--procs N] [--no-exec] [--links] [--maps] [--no-renames]
  --keep: run only these operation indices (shrinking); the sequence is
          generated in full from SEED first, so indices are stable.
  --links: about one operation in eight becomes a hard link, a symbolic
          link (to a file, a directory or nothing), an lstat/readlink, or an
          O_NOFOLLOW open (drawn from a second generator: the sequences
          without --links, and their recorded replays, stay the same).
  --maps: about one operation in eight works with a shared writable
          mapping a worker keeps between operations: map a descriptor's file
          (MAP_SHARED, read/write), store into it, read through it, unmap
          (from a third generator, likewise). Stores stay below the file's
          current size, so neither side takes SIGBUS.
  --no-renames: renames become stats (for modes that answer EXDEV by design
          across nodes: SCRATCH files between two owners' paths).
"""
import errno
import hashlib
import mmap
import os
import random
import stat
import subprocess
import sys

FILES = ["a", "b", "c", "d0/x", "d0/y", "d1/z", "d0/s/w"]
DIRS = ["d0", "d1", "d0/s", "e"]
SLOTS = 4
SIZES = [0, 1, 100, 4095, 4096, 4097, 65536, 300000, 1 << 20, (1 << 20) + 3]


LINK_OPS = ["link", "symlink", "symlink_dir", "lstat", "readlink", "open_nofollow", "stat_nlink"]
MAP_OPS = ["mmap_write", "mmap_poke", "mmap_poke", "mmap_peek", "munmap"]


def gen(seed, n, procs, allow_exec, links=False, maps=False, no_renames=False):
    r = random.Random(seed)
    r2 = random.Random(seed ^ 0x5EED11)
    r3 = random.Random(seed ^ 0x3A9)
    ops = []
    for _ in range(n):
        p = r.randrange(procs)
        k = r.choices(
            ["open", "close", "pwrite", "write", "pread", "read", "lseek", "ftruncate", "truncate", "fsync",
             "append", "stat", "fstat", "rename", "rename_dir", "unlink", "mkdir", "rmdir", "listdir", "chmod",
             "utime", "mmap_read", "exec", "excl", "readall", "dup"],
            weights=[10, 6, 12, 6, 10, 5, 3, 3, 3, 2, 4, 6, 3, 4, 2, 3, 3, 2, 3, 2, 2, 2, 1 if allow_exec else 0, 2, 4, 2])[0]
        op = {"p": p, "k": k, "f": r.choice(FILES), "g": r.choice(FILES), "d": r.choice(DIRS), "e": r.choice(DIRS),
              "s": r.randrange(SLOTS), "off": r.choice([0, 1, 4095, 4096, 65535, 1 << 20, r.randrange(1 << 21)]),
              "len": r.choice(SIZES), "seed": r.randrange(1 << 30),
              "flags": r.choice(["r", "w", "rw", "wt", "wc", "rwc", "a"]), "mode": r.choice([0o600, 0o644, 0o755, 0o640]),
              "t": r.randrange(1_000_000_000, 1_700_000_000), "whence": r.choice([0, 1, 2])}
        if links and r2.random() < 0.125:
            op["k"] = r2.choice(LINK_OPS)
        if maps and r3.random() < 0.125:
            op["k"] = r3.choice(MAP_OPS)
        if no_renames and op["k"] in ("rename", "rename_dir"):
            op["k"] = "stat"
        ops.append(op)
    return ops


def data(seed, n):
    out = bytearray()
    h = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:n])


def h(b):
    return hashlib.sha256(b).hexdigest()[:16]


def err(e):
    return "E" + errno.errorcode.get(e.errno, str(e.errno))


FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR, "wt": os.O_WRONLY | os.O_TRUNC,
         "wc": os.O_WRONLY | os.O_CREAT, "rwc": os.O_RDWR | os.O_CREAT, "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT}


def st_line(st):
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "reg" if stat.S_ISREG(st.st_mode) else "other"
    size = st.st_size if kind == "reg" else "-"
    return f"{kind} size={size} perm={stat.S_IMODE(st.st_mode):o}"


def unmap(maps, s):
    if s in maps:
        m, mfd = maps.pop(s)
        m.close()
        os.close(mfd)


def run_op(root, op, fds, maps):
    P = lambda x: os.path.join(root, x)
    k = op["k"]
    s = op["s"]
    try:
        if k == "munmap":
            if s not in maps:
                return "nomap"
            unmap(maps, s)
            return "ok"
        if k in ("mmap_poke", "mmap_peek"):
            if s not in maps:
                return "nomap"
            m, mfd = maps[s]
            limit = min(len(m), os.fstat(mfd).st_size)
            if k == "mmap_peek":
                return f"{limit} {h(m[:limit])}"
            off = op["off"] % max(limit, 1)
            n = min(op["len"], limit - off)
            if n <= 0:
                return "beyond"
            m[off:off + n] = data(op["seed"], n)
            return f"{n}@{off}"
        if k == "mmap_write":
            if s not in fds:
                return "noslot"
            unmap(maps, s)
            size = os.fstat(fds[s]).st_size
            if size == 0:
                return "empty"
            m = mmap.mmap(fds[s], size)
            maps[s] = (m, os.dup(fds[s]))
            n = min(op["len"], size)
            m[0:n] = data(op["seed"], n)
            return f"{size} {n}"
        if k == "open":
            if s in fds:
                os.close(fds.pop(s))
            fds[s] = os.open(P(op["f"]), FLAGS[op["flags"]] | os.O_CLOEXEC, op["mode"])
            return "ok"
        if k == "excl":
            fd = os.open(P(op["f"]), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, op["mode"])
            os.close(fd)
            return "ok"
        if k == "close":
            if s not in fds:
                return "noslot"
            os.close(fds.pop(s))
            return "ok"
        if k == "dup":
            if s not in fds:
                return "noslot"
            t = (s + 1) % SLOTS
            if t in fds:
                os.close(fds.pop(t))
            fds[t] = os.dup(fds[s])
            return "ok"
        if k in ("pwrite", "write", "pread", "read", "lseek", "ftruncate", "fsync", "fstat", "mmap_read"):
            if s not in fds:
                return "noslot"
            fd = fds[s]
            if k == "pwrite":
                return str(os.pwrite(fd, data(op["seed"], op["len"]), op["off"]))
            if k == "write":
                return str(os.write(fd, data(op["seed"], op["len"])))
            if k == "pread":
                b = os.pread(fd, op["len"], op["off"])
                return f"{len(b)} {h(b)}"
            if k == "read":
                b = os.read(fd, op["len"])
                return f"{len(b)} {h(b)}"
            if k == "lseek":
                return str(os.lseek(fd, op["off"] if op["whence"] == 0 else 0, op["whence"]))
            if k == "ftruncate":
                os.ftruncate(fd, op["off"])
                return "ok"
            if k == "fsync":
                os.fsync(fd)
                return "ok"
            if k == "fstat":
                return st_line(os.fstat(fd))
            if k == "mmap_read":
                size = os.fstat(fd).st_size
                if size == 0:
                    return "empty"
                with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
                    return f"{size} {h(m[:])}"
        if k == "truncate":
            os.truncate(P(op["f"]), op["off"])
            return "ok"
        if k == "append":
            fd = os.open(P(op["f"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                return str(os.write(fd, data(op["seed"], op["len"] % 5000)))
            finally:
                os.close(fd)
        if k == "readall":
            with open(P(op["f"]), "rb") as f:
                b = f.read()
            return f"{len(b)} {h(b)}"
        if k == "stat":
            return st_line(os.stat(P(op["f"])))
        if k == "rename":
            os.rename(P(op["f"]), P(op["g"]))
            return "ok"
        if k == "rename_dir":
            os.rename(P(op["d"]), P(op["e"]))
            return "ok"
        if k == "unlink":
            os.unlink(P(op["f"]))
            return "ok"
        if k == "mkdir":
            os.mkdir(P(op["d"]), 0o755)
            return "ok"
        if k == "rmdir":
            os.rmdir(P(op["d"]))
            return "ok"
        if k == "listdir":
            return " ".join(sorted(os.listdir(P(op["d"]))))
        if k == "chmod":
            os.chmod(P(op["f"]), op["mode"])
            return "ok"
        if k == "utime":
            os.utime(P(op["f"]), (op["t"], op["t"] + 7))
            return str(int(os.stat(P(op["f"])).st_mtime))
        if k == "link":
            os.link(P(op["f"]), P(op["g"]))
            return "ok"
        if k in ("symlink", "symlink_dir"):
            # Relative (resolved from the link's own directory, may dangle)
            # or absolute; never with "..": a link moved up by a rename would
            # then point outside ROOT, and the runs would touch files there.
            target, name = (op["f"], op["g"]) if k == "symlink" else (op["d"], op["e"])
            os.symlink(P(target) if op["seed"] % 2 else target, P(name))
            return "ok"
        if k == "lstat":
            st = os.lstat(P(op["f"]))
            return "link" if stat.S_ISLNK(st.st_mode) else st_line(st)
        if k == "readlink":
            return os.readlink(P(op["f"]))
        if k == "open_nofollow":
            fd = os.open(P(op["f"]), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            os.close(fd)
            return "ok"
        if k == "stat_nlink":
            return str(os.stat(P(op["f"])).st_nlink)
        if k == "exec":
            # Its own name: a script open for writing elsewhere is ETXTBSY in
            # the kernel, a case of its own (not exercised here).
            path = P(op["d"] + "/run.sh") if op["seed"] % 2 else P("run.sh")
            with open(path, "w") as f:
                f.write("#!/bin/sh\necho ran $1\n")
            os.chmod(path, 0o755)
            r = subprocess.run([path, str(op["seed"] % 100)], capture_output=True, timeout=60)
            return f"{r.returncode} {r.stdout.decode().strip()}"
    except OSError as e:
        return err(e)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    return "?"


def tree(root):
    """Every entry under root: type, size, permissions, content hash."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for n in sorted(filenames):
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out.append(f"{os.path.normpath(os.path.join(rel, n))} -> {os.readlink(p)}")
                continue
            with open(p, "rb") as f:
                b = f.read()
            out.append(f"{os.path.normpath(os.path.join(rel, n))} {st_line(st)} {h(b)}")
        for n in dirnames:
            out.append(f"{os.path.normpath(os.path.join(rel, n))}/ {st_line(os.lstat(os.path.join(dirpath, n)))}")
    return out


def worker(root, rfd, wfd):
    fds = {}
    maps = {}
    rf = os.fdopen(rfd, "r")
    wf = os.fdopen(wfd, "w")
    for line in rf:
        op = eval(line)  # our own repr from the driver
        if op is None:
            break
        wf.write(run_op(root, op, fds, maps) + "\n")
        wf.flush()
    for s in list(maps):
        unmap(maps, s)
    for fd in fds.values():
        os.close(fd)
    os._exit(0)


def main():
    args = sys.argv[1:]
    root, seed, n = args[0], int(args[1]), int(args[2])
    keep = None
    procs = 2
    allow_exec = True
    links = False
    maps = False
    no_renames = False
    i = 3
    while i < len(args):
        if args[i] == "--keep":
            keep = set(int(x) for x in args[i + 1].split(",") if x)
            i += 2
        elif args[i] == "--procs":
            procs = int(args[i + 1])
            i += 2
        elif args[i] == "--no-exec":
            allow_exec = False
            i += 1
        elif args[i] == "--links":
            links = True
            i += 1
        elif args[i] == "--maps":
            maps = True
            i += 1
        elif args[i] == "--no-renames":
            no_renames = True
            i += 1
        else:
            raise SystemExit(f"unknown argument {args[i]}")
    ops = gen(seed, n, procs, allow_exec, links, maps, no_renames)
    workers = []
    for _ in range(procs):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(to_w)
            os.close(from_r)
            worker(root, to_r, from_w)
        os.close(to_r)
        os.close(from_w)
        workers.append((pid, os.fdopen(to_w, "w"), os.fdopen(from_r, "r")))
    out = sys.stdout
    for idx, op in enumerate(ops):
        if keep is not None and idx not in keep:
            continue
        _, w, r = workers[op["p"]]
        w.write(repr(op) + "\n")
        w.flush()
        res = r.readline().strip()
        desc = {"open": f"{op['f']} {op['flags']} {op['mode']:o} ->{op['s']}", "pwrite": f"#{op['s']} {op['len']}@{op['off']}",
                "pread": f"#{op['s']} {op['len']}@{op['off']}", "rename": f"{op['f']} {op['g']}", "rename_dir": f"{op['d']} {op['e']}",
                "mkdir": op["d"], "rmdir": op["d"], "listdir": op["d"], "truncate": f"{op['f']} {op['off']}",
                "ftruncate": f"#{op['s']} {op['off']}"}.get(op["k"], f"{op['f']} #{op['s']}")
        out.write(f"{idx} p{op['p']} {op['k']} {desc} => {res}\n")
    for pid, w, r in workers:
        w.write("None\n")
        w.flush()
        os.waitpid(pid, 0)
    for line in tree(root):
        out.write(f"tree {line}\n")


if __name__ == "__main__":
    main()
