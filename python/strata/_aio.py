"""asyncio variants of the blocking calls (issue 17): `await bucket.aput(...)`.

Every native call releases the GIL, so running it on the default executor's
threads (`asyncio.to_thread`) is real concurrency, not a serialised wait.
"""

import asyncio
import functools

from strata._native import Bucket

_NAMES = ["put", "put_at", "append", "get", "get_into", "get_at", "delete", "rename", "list", "stat"]


def _async_variant(name: str):
    blocking = getattr(Bucket, name)

    @functools.wraps(blocking)
    async def call(self, *args, **kwargs):
        return await asyncio.to_thread(blocking, self, *args, **kwargs)

    call.__name__ = "a" + name
    call.__qualname__ = "Bucket.a" + name
    call.__doc__ = f"`await bucket.a{name}(...)`: Bucket.{name} on a worker thread (the GIL released)."
    return call


def install() -> None:
    for n in _NAMES:
        setattr(Bucket, "a" + n, _async_variant(n))
