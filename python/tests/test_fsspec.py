"""fsspec `strata://bucket/key` (entry point `fsspec.specs`), with pandas
and zarr reading and writing through URLs."""
import pytest

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def fs(daemon):
    f = fsspec.filesystem("strata", socket=daemon, skip_instance_cache=True)
    yield f
    for b in f.ls("", detail=False):
        if b.startswith("fs-"):
            f.rm(b, recursive=True)


def opts(daemon):
    return {"socket": daemon}


def test_the_entry_point_finds_the_filesystem(fs):
    from strata._fsspec import StrataFileSystem

    assert isinstance(fs, StrataFileSystem)
    assert "strata" in fsspec.available_protocols()


def test_round_trips_listing_and_names(fs):
    fs.pipe("strata://fs-a/dir/x.bin", b"abc" * 10)
    fs.pipe("fs-a/dir/sub/y.bin", b"y")
    fs.pipe("fs-a/top.bin", b"")
    assert fs.cat("strata://fs-a/dir/x.bin") == b"abc" * 10
    assert fs.cat_file("fs-a/dir/x.bin", start=2, end=5) == b"cab"
    assert fs.cat_file("fs-a/dir/x.bin", start=-3) == b"abc"
    assert sorted(fs.ls("fs-a", detail=False)) == ["fs-a/dir", "fs-a/top.bin"]
    assert fs.ls("fs-a/dir", detail=False) == ["fs-a/dir/sub", "fs-a/dir/x.bin"]
    assert fs.info("fs-a/dir")["type"] == "directory"
    assert fs.info("fs-a/dir/x.bin")["size"] == 30
    assert fs.find("fs-a") == ["fs-a/dir/sub/y.bin", "fs-a/dir/x.bin", "fs-a/top.bin"]
    assert fs.exists("fs-a/top.bin") and not fs.exists("fs-a/nope")
    with pytest.raises(FileNotFoundError):
        fs.cat("fs-a/nope")
    fs.mv("fs-a/dir/x.bin", "fs-a/moved.bin")
    assert fs.cat("fs-a/moved.bin") == b"abc" * 10 and not fs.exists("fs-a/dir/x.bin")
    fs.mv("fs-a/moved.bin", "fs-b/elsewhere.bin")
    assert fs.cat("fs-b/elsewhere.bin") == b"abc" * 10
    fs.rm("fs-a/dir", recursive=True)
    assert fs.find("fs-a") == ["fs-a/top.bin"]
    fs.rm("fs-b", recursive=True)
    assert "fs-b" not in fs.ls("", detail=False)


def test_open_write_and_ranged_reads(fs):
    data = bytes(range(256)) * 40_000  # ~10 MiB, several blocks
    with fs.open("fs-c/big.bin", "wb") as f:
        for i in range(0, len(data), 1_000_003):
            f.write(data[i:i + 1_000_003])
        assert not fs.exists("fs-c/big.bin")  # appears whole at close
    assert fs.size("fs-c/big.bin") == len(data)
    with fs.open("fs-c/big.bin", "rb") as f:
        f.seek(5_000_000)
        assert f.read(1000) == data[5_000_000:5_001_000]
    with fs.open("fs-c/big.bin", "ab") as f:
        f.write(b"tail")
    assert fs.cat("fs-c/big.bin") == data + b"tail"
    assert [n for n in fs.ls("fs-c", detail=False) if "upload" in n] == []


def test_pandas_reads_and_writes_by_url(daemon, fs):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": range(1000), "b": [f"s{i}" for i in range(1000)]})
    df.to_csv("strata://fs-pd/t.csv", index=False, storage_options=opts(daemon))
    back = pd.read_csv("strata://fs-pd/t.csv", storage_options=opts(daemon))
    assert back.equals(df)


def test_zarr_array_through_strata(daemon, fs):
    zarr = pytest.importorskip("zarr")
    np = pytest.importorskip("numpy")
    a = np.arange(200 * 300, dtype="f8").reshape(200, 300)
    z = zarr.open_array("strata://fs-zarr/a.zarr", mode="w", shape=a.shape, chunks=(64, 64),
                        dtype="f8", storage_options=opts(daemon))
    z[:] = a
    back = zarr.open_array("strata://fs-zarr/a.zarr", mode="r", storage_options=opts(daemon))
    assert np.array_equal(back[:], a)
    assert np.array_equal(back[10:70, 250:299], a[10:70, 250:299])
    assert len([n for n in fs.find("fs-zarr") if "/c/" in n]) == 4 * 5
