"""The package across nodes, unchanged: two daemons on two loopback
addresses joined in one cluster (`strata cluster start`); blobs and
`strata.open` files written through one node are read through the other."""
import os
import subprocess

import pytest

import strata
from conftest import clean_env, strata_bin


@pytest.fixture
def two_nodes(tmp_path):
    net = 100 + os.getpid() % 100
    hosts = f"n0=127.{net}.9.1,n1=127.{net}.9.2"
    dest = tmp_path / "dest"
    dest.mkdir()
    socks = []
    for n in ("n0", "n1"):
        rt = tmp_path / n / "rt"
        rt.mkdir(parents=True)
        rt.chmod(0o700)
        socks.append(str(rt / "daemon.sock"))
        (tmp_path / f"{n}.yaml").write_text(
            f"daemon:\n  socket: {rt / 'daemon.sock'}\n  shm_prefix: py-cl{os.getpid()}-{n}\n  log: warn\n"
            "devices:\n  - name: ram\n    kind: ram\n    capacity: 256MiB\n"
            f"cluster:\n  secret_file: {tmp_path / 'cluster.secret'}\n  call_timeout: 5s\n"
            f"adapter:\n  mode: default\n  include: [{dest}]\n"
        )
    template = str(tmp_path / "{name}.yaml")
    cli = lambda *a: subprocess.run([strata_bin(), "--config", template, *a, "--hosts", hosts],  # noqa: E731
                                    env=clean_env(), capture_output=True, text=True)
    r = cli("cluster", "start", "--launcher", "{cmd}")
    if r.returncode != 0:
        cli("cluster", "stop", "--no-drain")
        pytest.fail(f"cluster start: {r.stdout}{r.stderr}")
    yield socks, dest
    r = cli("cluster", "stop")
    assert r.returncode == 0, r.stderr


def test_blobs_and_files_written_on_one_node_are_read_on_the_other(two_nodes):
    (s0, s1), dest = two_nodes
    data = os.urandom((1 << 20) + 123)
    with strata.connect(s0) as a, strata.connect(s1) as b:
        for i in range(8):  # buckets owned by either node
            a.bucket(f"cl-{i}").put("k", data)
        for i in range(8):
            out = bytearray(len(data))
            assert b.bucket(f"cl-{i}", create=False).get_into("k", out) == len(data)
            assert out == data
        for i in range(8):  # files owned by either node
            with strata.open(dest / f"f{i}.bin", "wb", client=a) as f:
                f.write(data)
            with strata.open(dest / f"f{i}.bin", "rb", client=b) as f:
                assert f.read() == data
            with strata.open(dest / f"f{i}.bin", "ab", client=b) as f:
                f.write(b"tail")
            with strata.open(dest / f"f{i}.bin", "rb", client=a) as f:
                assert f.read() == data + b"tail"
        # DEFAULT files drain to the shared destination from their owners
        r = subprocess.run([strata_bin(), "--config", str(dest.parent / "n1.yaml"), "flush", "--wait"],
                           env=clean_env(), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for i in range(8):
            assert (dest / f"f{i}.bin").read_bytes() == data + b"tail"
