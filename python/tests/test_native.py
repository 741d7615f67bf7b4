"""strata's native Python API against a real daemon (issue 17, part 1)."""
import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest

import strata

np = pytest.importorskip("numpy")

SIZES = [0, 1, 4095, 4096, (1 << 20) + 3, 16 << 20]


def pattern(n: int, seed: int = 1) -> bytes:
    return (hashlib.sha256(f"{seed}".encode()).digest() * (n // 32 + 1))[:n]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy"])
def test_put_and_get_every_buffer_kind(bucket, size, kind):
    data = pattern(size, size)
    src = {
        "bytes": lambda: data,
        "bytearray": lambda: bytearray(data),
        "memoryview": lambda: memoryview(bytearray(data)),
        "numpy": lambda: np.frombuffer(data, dtype=np.uint8).copy(),
    }[kind]()
    bucket.put("b", src)
    assert bucket.get("b") == data
    out = bytearray(size)
    assert bucket.get_into("b", out) == size
    assert bytes(out) == data
    mv = memoryview(bytearray(size + 10))
    assert bucket.get_into("b", mv) == size
    assert bytes(mv[:size]) == data


def test_a_256_mib_blob_round_trips(bucket):
    a = np.random.default_rng(7).integers(0, 255, size=256 << 20, dtype=np.uint8)
    bucket.put("big", a)
    out = np.empty_like(a)
    assert bucket.get_into("big", out) == a.nbytes
    assert np.array_equal(a, out)


@pytest.mark.parametrize("dtype", ["f8", "f4", "i2", "u8", "c16", "bool"])
def test_numpy_dtypes_in_place(bucket, dtype):
    a = (np.arange(10007) % 97).astype(dtype)
    bucket.put("a", a)
    out = np.zeros_like(a)
    assert bucket.get_into("a", out) == a.nbytes
    assert np.array_equal(a, out)


def test_non_contiguous_arrays_are_refused_with_a_clear_error(bucket):
    a = np.arange(100, dtype="f8")[::2]
    with pytest.raises(strata.InvalidArgument, match="C-contiguous"):
        bucket.put("a", a)
    bucket.put("a", np.ascontiguousarray(a))  # the copy is the caller's, said so
    assert bucket.stat("a")["size"] == a.nbytes


def test_partial_writes_reads_and_appends(bucket):
    assert bucket.put_at("p", 10, b"abc") == 13
    buf = bytearray(13)
    assert bucket.get_at("p", 0, buf) == 13
    assert bytes(buf) == b"\0" * 10 + b"abc"
    assert bucket.append("p", b"XYZ") == 16
    assert bucket.get("p") == b"\0" * 10 + b"abcXYZ"
    small = bytearray(4)
    assert bucket.get_at("p", 12, small) == 4
    assert bytes(small) == b"cXYZ"
    assert bucket.get_at("p", 100, small) == 0


def test_names_rename_delete_and_membership(bucket):
    for n in ["b", "a", "c"]:
        bucket.put(n, n.encode())
    assert bucket.list() == ["a", "b", "c"]
    bucket.rename("a", "z")
    assert "a" not in bucket and "z" in bucket
    with pytest.raises(strata.AlreadyExists):
        bucket.rename("b", "c")
    bucket.rename("b", "c", replace=True)
    assert bucket.get("c") == b"b"
    bucket.delete("z")
    assert bucket.list() == ["c"]


def test_scores_tags_and_stat(bucket):
    bucket.put("s", b"x" * 100)
    bucket.set_score("s", 0.9, stationary=True)
    st = bucket.stat("s")
    assert st["size"] == 100 and st["stationary"] is True
    assert abs(st["user_score"] - 0.9) < 1e-6
    bucket.set_score("s", None)
    assert bucket.stat("s")["user_score"] is None
    bucket.tag("owner", "me")
    assert ("owner", "me") in bucket.tags()
    with pytest.raises(strata.InvalidArgument):
        bucket.set_score("s", 1.5)


def test_errors_are_exceptions_with_the_daemons_message(client, bucket):
    with pytest.raises(strata.NotFound, match="no such blob"):
        bucket.get("missing")
    with pytest.raises(strata.NotFound):
        bucket.delete("missing")
    with pytest.raises(strata.NotFound):
        client.bucket("never-made", create=False)
    with pytest.raises(strata.InvalidArgument):
        bucket.put("", b"x")
    with pytest.raises(TypeError):
        bucket.put("x", 42)
    with pytest.raises(TypeError):
        bucket.put(42, b"x")
    with pytest.raises(strata.InvalidArgument, match="writable"):
        bucket.get_into("missing", b"read-only")
    bucket.put("t", b"0123456789")
    with pytest.raises(strata.InvalidArgument, match="10 bytes"):
        bucket.get_into("t", bytearray(3))
    assert issubclass(strata.NotFound, strata.StrataError)


def test_closed_handles_raise(daemon):
    c = strata.connect(daemon)
    b = c.bucket("closing")
    c.close()
    with pytest.raises(strata.Closed):
        c.bucket("x")
    b.put("still", b"ok")  # a bucket outlives its client handle
    b.close()
    with pytest.raises(strata.Closed):
        b.put("x", b"y")


def test_no_daemon_is_a_clear_error(tmp_path):
    with pytest.raises(strata.NoDaemon):
        strata.connect(str(tmp_path / "none.sock"))


def test_threads_share_a_client_with_the_gil_released(bucket):
    errors = []

    def worker(t):
        try:
            for i in range(40):
                data = pattern(65536 + t * 7 + i, t * 1000 + i)
                bucket.put(f"t{t}-{i}", data)
                assert hashlib.sha256(bucket.get(f"t{t}-{i}")).digest() == hashlib.sha256(data).digest()
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert len(bucket.list()) == 8 * 40


def _proc_worker(args):
    sock, p = args
    with strata.connect(sock) as c:
        b = c.bucket("procs")
        for i in range(20):
            data = pattern(100_000 + i, p * 100 + i)
            b.put(f"p{p}-{i}", data)
        return [hashlib.sha256(b.get(f"p{p}-{i}")).hexdigest() for i in range(20)]


def test_processes_with_checksums(daemon):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        sums = pool.map(_proc_worker, [(daemon, p) for p in range(4)])
    for p, got in enumerate(sums):
        assert got == [hashlib.sha256(pattern(100_000 + i, p * 100 + i)).hexdigest() for i in range(20)]


def test_a_client_killed_mid_put_leaves_the_daemon_consistent(daemon, client):
    b = client.bucket("survivor")
    b.put("kept", b"kept bytes")
    code = (
        "import strata, sys\n"
        "c = strata.connect(sys.argv[1]); b = c.bucket('victim')\n"
        "data = bytes(64 << 20)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    b.put('big', data)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, daemon], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert b.get("kept") == b"kept bytes"
    v = client.bucket("victim")
    v.put("after", b"fine")
    assert v.get("after") == b"fine"
    for n in v.list():
        v.delete(n)


def test_arrays_keep_dtype_and_shape(bucket):
    a = np.arange(24, dtype=">i4").reshape(2, 3, 4)
    bucket.put_array("a", a)
    back = bucket.get_array("a")
    assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(a, back)
    strata.put_array(bucket, "e", np.empty((0, 5), dtype="f4"))
    assert strata.get_array(bucket, "e").shape == (0, 5)
    with pytest.warns(strata.CopyWarning):
        bucket.put_array("t", a.transpose())
    assert np.array_equal(bucket.get_array("t"), a.transpose())
    with pytest.raises(strata.NotFound):
        bucket.get_array("never")
    with pytest.raises(strata.InvalidArgument):
        bucket.put_array("o", np.array([object()]))


def _cli(daemon, *args, stdin=None):
    return subprocess.run([sys.executable, "-m", "strata", "--socket", daemon, *args],
                          input=stdin, capture_output=True)


def test_python_m_strata_mirrors_the_cli(daemon, tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(pattern(100_000, 3))
    assert _cli(daemon, "put", "cli", "blob", str(src)).returncode == 0
    assert _cli(daemon, "put", "cli", "piped", "-", stdin=b"from stdin").returncode == 0
    out = tmp_path / "out.bin"
    assert _cli(daemon, "get", "cli", "blob", str(out)).returncode == 0
    assert out.read_bytes() == src.read_bytes()
    assert _cli(daemon, "get", "cli", "piped").stdout == b"from stdin"
    assert _cli(daemon, "ls", "cli").stdout.decode().split() == ["blob", "piped"]
    assert "cli" in _cli(daemon, "ls").stdout.decode().split()
    assert "100000" in _cli(daemon, "ls", "cli", "--long").stdout.decode()
    st = _cli(daemon, "status")
    assert st.returncode == 0 and "TIER" in st.stdout.decode()
    assert '"tiers"' in _cli(daemon, "status", "--json").stdout.decode()
    assert _cli(daemon, "rm", "cli", "blob").returncode == 0
    miss = _cli(daemon, "get", "cli", "blob")
    assert miss.returncode == 1 and b"no such blob" in miss.stderr


def test_asyncio_variants_run_concurrently(bucket):
    import asyncio

    async def main():
        datas = {f"k{i}": pattern(200_000 + i, i) for i in range(16)}
        await asyncio.gather(*(bucket.aput(k, v) for k, v in datas.items()))
        got = await asyncio.gather(*(bucket.aget(k) for k in datas))
        assert got == list(datas.values())
        buf = bytearray(200_000)
        assert await bucket.aget_into("k0", buf) == 200_000
        assert sorted(await bucket.alist()) == sorted(datas)
        assert (await bucket.astat("k3"))["size"] == 200_003
        await bucket.adelete("k3")
        with pytest.raises(strata.NotFound):
            await bucket.aget("k3")

    asyncio.run(main())
