"""HDF5 write/read timing through h5py for `strata bench hdf5`:
`python h5py_bench.py FILE BYTES CHUNK [sync]`.

The driver is HDF5's choice (sec2, or strata's plugin by HDF5_DRIVER). One
chunked 1-D dataset of doubles written chunk by chunk, the file closed
(`sync`: then fsynced), reopened, read back chunk by chunk and checked.
Prints "ok write_s=W read_s=R".
"""
import os
import sys
import time

import h5py
import numpy as np

path, total, chunk = sys.argv[1], int(sys.argv[2]) // 8, int(sys.argv[3]) // 8
sync = "sync" in sys.argv[4:]
t0 = time.monotonic()
with h5py.File(path, "w") as f:
    d = f.create_dataset("data", shape=(total,), chunks=(chunk,), dtype="f8")
    for at in range(0, total, chunk):
        d[at:at + chunk] = np.arange(at, at + chunk, dtype="f8") * 0.25
if sync:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
t1 = time.monotonic()
with h5py.File(path, "r") as f:
    d = f["data"]
    for at in range(0, total, chunk):
        got = d[at:at + chunk]
        if not np.array_equal(got, np.arange(at, at + chunk, dtype="f8") * 0.25):
            sys.exit(f"values at {at} differ")
t2 = time.monotonic()
print(f"ok write_s={t1 - t0:.6f} read_s={t2 - t1:.6f}")
