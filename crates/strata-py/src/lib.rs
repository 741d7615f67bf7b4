//! `strata._native`: the Python package's native module (issue 17), PyO3
//! over `strata-client`. The Python layer (`python/strata/`) re-exports it
//! and adds what is Python only.
//!
//! **Architecture Invariant.** The GIL is released for every call that
//! reaches the daemon; a buffer handed in is used in place (the buffer
//! protocol, C-contiguous bytes), never copied in Python; every daemon
//! error becomes an exception of the `StrataError` hierarchy carrying the
//! daemon's message.
//!
//! **API Boundary.** `strata-client`'s native API (connect, buckets, blobs,
//! tags, scores); nothing of the protocol or the engine.

use std::ffi::c_int;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use strata_proto::Errno;

create_exception!(strata, StrataError, PyException, "Any error from strata.");
create_exception!(
    strata,
    NotFound,
    StrataError,
    "No such bucket, blob or file."
);
create_exception!(
    strata,
    AlreadyExists,
    StrataError,
    "The bucket or blob exists already."
);
create_exception!(strata, NoSpace, StrataError, "Out of space on every tier.");
create_exception!(
    strata,
    NodeDown,
    StrataError,
    "A cluster node that holds the data is down."
);
create_exception!(strata, NoDaemon, StrataError, "The daemon is unreachable.");
create_exception!(
    strata,
    InvalidArgument,
    StrataError,
    "A bad name, size or argument."
);
create_exception!(
    strata,
    Closed,
    StrataError,
    "The client or bucket was closed."
);

fn to_py(e: strata_client::Error) -> PyErr {
    let msg = e.to_string();
    match e.errno {
        Errno::NoBucket | Errno::NoBlob | Errno::NoFile => NotFound::new_err(msg),
        Errno::Exists => AlreadyExists::new_err(msg),
        Errno::NoSpace | Errno::Quota => NoSpace::new_err(msg),
        Errno::NodeDown => NodeDown::new_err(msg),
        Errno::NoDaemon | Errno::Shutdown => NoDaemon::new_err(msg),
        Errno::Inval | Errno::Name | Errno::TooBig | Errno::Range => InvalidArgument::new_err(msg),
        _ => StrataError::new_err(msg),
    }
}

/// A file-model error as Python's `OSError` (the subclass of its errno:
/// `FileNotFoundError`, `FileExistsError`, …) with the daemon's message; an
/// unreachable daemon stays `strata.NoDaemon`.
fn os_err(e: strata_client::Error, path: &str) -> PyErr {
    if matches!(e.errno, Errno::NoDaemon | Errno::Shutdown) {
        return NoDaemon::new_err(e.to_string());
    }
    pyo3::exceptions::PyOSError::new_err((e.os_errno(), e.to_string(), path.to_string()))
}

/// A C-contiguous view of an object's bytes through the buffer protocol,
/// released on drop. Any element type: the bytes are what count.
struct View {
    view: pyo3::ffi::Py_buffer,
}

// SAFETY: the exporter keeps the memory alive until PyBuffer_Release (in
// drop, which takes the GIL); moving the struct between threads moves only
// pointers, and the bytes are read or written while the GIL is released,
// as numpy and hashlib do with buffers.
unsafe impl Send for View {}
// SAFETY: as above: shared references only read the pointers; the bytes
// are read (or written through bytes_mut's exclusive borrow) by one call.
unsafe impl Sync for View {}

impl View {
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<View> {
        let mut view = std::mem::MaybeUninit::<pyo3::ffi::Py_buffer>::zeroed();
        let flags: c_int = pyo3::ffi::PyBUF_C_CONTIGUOUS
            | pyo3::ffi::PyBUF_FORMAT
            | if writable {
                pyo3::ffi::PyBUF_WRITABLE
            } else {
                0
            };
        // SAFETY: obj is a live object; view is writable storage for one Py_buffer.
        let r = unsafe { pyo3::ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) };
        if r != 0 {
            let py = obj.py();
            let cause = PyErr::fetch(py);
            let msg = format!(
                "{} does not give a C-contiguous{} buffer: {cause} (pass bytes, bytearray, memoryview or a contiguous numpy array)",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_default(),
                if writable { ", writable" } else { "" }
            );
            // no buffer at all is a type error; a buffer of the wrong shape
            // (strided, read-only) a bad argument
            if cause.is_instance_of::<pyo3::exceptions::PyTypeError>(py) && !writable {
                return Err(pyo3::exceptions::PyTypeError::new_err(msg));
            }
            return Err(InvalidArgument::new_err(msg));
        }
        // SAFETY: PyObject_GetBuffer succeeded: the struct is initialised.
        let view = unsafe { view.assume_init() };
        Ok(View { view })
    }

    fn len(&self) -> usize {
        self.view.len as usize
    }

    fn bytes(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: a C-contiguous buffer of len bytes at buf, alive until drop.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.len()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len() == 0 {
            return &mut [];
        }
        // SAFETY: a writable C-contiguous buffer of len bytes (PyBUF_WRITABLE).
        unsafe { std::slice::from_raw_parts_mut(self.view.buf as *mut u8, self.len()) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        Python::with_gil(|_| {
            // SAFETY: a buffer obtained by PyObject_GetBuffer, released once.
            unsafe { pyo3::ffi::PyBuffer_Release(&mut self.view) };
        });
    }
}

/// A connection to a strata daemon.
#[pyclass(module = "strata._native", frozen, weakref)]
struct Client {
    inner: std::sync::Mutex<Option<strata_client::Client>>,
    socket: String,
    /// This client's hold on a daemon started for Python users (released,
    /// and the daemon stopped if this was its last user, at close).
    shared: std::sync::Mutex<Option<strata_launch::SharedUse>>,
    /// The configuration (for a file's mode and page size by path).
    config: Option<strata_config::Config>,
}

impl Client {
    fn client(&self) -> PyResult<strata_client::Client> {
        self.inner
            .lock()
            .map_err(|_| StrataError::new_err("client lock poisoned"))?
            .clone()
            .ok_or_else(|| Closed::new_err("the client is closed"))
    }
}

#[pymethods]
impl Client {
    /// The bucket `name`; created when `create` (the default) and missing.
    #[pyo3(signature = (name, create = true))]
    fn bucket(&self, py: Python<'_>, name: &str, create: bool) -> PyResult<Bucket> {
        let c = self.client()?;
        let b = py
            .allow_threads(|| {
                if create {
                    c.bucket(name)
                } else {
                    c.bucket_open(name)
                }
            })
            .map_err(to_py)?;
        Ok(Bucket {
            inner: std::sync::Mutex::new(Some(std::sync::Arc::new(b))),
        })
    }

    /// The names of every bucket (of every node in a cluster), sorted.
    fn buckets(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let c = self.client()?;
        py.allow_threads(|| c.bucket_names()).map_err(to_py)
    }

    /// The daemon's status (what `strata status --json` prints), as JSON text.
    fn status_json(&self, py: Python<'_>) -> PyResult<String> {
        let socket = std::path::PathBuf::from(&self.socket);
        let st = py
            .allow_threads(|| strata_client::status(&socket))
            .map_err(to_py)?;
        serde_json::to_string(&st).map_err(|e| StrataError::new_err(e.to_string()))
    }

    /// The daemon's socket.
    #[getter]
    fn socket(&self) -> &str {
        &self.socket
    }

    /// Whether this client started the daemon (`connect()` with none
    /// running); it is stopped — after draining — when the last such client
    /// of the machine's processes closes.
    #[getter]
    fn started_daemon(&self) -> PyResult<bool> {
        Ok(self
            .shared
            .lock()
            .map_err(|_| StrataError::new_err("client lock poisoned"))?
            .as_ref()
            .is_some_and(|s| s.started))
    }

    /// Closes the connection (buckets and files opened from it stay usable
    /// until closed). A daemon started by `connect()` is stopped when its
    /// last user closes: DEFAULT files are drained to their destination
    /// first. Returns whether this call stopped it.
    fn close(&self, py: Python<'_>) -> PyResult<bool> {
        self.inner
            .lock()
            .map_err(|_| StrataError::new_err("client lock poisoned"))?
            .take();
        let shared = self
            .shared
            .lock()
            .map_err(|_| StrataError::new_err("client lock poisoned"))?
            .take();
        match shared {
            None => Ok(false),
            Some(s) => py
                .allow_threads(|| s.release())
                .map_err(|e| StrataError::new_err(format!("stopping the private daemon: {e:#}"))),
        }
    }

    /// Writes the DEFAULT files under `paths` (default: all) to their
    /// destination now — what `strata flush --wait` does. With `wait`
    /// (the default) returns once they are persisted, within `timeout`
    /// seconds (None: no limit); files that cannot be persisted raise
    /// `StrataError` naming each with its error. Returns what is left:
    /// `dirty_files`, `dirty_bytes` (0 after a successful wait).
    #[pyo3(signature = (paths = None, wait = true, timeout = None))]
    fn flush<'py>(
        &self,
        py: Python<'py>,
        paths: Option<Vec<std::path::PathBuf>>,
        wait: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        use strata_proto::control::{ControlReply, ControlRequest, FlushReply};
        self.client()?; // closed clients raise
        let socket = std::path::PathBuf::from(&self.socket);
        let mut abs = Vec::new();
        for p in paths.unwrap_or_default() {
            let a = strata_client::stage::absolute(&p).map_err(to_py)?;
            abs.push(a.to_string_lossy().into_owned());
        }
        let deadline = match timeout {
            Some(t) if !(t.is_finite() && t >= 0.0) => {
                return Err(InvalidArgument::new_err("timeout: seconds >= 0, or None"))
            }
            Some(t) => Some(std::time::Instant::now() + std::time::Duration::from_secs_f64(t)),
            None => None,
        };
        let ask = |req: &ControlRequest| -> PyResult<FlushReply> {
            match strata_client::control_request(&socket, req) {
                Ok(ControlReply::Flush(r)) => Ok(r),
                Ok(ControlReply::Error { message, .. }) => Err(StrataError::new_err(message)),
                Ok(other) => Err(StrataError::new_err(format!("unexpected reply: {other:?}"))),
                Err(e) => Err(to_py(e)),
            }
        };
        let state = py.allow_threads(|| -> PyResult<FlushReply> {
            let mut state = ask(&ControlRequest::Flush { paths: abs.clone() })?;
            // A failure seen may come from a job that began before this
            // call (the destination put right meanwhile): ask once more
            // when no job runs, so the verdict is a fresh attempt's.
            let mut asked_again = false;
            // bounded by the deadline, else by the daemon draining (each
            // poll sees fewer dirty files or a failure)
            while wait && !state.drained() {
                if state.only_failures_left() {
                    if asked_again {
                        break;
                    }
                    asked_again = true;
                    state = ask(&ControlRequest::Flush { paths: abs.clone() })?;
                    continue;
                }
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Err(StrataError::new_err(format!(
                        "flush: {} file(s), {} byte(s) still to write after the timeout",
                        state.dirty_files, state.dirty_bytes
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
                state = ask(&ControlRequest::FlushState { paths: abs.clone() })?;
            }
            Ok(state)
        })?;
        if wait && !state.errors.is_empty() {
            let list: Vec<String> = state
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect();
            return Err(StrataError::new_err(format!(
                "cannot persist {} file(s): {}",
                list.len(),
                list.join("; ")
            )));
        }
        let d = PyDict::new(py);
        d.set_item("dirty_files", state.dirty_files)?;
        d.set_item("dirty_bytes", state.dirty_bytes)?;
        Ok(d)
    }

    /// Opens the file at absolute `path` through the daemon's file model
    /// (`strata.open` builds a Python file object on it). `persist`:
    /// "default", "scratch", "workflow", or None for the configuration's
    /// mode of the path. Returns None when the file must be used directly
    /// (the configuration says bypass, or another process maps it shared
    /// and writable): open it with the built-in `open` then.
    #[pyo3(signature = (path, read, write, create = false, excl = false, trunc = false, persist = None, perms = 0o666))]
    #[allow(clippy::too_many_arguments)]
    fn open_file(
        &self,
        py: Python<'_>,
        path: &str,
        read: bool,
        write: bool,
        create: bool,
        excl: bool,
        trunc: bool,
        persist: Option<&str>,
        perms: u32,
    ) -> PyResult<Option<File>> {
        use strata_client::file::{OpenFlags, Persist};
        use strata_config::Mode;
        let c = self.client()?;
        if !path.starts_with('/') {
            return Err(InvalidArgument::new_err(format!(
                "{path}: give an absolute path"
            )));
        }
        let (cfg_mode, page_bytes) = match &self.config {
            Some(cfg) => cfg.adapter.settings_for(std::path::Path::new(path)),
            None => (
                Mode::Default,
                strata_config::AdapterConfig::default().page_size_bytes,
            ),
        };
        let mode = match persist {
            None => cfg_mode,
            Some(m) => m.parse::<Mode>().map_err(|_| {
                InvalidArgument::new_err(format!(
                    "persist={m:?}: use \"default\", \"scratch\" or \"workflow\""
                ))
            })?,
        };
        let persist = match mode {
            Mode::Default => Persist::Default,
            Mode::Scratch => Persist::Scratch,
            Mode::Workflow => Persist::Workflow,
            Mode::Bypass => return Ok(None),
        };
        let fl = OpenFlags {
            read,
            write,
            create,
            excl,
            trunc,
        };
        // SAFETY: umask has no preconditions; it is set back at once.
        let umask = unsafe {
            let m = libc::umask(0);
            libc::umask(m);
            m
        };
        let a = py
            .allow_threads(|| c.file_open(path, fl, perms & !umask & 0o7777, persist, page_bytes))
            .map_err(|e| os_err(e, path))?;
        if a.direct {
            let _ = py.allow_threads(|| c.file_close(a.id));
            return Ok(None);
        }
        Ok(Some(File {
            client: c,
            id: std::sync::Mutex::new(Some(a.id)),
            path: path.to_string(),
            // what the record is (an existing file keeps its own mode)
            persist: match a.persist {
                Persist::Default => "default",
                Persist::Scratch => "scratch",
                Persist::Workflow => "workflow",
            }
            .to_string(),
        }))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("strata.Client(socket={:?})", self.socket)
    }
}

impl Drop for Client {
    /// A client dropped unclosed still leaves as a user of a daemon it
    /// shares (stopping it, after draining, if it was the last).
    fn drop(&mut self) {
        let shared = self.shared.get_mut().ok().and_then(|s| s.take());
        if let Some(s) = shared {
            Python::with_gil(|py| {
                let _ = py.allow_threads(|| s.release());
            });
        }
    }
}

/// A bucket: named blobs with tags.
#[pyclass(module = "strata._native", frozen)]
struct Bucket {
    inner: std::sync::Mutex<Option<std::sync::Arc<strata_client::Bucket>>>,
}

impl Bucket {
    fn b(&self) -> PyResult<std::sync::Arc<strata_client::Bucket>> {
        self.inner
            .lock()
            .map_err(|_| StrataError::new_err("bucket lock poisoned"))?
            .clone()
            .ok_or_else(|| Closed::new_err("the bucket is closed"))
    }
}

#[pymethods]
impl Bucket {
    /// The bucket's name.
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.b()?.name())
    }

    /// Stores the bytes of `data` (any buffer: bytes, bytearray, memoryview,
    /// numpy array — used in place, not copied) as blob `name`, replacing it.
    fn put(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = self.b()?;
        let v = View::get(data, false)?;
        py.allow_threads(|| b.put(name, v.bytes())).map_err(to_py)
    }

    /// Writes `data` at byte `offset` of blob `name` (created if missing);
    /// returns the blob's size afterwards.
    fn put_at(
        &self,
        py: Python<'_>,
        name: &str,
        offset: u64,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let b = self.b()?;
        let v = View::get(data, false)?;
        py.allow_threads(|| b.put_at(name, offset, v.bytes()))
            .map_err(to_py)
    }

    /// Appends `data` to blob `name`; returns the blob's size afterwards.
    fn append(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let b = self.b()?;
        let v = View::get(data, false)?;
        py.allow_threads(|| b.append(name, v.bytes()))
            .map_err(to_py)
    }

    /// Blob `name` as bytes.
    fn get<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let b = self.b()?;
        let size = py.allow_threads(|| b.size_of(name)).map_err(to_py)?;
        let size = usize::try_from(size).map_err(|_| InvalidArgument::new_err("blob too large"))?;
        // fill the bytes object in place: one copy, from the tier
        let mut failed = None;
        let out = PyBytes::new_with(py, size, |buf| {
            let n = py.allow_threads(|| b.get_at(name, 0, buf));
            match n {
                Ok(n) if n == size => Ok(()),
                Ok(n) => {
                    failed = Some(StrataError::new_err(format!(
                        "{name} changed while read ({n} of {size} bytes)"
                    )));
                    Ok(())
                }
                Err(e) => {
                    failed = Some(to_py(e));
                    Ok(())
                }
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Reads blob `name` into `buffer` (any writable buffer: bytearray,
    /// memoryview, numpy array) with no intermediate copy; returns the
    /// bytes read. The buffer must hold the whole blob.
    fn get_into(&self, py: Python<'_>, name: &str, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        let b = self.b()?;
        let mut v = View::get(buffer, true)?;
        let size = py.allow_threads(|| b.size_of(name)).map_err(to_py)?;
        if size > v.len() as u64 {
            return Err(InvalidArgument::new_err(format!(
                "{name} has {size} bytes, the buffer {}",
                v.len()
            )));
        }
        let want = size as usize;
        py.allow_threads(|| b.get_at(name, 0, &mut v.bytes_mut()[..want]))
            .map_err(to_py)
    }

    /// Reads up to `len(buffer)` bytes of blob `name` from byte `offset`
    /// into `buffer`; returns the bytes read (short at the end).
    fn get_at(
        &self,
        py: Python<'_>,
        name: &str,
        offset: u64,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let b = self.b()?;
        let mut v = View::get(buffer, true)?;
        py.allow_threads(|| b.get_at(name, offset, v.bytes_mut()))
            .map_err(to_py)
    }

    /// Removes blob `name`.
    fn delete(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let b = self.b()?;
        py.allow_threads(|| b.delete(name)).map_err(to_py)
    }

    /// Renames blob `old` to `new` (`replace`: an existing `new` goes).
    #[pyo3(signature = (old, new, replace = false))]
    fn rename(&self, py: Python<'_>, old: &str, new: &str, replace: bool) -> PyResult<()> {
        let b = self.b()?;
        py.allow_threads(|| b.rename_blob(old, new, replace))
            .map_err(to_py)
    }

    /// The blobs' names, sorted.
    fn list(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let b = self.b()?;
        py.allow_threads(|| b.list()).map_err(to_py)
    }

    /// Whether blob `name` exists.
    fn __contains__(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        let b = self.b()?;
        match py.allow_threads(|| b.size_of(name)) {
            Ok(_) => Ok(true),
            Err(e) if e.errno == Errno::NoBlob => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Blob `name`'s record: size, times, score, user score, stationary,
    /// tiers, dirty, accesses.
    fn stat<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let b = self.b()?;
        let s = py.allow_threads(|| b.stat(name)).map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("size", s.size)?;
        d.set_item("accesses", s.access_count)?;
        d.set_item("atime_ns", s.atime_ns)?;
        d.set_item("mtime_ns", s.mtime_ns)?;
        d.set_item("ctime_ns", s.ctime_ns)?;
        d.set_item("score", s.score)?;
        d.set_item("user_score", s.user_score)?;
        d.set_item("stationary", s.stationary)?;
        d.set_item("tier_mask", s.tier_mask)?;
        d.set_item("dirty", s.dirty)?;
        Ok(d)
    }

    /// Sets blob `name`'s user score in [0, 1] (None clears it); `stationary`
    /// pins it where it is.
    #[pyo3(signature = (name, score, stationary = false))]
    fn set_score(
        &self,
        py: Python<'_>,
        name: &str,
        score: Option<f32>,
        stationary: bool,
    ) -> PyResult<()> {
        let b = self.b()?;
        py.allow_threads(|| b.set_score(name, score, stationary))
            .map_err(to_py)
    }

    /// Destroys the bucket and every blob in it; the handle is closed.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        let b = self.b()?;
        py.allow_threads(|| b.destroy()).map_err(to_py)?;
        self.close()
    }

    /// Sets tag `key` of the bucket.
    fn tag(&self, py: Python<'_>, key: &str, value: &str) -> PyResult<()> {
        let b = self.b()?;
        py.allow_threads(|| b.tag(key, value)).map_err(to_py)
    }

    /// The bucket's tags.
    fn tags(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let b = self.b()?;
        py.allow_threads(|| b.tags()).map_err(to_py)
    }

    /// Closes this handle (the bucket and its blobs stay).
    fn close(&self) -> PyResult<()> {
        self.inner
            .lock()
            .map_err(|_| StrataError::new_err("bucket lock poisoned"))?
            .take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.b() {
            Ok(b) => format!("strata.Bucket({:?})", b.name()),
            Err(_) => "strata.Bucket(<closed>)".into(),
        }
    }
}

/// A file of the daemon's file model, opened by `Client.open_file`;
/// positioned calls only (the Python file object keeps the position).
#[pyclass(module = "strata._native", frozen)]
struct File {
    client: strata_client::Client,
    id: std::sync::Mutex<Option<u64>>,
    path: String,
    persist: String,
}

impl File {
    fn id(&self) -> PyResult<u64> {
        self.id
            .lock()
            .map_err(|_| StrataError::new_err("file lock poisoned"))?
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("I/O operation on closed file"))
    }
}

#[pymethods]
impl File {
    /// The file's absolute path.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// How it is kept: "default", "scratch" or "workflow".
    #[getter]
    fn persist(&self) -> &str {
        &self.persist
    }

    /// Whether it is closed.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self
            .id
            .lock()
            .map_err(|_| StrataError::new_err("file lock poisoned"))?
            .is_none())
    }

    /// Reads up to `len(buffer)` bytes at `offset` into `buffer` (any
    /// writable buffer, filled in place); returns the count, 0 at the end.
    fn pread(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let id = self.id()?;
        let mut v = View::get(buffer, true)?;
        if v.len() == 0 {
            return Ok(0);
        }
        let c = &self.client;
        py.allow_threads(|| c.file_read(id, offset, v.bytes_mut()))
            .map_err(|e| os_err(e, &self.path))
    }

    /// Writes the bytes of `data` (any buffer, used in place) at `offset`;
    /// returns the count (all of them).
    fn pwrite(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let id = self.id()?;
        let v = View::get(data, false)?;
        if v.len() == 0 {
            return Ok(0);
        }
        let c = &self.client;
        py.allow_threads(|| c.file_write(id, offset, v.bytes()))
            .map_err(|e| os_err(e, &self.path))?;
        Ok(v.len())
    }

    /// Appends `data` at the end of the file (atomic against other
    /// appenders); returns the file's size afterwards.
    fn append(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let id = self.id()?;
        let v = View::get(data, false)?;
        let c = &self.client;
        if v.len() == 0 {
            return py
                .allow_threads(|| c.file_stat(id))
                .map(|a| a.size)
                .map_err(|e| os_err(e, &self.path));
        }
        py.allow_threads(|| c.file_append(id, v.bytes()))
            .map(|(_, size)| size)
            .map_err(|e| os_err(e, &self.path))
    }

    /// The file's size in bytes.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        let id = self.id()?;
        let c = &self.client;
        py.allow_threads(|| c.file_stat(id))
            .map(|a| a.size)
            .map_err(|e| os_err(e, &self.path))
    }

    /// Sets the file's size to `length` bytes.
    fn truncate(&self, py: Python<'_>, length: u64) -> PyResult<()> {
        let id = self.id()?;
        let c = &self.client;
        py.allow_threads(|| c.file_truncate(id, length))
            .map_err(|e| os_err(e, &self.path))
    }

    /// Makes the data durable by strata's rules (DEFAULT: journaled on a
    /// non-volatile tier or at the destination, as `fsync`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let id = self.id()?;
        let c = &self.client;
        py.allow_threads(|| c.file_sync(id))
            .map_err(|e| os_err(e, &self.path))
    }

    /// Closes the file (visible to every reader; durable only after
    /// `sync`, or once drained). Closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let id = self
            .id
            .lock()
            .map_err(|_| StrataError::new_err("file lock poisoned"))?
            .take();
        match id {
            None => Ok(()),
            Some(id) => {
                let c = &self.client;
                py.allow_threads(|| c.file_close(id))
                    .map_err(|e| os_err(e, &self.path))
            }
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "strata._native.File({:?}, persist={:?})",
            self.path, self.persist
        )
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Ok(Some(id)) = self.id.get_mut().map(|i| i.take()) {
            let _ = self.client.file_close(id);
        }
    }
}

/// Connects to a daemon: the one at `socket`, else `$STRATA_SOCKET`'s,
/// else the configured socket's (`config`: a configuration file; default
/// `$STRATA_CONFIG`, else the one derived from this machine). When none
/// answers there and `start` is true, starts a private daemon of that
/// configuration — hosted by `python` (`python -m strata._daemon`) — as
/// `strata run` does: shared by every process that connects this way and
/// stopped, after draining, when the last of them closes.
#[pyfunction]
#[pyo3(signature = (socket = None, config = None, start = true, python = None))]
fn connect(
    py: Python<'_>,
    socket: Option<&str>,
    config: Option<&str>,
    start: bool,
    python: Option<&str>,
) -> PyResult<Client> {
    let env_socket = std::env::var("STRATA_SOCKET")
        .ok()
        .filter(|s| !s.is_empty());
    let cfg = py
        .allow_threads(|| strata_config::Config::load_effective(config.map(std::path::Path::new)));
    let explicit = socket.map(str::to_string).or(env_socket);
    if let Some(s) = explicit {
        let c = py
            .allow_threads(|| strata_client::Client::connect_to(std::path::Path::new(&s)))
            .map_err(to_py)?;
        return Ok(Client {
            inner: std::sync::Mutex::new(Some(c)),
            socket: s,
            shared: std::sync::Mutex::new(None),
            config: cfg.ok(),
        });
    }
    let cfg = cfg.map_err(|e| InvalidArgument::new_err(format!("configuration: {e}")))?;
    let sock = cfg.resolved_socket_path();
    let mut shared = None;
    if start {
        if !cfg.cluster.hosts.is_empty() && !strata_launch::ping(&sock) {
            return Err(NoDaemon::new_err(format!(
                "no daemon answers at {} and the configuration names a cluster: start it with `strata cluster start`",
                sock.display()
            )));
        }
        let python = python
            .map(str::to_string)
            .ok_or_else(|| InvalidArgument::new_err("python: the interpreter to host a daemon"))?;
        let config = config.map(str::to_string);
        let daemon = move || {
            let mut cmd = std::process::Command::new(&python);
            cmd.args(["-m", "strata._daemon"]);
            if let Some(c) = &config {
                cmd.arg("--config").arg(c);
            }
            cmd
        };
        let cfg2 = cfg.clone();
        let u = py
            .allow_threads(move || strata_launch::SharedUse::acquire(&cfg2, daemon))
            .map_err(|e| NoDaemon::new_err(format!("{e:#}")))?;
        shared = Some(u);
    }
    let c = py
        .allow_threads(|| strata_client::Client::connect_to(&sock))
        .map_err(to_py)?;
    Ok(Client {
        inner: std::sync::Mutex::new(Some(c)),
        socket: sock.display().to_string(),
        shared: std::sync::Mutex::new(shared),
        config: Some(cfg),
    })
}

/// Starts a daemon of `config` detached, hosted by `python` (`python -m
/// strata._daemon`), as `strata daemon start` does: it runs until
/// `stop_daemon` (or `strata daemon stop`). Returns its socket.
#[pyfunction]
#[pyo3(signature = (python, config = None))]
fn start_daemon(py: Python<'_>, python: &str, config: Option<&str>) -> PyResult<String> {
    let cfg = strata_config::Config::load_effective(config.map(std::path::Path::new))
        .map_err(|e| InvalidArgument::new_err(format!("configuration: {e}")))?;
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-m", "strata._daemon"]);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    py.allow_threads(|| strata_launch::start_detached(cmd, &cfg))
        .map(|(s, _)| s.display().to_string())
        .map_err(|e| StrataError::new_err(format!("{e:#}")))
}

/// Stops the daemon of `config`, draining its DEFAULT files first (what
/// `strata daemon stop` does). Returns the outcome: "stopped", "kept"
/// (data the destination refused is kept on a non-volatile tier).
#[pyfunction]
#[pyo3(signature = (config = None))]
fn stop_daemon(py: Python<'_>, config: Option<&str>) -> PyResult<String> {
    let cfg = strata_config::Config::load_effective(config.map(std::path::Path::new))
        .map_err(|e| InvalidArgument::new_err(format!("configuration: {e}")))?;
    py.allow_threads(|| strata_launch::stop(&cfg))
        .map(|r| r.outcome)
        .map_err(|e| StrataError::new_err(format!("{e:#}")))
}

/// Runs a daemon of `config` (a file; default `$STRATA_CONFIG`, else the
/// one derived from this machine) in this process until it is stopped —
/// what `python -m strata._daemon` does for `connect()`. Blocks (the GIL
/// released); logs to stderr.
#[pyfunction]
#[pyo3(signature = (config = None))]
fn daemon_main(py: Python<'_>, config: Option<&str>) -> PyResult<()> {
    let cfg = strata_config::Config::load_effective(config.map(std::path::Path::new))
        .map_err(|e| InvalidArgument::new_err(format!("configuration: {e}")))?;
    if !cfg.cluster.hosts.is_empty() {
        return Err(InvalidArgument::new_err(
            "the configuration names a cluster: start its daemons with `strata cluster start`",
        ));
    }
    strata_launch::init_logging(&cfg);
    py.allow_threads(|| {
        strata_daemon::run_with(cfg, None, |s| {
            eprintln!("strata daemon listening on {}", s.display())
        })
    })
    .map_err(|e| StrataError::new_err(format!("the daemon stopped: {e:#}")))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(daemon_main, m)?)?;
    m.add_function(wrap_pyfunction!(start_daemon, m)?)?;
    m.add_function(wrap_pyfunction!(stop_daemon, m)?)?;
    m.add_class::<File>()?;
    m.add_class::<Client>()?;
    m.add_class::<Bucket>()?;
    for (name, t) in [
        ("StrataError", py.get_type::<StrataError>()),
        ("NotFound", py.get_type::<NotFound>()),
        ("AlreadyExists", py.get_type::<AlreadyExists>()),
        ("NoSpace", py.get_type::<NoSpace>()),
        ("NodeDown", py.get_type::<NodeDown>()),
        ("NoDaemon", py.get_type::<NoDaemon>()),
        ("InvalidArgument", py.get_type::<InvalidArgument>()),
        ("Closed", py.get_type::<Closed>()),
    ] {
        m.add(name, t)?;
    }
    Ok(())
}
