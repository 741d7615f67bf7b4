"""fsspec filesystem `strata://bucket/key`: buckets are the top-level
directories, blobs the files; a "/" in a blob name makes pseudo-directories
(as object stores do), so zarr, pandas, xarray and Dask reach strata by URL.

Registered through the `fsspec.specs` entry point:
`fsspec.filesystem("strata")`, `pandas.read_csv("strata://b/x.csv")`.
Options: `socket`, `config`, `start` (as `strata.connect`), or `client`.
"""

from __future__ import annotations

import uuid

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem  # type: ignore[import-untyped]

import strata
from strata._native import NotFound


class StrataFileSystem(AbstractFileSystem):
    """Buckets and blobs of a strata daemon as an fsspec filesystem."""

    protocol = "strata"
    root_marker = ""
    #: each call is a round trip to the daemon: large blocks
    blocksize = 4 << 20

    def __init__(self, socket=None, config=None, start=True, client=None, **kwargs):
        super().__init__(**kwargs)
        self.client = client if client is not None else strata.connect(socket, config=config, start=start)
        self._buckets: dict[str, strata.Bucket] = {}

    # --- paths
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("strata://"):
            path = path[len("strata://"):]
        elif path.startswith("strata::"):
            path = path[len("strata::"):]
        return path.strip("/")

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _bucket(self, name: str, create: bool = False):
        b = self._buckets.get(name)
        if b is None:
            try:
                b = self.client.bucket(name, create=create)
            except NotFound as e:
                raise FileNotFoundError(name) from e
            self._buckets[name] = b
        return b

    def _blob_info(self, bucket: str, key: str, st: dict) -> dict:
        return {
            "name": f"{bucket}/{key}",
            "size": st["size"],
            "type": "file",
            "mtime": st["mtime_ns"] / 1e9,
            "created": st["ctime_ns"] / 1e9,
        }

    # --- listing
    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        if path == "":
            out = [{"name": b, "size": 0, "type": "directory"} for b in self.client.buckets()]
        else:
            bucket, key = self._split(path)
            b = self._bucket(bucket)
            names = b.list()
            if key and key in names:
                out = [self._blob_info(bucket, key, b.stat(key))]
            else:
                prefix = f"{key}/" if key else ""
                files, dirs = [], set()
                for n in names:
                    if not n.startswith(prefix):
                        continue
                    rest = n[len(prefix):]
                    head, sep, _ = rest.partition("/")
                    if sep:
                        dirs.add(head)
                    else:
                        try:
                            files.append(self._blob_info(bucket, n, b.stat(n)))
                        except NotFound:
                            continue  # removed meanwhile
                if key and not files and not dirs:
                    raise FileNotFoundError(path)
                out = [{"name": f"{bucket}/{prefix}{d}", "size": 0, "type": "directory"} for d in sorted(dirs)]
                out += files
        return out if detail else [o["name"] for o in out]

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if path == "":
            return {"name": "", "size": 0, "type": "directory"}
        bucket, key = self._split(path)
        b = self._bucket(bucket)
        if not key:
            return {"name": bucket, "size": 0, "type": "directory"}
        try:
            return self._blob_info(bucket, key, b.stat(key))
        except NotFound:
            pass
        prefix = key + "/"
        if any(n.startswith(prefix) for n in b.list()):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    # --- whole blobs
    def cat_file(self, path, start=None, end=None, **kwargs):
        bucket, key = self._split(self._strip_protocol(path))
        b = self._bucket(bucket)
        try:
            if start is None and end is None:
                return b.get(key)
            size = b.stat(key)["size"]
        except NotFound as e:
            raise FileNotFoundError(path) from e
        start = 0 if start is None else (start if start >= 0 else max(size + start, 0))
        end = size if end is None else (end if end >= 0 else max(size + end, 0))
        end = min(end, size)
        if end <= start:
            return b""
        buf = bytearray(end - start)
        n = b.get_at(key, start, buf)
        del buf[n:]
        return bytes(buf)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        bucket, key = self._split(self._strip_protocol(path))
        if not key:
            raise IsADirectoryError(path)
        b = self._bucket(bucket, create=True)
        if mode == "create" and key in b:
            raise FileExistsError(path)
        b.put(key, value)

    def rm_file(self, path):
        bucket, key = self._split(self._strip_protocol(path))
        if not key:
            return self.rmdir(bucket)
        try:
            self._bucket(bucket).delete(key)
        except NotFound as e:
            raise FileNotFoundError(path) from e

    def _rm(self, path):
        if self.isdir(path):
            return self.rmdir(path)
        self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        for p in reversed(paths):
            bucket, key = self._split(self._strip_protocol(p))
            if key and self.isfile(p):
                self.rm_file(p)
            elif not key:
                self.rmdir(bucket)

    def mkdir(self, path, create_parents=True, **kwargs):
        bucket, _ = self._split(self._strip_protocol(path))
        if bucket:
            self._bucket(bucket, create=True)

    def makedirs(self, path, exist_ok=False):
        self.mkdir(path)

    def rmdir(self, path):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if key:
            return  # a pseudo-directory goes with its last blob
        b = self._bucket(bucket)
        if b.list():
            raise OSError(39, "Directory not empty", path)
        self._buckets.pop(bucket, None)
        b.destroy()

    def cp_file(self, path1, path2, **kwargs):
        self.pipe_file(path2, self.cat_file(path1))

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        (b1, k1), (b2, k2) = self._split(p1), self._split(p2)
        if b1 == b2 and k1 and k2 and self.isfile(p1):
            self._bucket(b1).rename(k1, k2, replace=True)
            return
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def modified(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    def created(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["created"], tz=datetime.timezone.utc)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        return StrataFile(self, path, mode, block_size or self.blocksize, autocommit,
                          cache_options=cache_options, **kwargs)


class StrataFile(AbstractBufferedFile):
    """A blob opened through fsspec: reads by range (`get_at`); a written
    blob appears whole at close (written under a temporary name, then
    renamed over the target)."""

    def _fetch_range(self, start, end):
        bucket, key = self.fs._split(self.fs._strip_protocol(self.path))
        return self.fs.cat_file(f"{bucket}/{key}", start, end)

    def _initiate_upload(self):
        bucket, key = self.fs._split(self.fs._strip_protocol(self.path))
        if not key:
            raise IsADirectoryError(self.path)
        self._b = self.fs._bucket(bucket, create=True)
        self._key = key
        if self.mode == "ab":
            self._tmp = None
        else:
            self._tmp = f"{key}.strata-upload-{uuid.uuid4().hex}"
            self._b.put(self._tmp, b"")

    def _upload_chunk(self, final=False):
        data = self.buffer.getbuffer()
        target = self._tmp if self._tmp is not None else self._key
        if len(data):
            self._b.append(target, data)
        del data
        if final and self._tmp is not None:
            if self.mode == "xb" and self._key in self._b:
                self._b.delete(self._tmp)
                raise FileExistsError(self.path)
            self._b.rename(self._tmp, self._key, replace=True)
        return True

    def discard(self):
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            try:
                self._b.delete(tmp)
            except NotFound:
                pass
