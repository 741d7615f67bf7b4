from typing import Any

from strata._native import Bucket

class CopyWarning(UserWarning): ...

def put_array(bucket: Bucket, name: str, array: Any) -> None:
    """Stores a numpy array's bytes and its dtype and shape (a bucket tag)."""

def get_array(bucket: Bucket, name: str) -> Any:
    """The array stored by put_array, as a new numpy array."""
