"""strata: multi-tier I/O buffering for HPC and data-heavy applications.

    import strata
    with strata.connect() as client:          # $STRATA_SOCKET, else the configured daemon
        b = client.bucket("results")
        b.put("step-1", numpy_array)          # any buffer, used in place
        out = bytearray(b.stat("step-1")["size"])
        b.get_into("step-1", out)             # straight into your buffer

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

__all__ = [
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
