"""Type stubs of strata's native module (crates/strata-py)."""

import builtins
import sys

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer
from types import TracebackType
from typing import Any

class StrataError(Exception):
    """Any error from strata; the message is the daemon's."""

class NotFound(StrataError):
    """No such bucket, blob or file."""

class AlreadyExists(StrataError):
    """The bucket or blob exists already."""

class NoSpace(StrataError):
    """Out of space on every tier."""

class NodeDown(StrataError):
    """A cluster node that holds the data is down or unreachable."""

class NoDaemon(StrataError):
    """The daemon is unreachable (start one with `strata daemon start`)."""

class InvalidArgument(StrataError):
    """A bad name, size, buffer or argument."""

class Closed(StrataError):
    """The client or bucket handle was closed."""

class Bucket:
    """A bucket: named blobs with tags. A context manager closing the handle."""

    @property
    def name(self) -> str: ...
    def put(self, name: str, data: Buffer) -> None:
        """Stores `data`'s bytes (any C-contiguous buffer, used in place) as blob `name`."""
    def put_at(self, name: str, offset: int, data: Buffer) -> int:
        """Writes `data` at `offset` of blob `name`; returns the size afterwards."""
    def append(self, name: str, data: Buffer) -> int:
        """Appends `data` to blob `name`; returns the size afterwards."""
    def get(self, name: str) -> bytes:
        """Blob `name` as bytes."""
    def get_into(self, name: str, buffer: Buffer) -> int:
        """Reads blob `name` into a writable buffer that holds it all; returns the bytes read."""
    def get_at(self, name: str, offset: int, buffer: Buffer) -> int:
        """Reads up to len(buffer) bytes from `offset`; returns the bytes read."""
    def delete(self, name: str) -> None:
        """Removes blob `name`."""
    def rename(self, old: str, new: str, replace: bool = False) -> None:
        """Renames blob `old` to `new`; `replace` lets an existing `new` go."""
    def list(self) -> builtins.list[str]:
        """The blobs' names, sorted."""
    def __contains__(self, name: str) -> bool: ...
    def stat(self, name: str) -> dict[str, Any]:
        """size, accesses, atime_ns, mtime_ns, ctime_ns, score, user_score, stationary, tier_mask, dirty."""
    def set_score(self, name: str, score: float | None, stationary: bool = False) -> None:
        """The user score in [0, 1] (None clears it); `stationary` pins the blob."""
    def tag(self, key: str, value: str) -> None:
        """Sets tag `key` of the bucket."""
    def tags(self) -> builtins.list[tuple[str, str]]:
        """The bucket's tags."""
    def put_array(self, name: str, array: Any) -> None:
        """strata.put_array(self, name, array): bytes plus dtype and shape."""
    def get_array(self, name: str) -> Any:
        """strata.get_array(self, name): a new numpy array."""
    async def aput(self, name: str, data: Buffer) -> None: ...
    async def aput_at(self, name: str, offset: int, data: Buffer) -> int: ...
    async def aappend(self, name: str, data: Buffer) -> int: ...
    async def aget(self, name: str) -> bytes: ...
    async def aget_into(self, name: str, buffer: Buffer) -> int: ...
    async def aget_at(self, name: str, offset: int, buffer: Buffer) -> int: ...
    async def adelete(self, name: str) -> None: ...
    async def arename(self, old: str, new: str, replace: bool = False) -> None: ...
    async def alist(self) -> builtins.list[str]: ...
    async def astat(self, name: str) -> dict[str, Any]: ...
    def destroy(self) -> None:
        """Destroys the bucket and every blob in it; the handle is closed."""
    def close(self) -> None:
        """Closes this handle; the bucket stays."""
    def __enter__(self) -> Bucket: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Client:
    """A connection to a strata daemon. A context manager closing it."""

    @property
    def socket(self) -> str: ...
    def buckets(self) -> list[str]:
        """The names of every bucket, sorted."""
    def status_json(self) -> str:
        """The daemon's status as JSON (what `strata status --json` prints)."""
    def status(self) -> dict[str, Any]:
        """The daemon's status, parsed."""
    def bucket(self, name: str, create: bool = True) -> Bucket:
        """The bucket `name`, created when `create` and missing (else NotFound)."""
    @property
    def started_daemon(self) -> bool:
        """Whether this client started the daemon (connect() with none running)."""
    def flush(
        self, paths: list[str] | None = None, wait: bool = True, timeout: float | None = None
    ) -> dict[str, int]:
        """Writes the DEFAULT files under `paths` (default: all) to their destination now
        (`strata flush --wait`); with `wait`, returns once persisted (StrataError naming the
        files that cannot be). Returns dirty_files, dirty_bytes left."""
    def open_file(
        self,
        path: str,
        read: bool,
        write: bool,
        create: bool = False,
        excl: bool = False,
        trunc: bool = False,
        persist: str | None = None,
        perms: int = 0o666,
    ) -> File | None:
        """Opens absolute `path` in the daemon's file model (what strata.open builds on);
        None when the file must be used directly (bypass, or mapped shared elsewhere)."""
    def close(self) -> bool:
        """Closes the connection; a daemon started by connect() stops (after draining) when
        its last user closes. Returns whether this call stopped it."""
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class File:
    """A file of the daemon's file model: positioned calls (strata.open keeps the position)."""

    @property
    def path(self) -> str: ...
    @property
    def persist(self) -> str:
        """"default", "scratch" or "workflow"."""
    @property
    def closed(self) -> bool: ...
    def pread(self, buffer: Buffer, offset: int) -> int:
        """Reads up to len(buffer) bytes at `offset` into `buffer`; 0 at the end."""
    def pwrite(self, data: Buffer, offset: int) -> int:
        """Writes `data` at `offset`; returns its length."""
    def append(self, data: Buffer) -> int:
        """Appends `data` atomically; returns the size afterwards."""
    def size(self) -> int: ...
    def truncate(self, length: int) -> None: ...
    def sync(self) -> None:
        """Durable by strata's rules (as fsync)."""
    def close(self) -> None: ...

def connect(
    socket: str | None = None,
    config: str | None = None,
    start: bool = True,
    python: str | None = None,
) -> Client:
    """The daemon at `socket`, else $STRATA_SOCKET's, else the configured one's; with none
    there and `start`, a private daemon hosted by `python -m strata._daemon`."""

def start_daemon(python: str, config: str | None = None) -> str:
    """Starts a daemon hosted by `python` detached (as `strata daemon start`); returns its socket."""

def stop_daemon(config: str | None = None) -> str:
    """Stops the daemon (draining first); returns the outcome."""

def daemon_main(config: str | None = None) -> None:
    """Runs a daemon in this process until it is stopped (python -m strata._daemon)."""
