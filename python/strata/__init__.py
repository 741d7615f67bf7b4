"""strata: multi-tier I/O buffering for HPC and data-heavy applications.

    import strata
    with strata.connect() as client:          # the running daemon, else a private one
        b = client.bucket("results")
        b.put("step-1", numpy_array)          # any buffer, used in place
        out = bytearray(b.stat("step-1")["size"])
        b.get_into("step-1", out)             # straight into your buffer

Arrays keep their dtype and shape: `strata.put_array(bucket, "x", a)` and
`strata.get_array(bucket, "x")` (also as `bucket.put_array` / `bucket.get_array`).

asyncio: `await bucket.aput(...)`, `aget`, `aget_into`, `aput_at`, `aappend`, `aget_at`,
`adelete`, `arename`, `alist`, `astat`.

Files without LD_PRELOAD: `strata.open(path, "wb", persist="scratch")` is a
file object like the built-in `open`'s, buffered by strata (`strata.fsync(f)`
makes it durable; `strata.flush(paths)` writes DEFAULT files to their
destination now and waits). fsspec: `fsspec.filesystem("strata")`, URLs
`strata://bucket/key` (pandas, xarray, Dask, zarr).

Errors are exceptions derived from `strata.StrataError` (`NotFound`,
`AlreadyExists`, `NoSpace`, `NodeDown`, `NoDaemon`, `InvalidArgument`,
`Closed`), carrying the daemon's message. Every call that reaches the daemon
releases the GIL.
"""

from strata._native import (
    AlreadyExists,
    Bucket,
    Client,
    Closed,
    InvalidArgument,
    NoDaemon,
    NodeDown,
    NoSpace,
    NotFound,
    StrataError,
)
from strata import _native

from strata._arrays import CopyWarning, get_array, put_array
from strata._file import FileIO, flush, fsync, open  # noqa: A004 - strata.open is the point
from strata import _file as _file_mod


def connect(socket: str | None = None, *, config: str | None = None, start: bool = True) -> Client:
    """Connects to a strata daemon: the one at `socket`, else
    `$STRATA_SOCKET`'s, else the configured one's (`config`: a configuration
    file; default `$STRATA_CONFIG`, else derived from this machine).

    When none answers there and `start` is true, starts a private daemon of
    that configuration, hosted by this Python (`python -m strata._daemon`) —
    as `strata run` does: shared by every process that connects this way,
    and stopped, after draining its DEFAULT files, when the last of them
    closes (`client.close()`, the end of a `with` block, or interpreter
    exit). `client.started_daemon` says whether this one started it.
    """
    import sys

    c = _native.connect(socket, config, start, sys.executable)
    return _file_mod._remember(c)


import atexit as _atexit  # noqa: E402

_atexit.register(_file_mod._close_all)

__all__ = [
    "FileIO",
    "flush",
    "fsync",
    "open",
    "CopyWarning",
    "get_array",
    "put_array",
    "AlreadyExists",
    "Bucket",
    "Client",
    "Closed",
    "InvalidArgument",
    "NoDaemon",
    "NodeDown",
    "NoSpace",
    "NotFound",
    "StrataError",
    "connect",
]


# methods of Bucket for arrays (implemented in Python over the native calls)
Bucket.put_array = put_array  # type: ignore[attr-defined]
Bucket.get_array = get_array  # type: ignore[attr-defined]
from strata import _aio  # noqa: E402

_aio.install()

Client.status = lambda self: __import__("json").loads(self.status_json())  # type: ignore[attr-defined]
