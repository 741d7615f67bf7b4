"""`python -m strata._daemon [--config FILE]`: a strata daemon hosted by this
interpreter, in the foreground — what `strata.connect()` starts (detached)
when no daemon answers and the `strata` command is not needed."""

import argparse
import sys

from strata._native import daemon_main


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m strata._daemon", description=__doc__)
    p.add_argument("--config", help="configuration file (default: $STRATA_CONFIG, else derived from this machine)")
    a = p.parse_args(argv)
    daemon_main(a.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
