from strata._native import (
    AlreadyExists as AlreadyExists,
    Bucket as Bucket,
    Client as Client,
    Closed as Closed,
    InvalidArgument as InvalidArgument,
    NoDaemon as NoDaemon,
    NodeDown as NodeDown,
    NoSpace as NoSpace,
    NotFound as NotFound,
    StrataError as StrataError,
)
from strata._file import FileIO as FileIO, flush as flush, fsync as fsync, open as open
from strata._arrays import (
    CopyWarning as CopyWarning,
    get_array as get_array,
    put_array as put_array,
)

def connect(socket: str | None = None, *, config: str | None = None, start: bool = True) -> Client:
    """The daemon at `socket`, else $STRATA_SOCKET's, else the configured one's; with none
    there and `start`, a private daemon shared by the processes that connect this way and
    stopped, after draining, when the last closes."""
