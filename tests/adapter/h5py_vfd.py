"""An HDF5 file through h5py: `python h5py_vfd.py FILE`.

The driver is HDF5's choice: sec2 by default, strata's plugin with
HDF5_PLUGIN_PATH=<dir of libstrata_h5fd.so> HDF5_DRIVER=strata
HDF5_DRIVER_CONFIG=<mode>. Creates FILE (chunked + gzip datasets,
attributes, a resizable dataset grown twice, 200 small datasets), reopens it
to append and rewrite, reopens read-only and checks every value. Prints
"ok checksum=<hex> driver=<h5py's name>".
"""
import hashlib
import sys

import h5py
import numpy as np

path = sys.argv[1]
grid = (np.arange(300 * 500, dtype="f8") % 977 * 0.5).reshape(300, 500)
with h5py.File(path, "w", track_order=False) as f:
    d = f.create_dataset("grid", data=grid, chunks=(64, 100), compression="gzip", track_times=False)
    d.attrs["units"] = np.array([7, 8, 9], dtype="i4")
    f.attrs["title"] = "strata h5py test"
    s = f.create_dataset("series", shape=(100,), maxshape=(None,), chunks=(50,), dtype="i4", track_times=False)
    s[:] = np.arange(100) ** 2 - 3
    for n in (250, 400):
        old = s.shape[0]
        s.resize((n,))
        s[old:] = np.arange(old, n) ** 2 - 3
    g = f.create_group("small", track_order=False)
    for k in range(200):
        g.create_dataset(f"d{k:03d}", data=np.arange(k * 10, k * 10 + 10, dtype="i4"), track_times=False)
    f.flush()
with h5py.File(path, "r+") as f:
    f["grid"].attrs["units"] = np.array([7, 80, 9], dtype="i4")
    f.create_dataset("late", data=np.arange(10, dtype="i4") ** 2 - 3, track_times=False)
h = hashlib.sha256()
with h5py.File(path, "r") as f:
    driver = f.driver
    back = f["grid"][...]
    assert (back == grid).all(), "grid differs"
    h.update(back.tobytes())
    units = f["grid"].attrs["units"]
    assert list(units) == [7, 80, 9], units
    s = f["series"][...]
    assert (s == np.arange(400) ** 2 - 3).all(), "series differs"
    h.update(s.tobytes())
    for k in range(200):
        v = f[f"small/d{k:03d}"][...]
        assert (v == np.arange(k * 10, k * 10 + 10)).all(), k
        h.update(v.tobytes())
    assert (f["late"][...] == np.arange(10) ** 2 - 3).all()
    assert f.attrs["title"] == "strata h5py test"
print(f"ok checksum={h.hexdigest()[:16]} driver={driver}")
