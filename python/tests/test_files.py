"""`strata.open` (files through the daemon's file model, no LD_PRELOAD),
compared byte for byte with the built-in `open` (issue 17, part 2)."""
import hashlib
import io
import os
import random
import subprocess

import pytest

import strata
from conftest import clean_env, strata_bin


def pattern(n: int, seed: int = 1) -> bytes:
    return (hashlib.sha256(f"{seed}".encode()).digest() * (n // 32 + 1))[:n]


def flush_wait(cfg: str, path) -> None:
    subprocess.run([strata_bin(), "--config", cfg, "flush", "--wait", str(path)], check=True,
                   env=clean_env(), stdout=subprocess.DEVNULL)


def test_write_read_and_the_destination_after_a_flush(client, daemon_config, tmp_path):
    p = tmp_path / "a.bin"
    data = pattern((3 << 20) + 17)
    with strata.open(p, "wb", client=client) as f:
        assert isinstance(f, io.BufferedWriter)
        assert f.write(data) == len(data)
        assert f.raw.persist == "default"
    with strata.open(p, "rb", client=client) as f:
        assert f.read() == data
    flush_wait(daemon_config, p)
    assert p.read_bytes() == data


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, (1 << 20) + 3, 16 << 20])
def test_sizes_and_buffer_kinds(client, tmp_path, size):
    np = pytest.importorskip("numpy")
    p = tmp_path / "s.bin"
    data = pattern(size, size)
    with strata.open(p, "wb", buffering=0, client=client) as f:
        assert f.write(np.frombuffer(data, dtype=np.uint8)) == size
    with strata.open(p, "rb", buffering=0, client=client) as f:
        out = bytearray(size + 5)
        n = f.readinto(out) if size else 0
        assert n == size and bytes(out[:n]) == data
        assert f.read() == b""


def test_text_modes_append_and_exclusive(client, tmp_path):
    p = tmp_path / "t.txt"
    with strata.open(p, "w", encoding="utf-8", client=client) as f:
        print("line one — ünïcode", file=f)
    with strata.open(p, "a", encoding="utf-8", client=client) as f:
        assert f.tell() == len("line one — ünïcode\n".encode())
        f.write("two\n")
    with strata.open(p, encoding="utf-8", client=client) as f:
        assert f.readlines() == ["line one — ünïcode\n", "two\n"]
    with pytest.raises(FileExistsError):
        strata.open(p, "x", client=client)
    with pytest.raises(FileNotFoundError):
        strata.open(tmp_path / "missing", "rb", client=client)
    with pytest.raises(ValueError):
        strata.open(p, "rw", client=client)
    with pytest.raises(IsADirectoryError):
        strata.open(tmp_path, "rb", client=client)


def test_an_existing_file_is_read_from_the_destination_and_updated_in_place(client, daemon_config, tmp_path):
    p = tmp_path / "old.bin"
    p.write_bytes(pattern(100_000, 7))
    with strata.open(p, "r+b", client=client) as f:
        assert f.read(10) == pattern(100_000, 7)[:10]
        f.seek(50_000)
        f.write(b"X" * 10)
        f.truncate(60_000)
    want = bytearray(pattern(100_000, 7)[:60_000])
    want[50_000:50_010] = b"X" * 10
    with strata.open(p, "rb", client=client) as f:
        assert f.read() == bytes(want)
    flush_wait(daemon_config, p)
    assert p.read_bytes() == bytes(want)


def test_scratch_never_reaches_the_destination(client, daemon_config, tmp_path):
    p = tmp_path / "scratch.bin"
    with strata.open(p, "wb", persist="scratch", client=client) as f:
        f.write(b"temporary")
        strata.fsync(f)
    flush_wait(daemon_config, tmp_path)
    assert not p.exists()
    with strata.open(p, "rb", persist="scratch", client=client) as f:
        assert f.read() == b"temporary"
    with pytest.raises(strata.InvalidArgument):
        strata.open(tmp_path / "x", "wb", persist="sometimes", client=client)


def test_file_object_conventions(client, tmp_path):
    p = tmp_path / "c.bin"
    f = strata.open(p, "w+b", client=client)
    assert f.readable() and f.writable() and f.seekable() and not f.isatty()
    with pytest.raises(io.UnsupportedOperation):
        f.fileno()
    assert f.name == str(p)
    f.write(b"0123456789")
    assert f.seek(-3, os.SEEK_END) == 7 and f.read() == b"789"
    f.close()
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    f.close()  # twice is harmless
    r = strata.open(p, "rb", client=client)
    with pytest.raises(io.UnsupportedOperation):
        r.write(b"x")
    r.close()


OPS = ["write", "read", "seek", "tell", "truncate", "reopen", "readline", "flush"]


def apply(f, op, rng, log):
    """One random operation on file object `f`; what it returns is compared."""
    if op == "write":
        n = rng.choice([1, 7, 4096, 5000, 70_000, 1 << 20])
        data = rng.randbytes(n)
        return f.write(data)
    if op == "read":
        n = rng.choice([-1, 0, 1, 100, 4096, 100_000])
        r = f.read(n)
        return r
    if op == "readline":
        return f.readline()
    if op == "seek":
        whence = rng.choice([0, 1, 2])
        off = rng.randrange(0, 200_000) if whence == 0 else rng.randrange(-1000, 1000)
        try:
            return ("ok", f.seek(off, whence))
        except OSError as e:
            return ("err", e.errno)
    if op == "tell":
        return f.tell()
    if op == "truncate":
        return f.truncate(rng.choice([None, 0, 10, 4096, 100_000]))
    if op == "flush":
        return f.flush()
    raise AssertionError(op)


@pytest.mark.parametrize("buffering", [0, 4096, 256 << 10])
@pytest.mark.parametrize("seed", range(8))
def test_randomized_against_the_builtin_open(client, tmp_path, seed, buffering):
    # the same buffer size on both sides: the buffered layers are CPython's
    # own, so what differs is the raw file underneath (ours vs FileIO)
    rng_a, rng_b = random.Random(seed), random.Random(seed)
    plain = tmp_path / "plain.bin"
    buffered = tmp_path / "buffered.bin"
    modes = ["w+b", "r+b", "a+b", "rb", "ab", "wb"]
    fa = open(plain, "w+b", buffering=buffering)
    fb = strata.open(buffered, "w+b", buffering=buffering, client=client)
    mode = "w+b"
    for step in range(120):
        op = rng_a.choice(OPS)
        assert op == rng_b.choice(OPS)
        if op == "reopen":
            fa.close()
            fb.close()
            mode = rng_a.choice(modes)
            assert mode == rng_b.choice(modes)
            fa = open(plain, mode, buffering=buffering)
            fb = strata.open(buffered, mode, buffering=buffering, client=client)
            continue
        ra = rb = None
        ea = eb = None
        try:
            ra = apply(fa, op, rng_a, None)
        except (OSError, ValueError) as e:
            ea = type(e)
        try:
            rb = apply(fb, op, rng_b, None)
        except (OSError, ValueError) as e:
            eb = type(e)
        assert (ea, ra) == (eb, rb), f"seed {seed} step {step}: {op} in mode {mode}"
    fa.close()
    fb.close()
    with strata.open(buffered, "rb", client=client) as f:
        assert f.read() == plain.read_bytes(), f"seed {seed}: final bytes differ"


def test_zero_config_open_uses_the_default_client(daemon, tmp_path, monkeypatch):
    # $STRATA_SOCKET is what `strata run` sets; the default client follows it
    import strata._file as fm

    monkeypatch.setenv("STRATA_SOCKET", daemon)
    monkeypatch.setattr(fm, "_default_client", None)
    with strata.open(tmp_path / "z.bin", "wb") as f:
        f.write(b"zero config")
    with strata.open(tmp_path / "z.bin", "rb") as f:
        assert f.read() == b"zero config"
    fm._default_client.close()
    monkeypatch.setattr(fm, "_default_client", None)


def test_an_existing_buffered_file_keeps_its_mode(client, tmp_path):
    p = tmp_path / "keep.bin"
    with strata.open(p, "wb", persist="scratch", client=client) as f:
        f.write(b"s")
    with strata.open(p, "ab", persist="default", client=client) as f:
        assert f.raw.persist == "scratch"  # what the record is, not what was asked
        f.write(b"t")
    with strata.open(p, "rb", client=client) as f:
        assert f.read() == b"st"


def test_flush_waits_for_the_destination_and_names_what_cannot_be_persisted(tmp_path):
    from conftest import write_config

    (tmp_path / "d").mkdir()
    cfg = str(write_config(tmp_path / "d", f"py-fl{os.getpid()}"))
    dest = tmp_path / "dest"
    dest.mkdir()
    with strata.connect(config=cfg) as c:
        # (the background flusher may have written some already: either way
        # flush returns once all are at the destination)
        paths = [dest / f"f{i}.bin" for i in range(4)]
        for p in paths:
            with strata.open(p, "wb", persist="default", client=c) as f:
                f.write(pattern(100_000, 5))
        left = strata.flush([dest], client=c)
        assert left == {"dirty_files": 0, "dirty_bytes": 0}
        assert all(p.read_bytes() == pattern(100_000, 5) for p in paths)
        with pytest.raises(strata.InvalidArgument):
            c.flush(timeout=-1)
        # a destination that refuses: the error names the file
        sub = dest / "sub"
        sub.mkdir()
        with strata.open(sub / "x.bin", "wb", persist="default", client=c) as f:
            f.write(b"x" * 1000)
        sub.rename(dest / "away")
        sub.write_bytes(b"not a directory")
        with pytest.raises(strata.StrataError, match="x.bin"):
            c.flush([sub], timeout=60)
        # put right: persisted
        sub.unlink()
        (dest / "away").rename(sub)
        assert c.flush([sub], timeout=60)["dirty_files"] == 0
        assert (sub / "x.bin").read_bytes() == b"x" * 1000
