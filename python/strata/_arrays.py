"""Arrays with their dtype and shape (issue 17): the bytes are the blob, the
description a bucket tag `strata.array/<name>` (JSON: dtype, shape)."""

import json
import warnings

from strata._native import Bucket, InvalidArgument, NotFound

TAG_PREFIX = "strata.array/"


class CopyWarning(UserWarning):
    """An array was not C-contiguous: strata stored a contiguous copy."""


def _tag(name: str) -> str:
    return TAG_PREFIX + name


def put_array(bucket: Bucket, name: str, array) -> None:
    """Stores a numpy array's bytes as blob `name` (in place when it is
    C-contiguous; else a contiguous copy, with a `CopyWarning`) and its dtype
    and shape as a tag of the bucket."""
    import numpy as np

    a = np.asarray(array)
    if a.dtype.hasobject:
        raise InvalidArgument(f"{name}: arrays of Python objects have no bytes to store")
    if not a.flags.c_contiguous:
        warnings.warn(
            f"{name}: the array is not C-contiguous; strata stores a contiguous copy",
            CopyWarning,
            stacklevel=2,
        )
        a = np.ascontiguousarray(a)
    bucket.put(name, a.reshape(-1).view(np.uint8) if a.size else b"")
    bucket.tag(_tag(name), json.dumps({"dtype": a.dtype.str, "shape": list(a.shape)}))


def get_array(bucket: Bucket, name: str):
    """The array stored by `put_array` as `name`: a new numpy array of its
    dtype and shape, filled straight from strata (no intermediate copy)."""
    import numpy as np

    meta = dict(bucket.tags()).get(_tag(name))
    if meta is None:
        raise NotFound(f"{name}: no array was stored under this name (put_array)")
    d = json.loads(meta)
    out = np.empty(tuple(d["shape"]), dtype=np.dtype(d["dtype"]))
    if out.nbytes:
        n = bucket.get_into(name, out)
        if n != out.nbytes:
            raise InvalidArgument(f"{name}: {n} bytes stored, the array needs {out.nbytes}")
    return out
