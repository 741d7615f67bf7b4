"""`python -m strata daemon start|stop`, `status|ls|put|get|rm`: the CLI's
commands for users who only pip-installed. `daemon start` runs a daemon
hosted by this Python until `daemon stop`. The other commands use the daemon
at --socket, else $STRATA_SOCKET's, else the configured one's; they never
start one (a blob put into a daemon that stops with the command is lost).
"""

import argparse
import json
import sys

import strata


def _size(n: float) -> str:
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if n < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}B"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m strata", description=__doc__)
    p.add_argument("--socket", help="the daemon's socket")
    p.add_argument("--config", help="configuration file (default: $STRATA_CONFIG, else derived from this machine)")
    sub = p.add_subparsers(dest="cmd", required=True)
    dm = sub.add_parser("daemon", help="start or stop a daemon hosted by this Python")
    dm.add_argument("action", choices=["start", "stop"])
    st = sub.add_parser("status", help="the daemon's tiers and counters")
    st.add_argument("--json", action="store_true")
    ls = sub.add_parser("ls", help="buckets, or the blobs of one")
    ls.add_argument("bucket", nargs="?")
    ls.add_argument("--long", action="store_true", help="size, score, tiers, dirty per blob")
    put = sub.add_parser("put", help="store FILE (or - for stdin) as a blob")
    put.add_argument("bucket")
    put.add_argument("name")
    put.add_argument("file")
    get = sub.add_parser("get", help="write a blob to FILE (or stdout)")
    get.add_argument("bucket")
    get.add_argument("name")
    get.add_argument("file", nargs="?", default="-")
    rm = sub.add_parser("rm", help="remove a blob")
    rm.add_argument("bucket")
    rm.add_argument("name")
    a = p.parse_args(argv)
    try:
        if a.cmd == "daemon":
            from strata import _native

            if a.action == "start":
                print(f"strata daemon started (socket {_native.start_daemon(sys.executable, a.config)})")
            else:
                print(f"strata daemon {_native.stop_daemon(a.config)}")
            return 0
        with strata.connect(a.socket, config=a.config, start=False) as c:
            if a.cmd == "status":
                s = c.status()
                if a.json:
                    print(json.dumps(s, indent=2))
                    return 0
                print(f"daemon pid {s['pid']}, socket {s['socket']}, up {s['uptime_s']:.0f} s, "
                      f"{s['clients']} clients, {s['buckets']} buckets, {s['blobs']} blobs")
                print(f"{'TIER':<10} {'KIND':<6} {'CAPACITY':>10} {'USED':>10} {'DIRTY':>10} {'BLOBS':>8}")
                for t in s["tiers"]:
                    print(f"{t['name']:<10} {t['kind']:<6} {_size(t['capacity_bytes']):>10} "
                          f"{_size(t['used_bytes']):>10} {_size(t['dirty_bytes']):>10} {t['blob_count']:>8}")
            elif a.cmd == "ls":
                if a.bucket is None:
                    for n in c.buckets():
                        print(n)
                else:
                    b = c.bucket(a.bucket, create=False)
                    for n in b.list():
                        if a.long:
                            s = b.stat(n)
                            print(f"{n}\t{s['size']}\t{s['score']:.3f}\t{s['tier_mask']:#x}\t"
                                  f"{'dirty' if s['dirty'] else 'clean'}")
                        else:
                            print(n)
            elif a.cmd == "put":
                data = sys.stdin.buffer.read() if a.file == "-" else open(a.file, "rb").read()
                c.bucket(a.bucket).put(a.name, data)
            elif a.cmd == "get":
                data = c.bucket(a.bucket, create=False).get(a.name)
                if a.file == "-":
                    sys.stdout.buffer.write(data)
                else:
                    with open(a.file, "wb") as f:
                        f.write(data)
            elif a.cmd == "rm":
                c.bucket(a.bucket, create=False).delete(a.name)
    except strata.StrataError as e:
        print(f"strata: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"strata: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
