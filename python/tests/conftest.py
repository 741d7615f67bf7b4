"""A private strata daemon for the Python tests (never the user's default).

The `strata` binary: $PYTEST_STRATA_BIN, else the workspace's target/debug/strata
(not a STRATA_* name: a daemon refuses unknown STRATA_* variables).
"""
import os
import pathlib
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def strata_bin() -> str:
    return os.environ.get("PYTEST_STRATA_BIN") or str(ROOT / "target" / "debug" / "strata")


def write_config(d: pathlib.Path, prefix: str) -> pathlib.Path:
    """A private daemon's configuration under `d` (socket d/rt/daemon.sock)."""
    cfg = d / "strata.yaml"
    cfg.write_text(
        f"daemon:\n  socket: {d / 'rt' / 'daemon.sock'}\n  shm_prefix: {prefix}\n  log: warn\n"
        "devices:\n  - name: ram\n    kind: ram\n    capacity: 1GiB\n"
        f"  - name: disk\n    kind: dir\n    path: {d / 'tier'}\n    capacity: 1GiB\n"
        "flush:\n  interval: 50ms\n"
    )
    return cfg


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}


@pytest.fixture(scope="session")
def daemon_config(daemon):
    """The session daemon's configuration file (for `strata --config F flush`)."""
    return str(pathlib.Path(daemon).parent.parent / "strata.yaml")


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    d = tmp_path_factory.mktemp("strata-py")
    sock = d / "rt" / "daemon.sock"
    cfg = write_config(d, f"strata-py{os.getpid()}")
    env = clean_env()
    subprocess.run([strata_bin(), "--config", str(cfg), "daemon", "start"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield str(sock)
    subprocess.run([strata_bin(), "--config", str(cfg), "daemon", "stop"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def client(daemon):
    import strata

    with strata.connect(daemon) as c:
        yield c


@pytest.fixture
def bucket(client, request):
    b = client.bucket(f"t-{request.node.name}"[:200])
    yield b
    for n in b.list():
        b.delete(n)
    b.close()
