"""`strata.open`: Python file objects served by the daemon's file model —
files buffered by strata without LD_PRELOAD."""

from __future__ import annotations

import builtins
import errno
import io
import os
import threading
import weakref

from strata import _native

#: Buffer size of the buffered file objects: every raw call is a round trip
#: to the daemon, so larger than io.DEFAULT_BUFFER_SIZE.
BUFFER_BYTES = 256 << 10

_default_lock = threading.Lock()
_default_client = None
#: Clients that may hold a private daemon: closed at interpreter exit.
_live_clients: "weakref.WeakSet[_native.Client]" = weakref.WeakSet()


def _remember(client):
    _live_clients.add(client)
    return client


def _close_all():
    for c in list(_live_clients):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - at exit nothing can be done but go on
            pass


def default_client():
    """The client `strata.open` uses when none is given: `strata.connect()`,
    made on first use, closed at interpreter exit."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            from strata import connect

            _default_client = connect()
        return _default_client


def _parse_mode(mode: str):
    if not isinstance(mode, str):
        raise TypeError(f"mode must be str, not {type(mode).__name__}")
    chars = set(mode)
    if len(chars) != len(mode) or not chars <= set("rwxab+t") or len(chars & set("rwxa")) != 1 or {"t", "b"} <= chars:
        raise ValueError(f"invalid mode: {mode!r}")
    kind = (chars & set("rwxa")).pop()
    plus = "+" in chars
    return dict(
        read=kind == "r" or plus,
        write=kind != "r" or plus,
        create=kind in "wxa",
        excl=kind == "x",
        trunc=kind == "w",
        append=kind == "a",
        binary="b" in chars,
    )


class FileIO(io.RawIOBase):
    """A raw (unbuffered) binary file of the daemon's file model. Use
    `strata.open`, which wraps it in the usual buffered/text layers."""

    def __init__(self, native: "_native.File", mode: str, *, readable: bool, writable: bool, append: bool):
        super().__init__()
        self._f = native
        self._mode = mode
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = native.size() if append else 0

    # --- what the file is
    @property
    def name(self) -> str:
        return self._f.path

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def persist(self) -> str:
        """How strata keeps it: "default", "scratch" or "workflow"."""
        return self._f.persist

    def readable(self) -> bool:
        self._check_closed()
        return self._readable

    def writable(self) -> bool:
        self._check_closed()
        return self._writable

    def seekable(self) -> bool:
        self._check_closed()
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation(
            "a strata file has no descriptor; run programs that need one under `strata run`"
        )

    def isatty(self) -> bool:
        self._check_closed()
        return False

    def _check_closed(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")

    # --- data
    def readinto(self, b) -> int:
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        n = self._f.pread(b, self._pos)
        self._pos += n
        return n

    def readall(self) -> bytes:
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        want = max(self._f.size() - self._pos, 0)
        buf = bytearray(want)
        got = self._f.pread(buf, self._pos) if want else 0
        self._pos += got
        del buf[got:]
        # the file may have grown meanwhile
        while True:
            more = bytearray(BUFFER_BYTES)
            n = self._f.pread(more, self._pos)
            if n == 0:
                return bytes(buf)
            self._pos += n
            buf += more[:n]

    def write(self, b) -> int:
        self._check_closed()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        if self._append:
            before = memoryview(b).nbytes
            self._pos = self._f.append(b)
            return before
        n = self._f.pwrite(b, self._pos)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check_closed()
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = self._f.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(errno.EINVAL, "Invalid argument", self.name)
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check_closed()
        return self._pos

    def truncate(self, size: int | None = None) -> int:
        self._check_closed()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        size = self._pos if size is None else size
        if size < 0:
            raise OSError(errno.EINVAL, "Invalid argument", self.name)
        self._f.truncate(size)
        return size

    def fsync(self) -> None:
        """Makes the data durable (DEFAULT: journaled on a non-volatile tier
        or at the destination) — what `os.fsync` is for a kernel file."""
        self._check_closed()
        self._f.sync()

    def close(self) -> None:
        if not self.closed:
            try:
                super().close()
            finally:
                self._f.close()

    def __repr__(self) -> str:
        return f"<strata.FileIO name={self.name!r} mode={self._mode!r} persist={self.persist!r}>"


def _fsync(f) -> None:
    raw = f
    while not isinstance(raw, FileIO):
        if isinstance(raw, io.TextIOWrapper):
            raw.flush()
            raw = raw.buffer
        elif isinstance(raw, (io.BufferedReader, io.BufferedWriter, io.BufferedRandom)):
            raw.flush()
            raw = raw.raw
        else:
            raise TypeError("not a file made by strata.open")
    raw.fsync()


def flush(paths=None, *, wait: bool = True, timeout: float | None = None, client=None) -> dict:
    """Writes the DEFAULT files under `paths` (default: all) to their
    destination now, as `strata flush --wait`: with `wait`, returns once they
    are persisted (a `StrataError` names the files that cannot be). `client`:
    default the one `strata.open` uses."""
    c = client if client is not None else default_client()
    return c.flush(None if paths is None else [os.fspath(p) for p in paths], wait, timeout)


def fsync(f) -> None:
    """Flushes `f` (a file object from `strata.open`, any layer) and makes
    its data durable by strata's rules, like `f.flush(); os.fsync(f.fileno())`."""
    _fsync(f)


def open(  # noqa: A001 - the point is to be a drop-in for builtins.open
    file,
    mode: str = "r",
    buffering: int = -1,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
    *,
    persist: str | None = None,
    client=None,
):
    """Opens `file` like the built-in `open`, served by strata's file model:
    writes land in the buffer and drain to `file` at the destination (its
    path) by the mode's rules; reads see the buffered bytes, else the
    destination's. `persist`: "default", "scratch" or "workflow" (None: the
    configuration's mode for the path). `client`: a `strata.Client` (default:
    `strata.connect()`, made once). `strata.fsync(f)` makes the data durable.

    Files strata must not buffer — the configuration says bypass for the
    path, another process maps the file shared and writable, or it is not a
    regular file — are opened with the built-in `open` instead.
    """
    if isinstance(file, int):
        return builtins.open(file, mode, buffering, encoding, errors, newline)
    path = os.path.abspath(os.fspath(file))
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    m = _parse_mode(mode)
    if m["binary"] and (encoding is not None or errors is not None or newline is not None):
        raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
    if buffering == 0 and not m["binary"]:
        raise ValueError("can't have unbuffered text I/O")
    c = client if client is not None else default_client()
    try:
        native = c.open_file(
            path,
            read=m["read"],
            write=m["write"],
            create=m["create"],
            excl=m["excl"],
            trunc=m["trunc"],
            persist=persist,
        )
    except IsADirectoryError:
        native = None  # not a regular file: the kernel says what it is
    if native is None:
        return builtins.open(path, mode, buffering, encoding, errors, newline)
    raw = FileIO(native, mode, readable=m["read"], writable=m["write"], append=m["append"])
    try:
        if buffering == 0:
            return raw
        size = BUFFER_BYTES if buffering in (-1, 1) else buffering
        buf: io.BufferedIOBase
        if m["read"] and m["write"]:
            buf = io.BufferedRandom(raw, size)
        elif m["write"]:
            buf = io.BufferedWriter(raw, size)
        else:
            buf = io.BufferedReader(raw, size)
        if m["binary"]:
            return buf
        text = io.TextIOWrapper(buf, encoding, errors, newline, line_buffering=buffering == 1)
        text.mode = mode  # type: ignore[misc]  # as builtins.open does
        return text
    except BaseException:
        raw.close()
        raise
