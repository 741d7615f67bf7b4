"""strata: multi-tier I/O buffering for HPC and data-heavy applications.

    import strata
    with strata.connect() as client:          # $STRATA_SOCKET, else the configured daemon
        b = client.bucket("results")
        b.put("step-1", numpy_array)          # any buffer, used in place
        out = bytearray(b.stat("step-1")["size"])
        b.get_into("step-1", out)             # straight into your buffer

Arrays keep their dtype and shape: `strata.put_array(bucket, "x", a)` and
`strata.get_array(bucket, "x")` (also as `bucket.put_array` / `bucket.get_array`).

asyncio: `await bucket.aput(...)`, `aget`, `aget_into`, `aput_at`, `aappend`, `aget_at`,
`adelete`, `arename`, `alist`, `astat`.

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
    connect,
)

from strata._arrays import CopyWarning, get_array, put_array

__all__ = [
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
