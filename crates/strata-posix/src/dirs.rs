//! Directory listings that include buffered files. A file created through
//! the adapter exists only in the daemon until the flusher writes it (never,
//! in SCRATCH mode), so a `DIR*` of a tracked directory is served from a
//! snapshot taken at opendir/fdopendir (and again at rewinddir): the real
//! entries first, in the kernel's order, then the buffered files that are
//! direct children of the directory and were not among them
//! (`Client::file_list_dir`), as `DT_REG` entries whose `d_ino` is the file
//! id (what stat reports). Entries stay valid until closedir; telldir and
//! seekdir use the entry index.
//!
//! Untracked `DIR*`s pass straight through: one atomic load while no
//! tracked `DIR*` is open, a short spin-locked lookup otherwise.
//! glibc's scandir calls its internal readdir, so scandir/scandirat of a
//! tracked directory are re-implemented on top of the hooks here.

use std::collections::HashSet;
use std::os::raw::{c_char, c_int, c_long, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{dirent64, DIR};

use crate::path::{tracked_dir, tracked_dir_fd, AbsPath};
use crate::{client, errno, real, run, set_errno, trace};

/// Offset of d_name in `dirent64` (d_ino 8, d_off 8, d_reclen 2, d_type 1).
const NAME_OFF: usize = 19;

struct DirStream {
    /// The directory (absolute, normalised).
    path: String,
    /// Packed `dirent64` records, 8-byte aligned.
    buf: Vec<u64>,
    /// Byte offset of each entry in `buf`.
    offs: Vec<usize>,
    /// Index of the next entry readdir returns.
    pos: usize,
}

impl DirStream {
    fn push(&mut self, ino: u64, ty: u8, name: &[u8]) {
        let reclen = (NAME_OFF + name.len() + 1).div_ceil(8) * 8;
        let off = self.buf.len() * 8;
        self.buf.resize(self.buf.len() + reclen / 8, 0);
        let idx = self.offs.len() as i64;
        // SAFETY: `buf` is a Vec<u64> of buf.len()*8 initialised bytes; viewing them as u8 is always valid and aligned.
        let b = unsafe {
            std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut u8, self.buf.len() * 8)
        };
        let r = &mut b[off..off + reclen];
        r[0..8].copy_from_slice(&ino.to_ne_bytes());
        r[8..16].copy_from_slice(&(idx + 1).to_ne_bytes());
        r[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        r[18] = ty;
        r[NAME_OFF..NAME_OFF + name.len()].copy_from_slice(name);
        self.offs.push(off);
    }

    fn entry(&mut self, i: usize) -> *mut dirent64 {
        // SAFETY: offs[i] is the start of a record written by push, inside `buf`.
        unsafe { (self.buf.as_mut_ptr() as *mut u8).add(self.offs[i]) as *mut dirent64 }
    }

    /// Reads the real stream to its end, then adds the buffered files.
    /// Runs under the guard.
    unsafe fn fill(&mut self, d: *mut DIR) {
        self.buf.clear();
        self.offs.clear();
        self.pos = 0;
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        loop {
            let e = real::readdir64(d);
            if e.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            self.push((*e).d_ino, (*e).d_type, name);
            names.insert(name.to_vec());
        }
        let Ok(c) = client() else { return };
        let list = match c.file_list_dir(&self.path) {
            Ok(l) => l,
            Err(e) => {
                trace!("file_list_dir {}: {}", self.path, e);
                return;
            }
        };
        let mut extra = 0;
        for name in list {
            let nb = name.as_bytes();
            if nb.is_empty() || nb.contains(&b'/') || nb.len() > 255 || names.contains(nb) {
                continue;
            }
            let full = if self.path == "/" {
                format!("/{name}")
            } else {
                format!("{}/{name}", self.path)
            };
            // d_ino = the file id, as stat reports it
            let ino = match c.file_stat_path(&full) {
                Ok(Some(a)) => a.id,
                Ok(None) => continue, // unlinked meanwhile
                Err(_) => 0,
            };
            self.push(ino, libc::DT_REG, nb);
            extra += 1;
        }
        trace!(
            "opendir {}: {} entries, {} of them buffered only",
            self.path,
            self.offs.len(),
            extra
        );
    }
}

// DIR* → stream of the tracked directories (a spin lock; reset in a fork child).
pub static DIRS_LOCK: AtomicBool = AtomicBool::new(false);
static DIRS_COUNT: AtomicUsize = AtomicUsize::new(0);
static mut DIRS: Vec<(usize, *mut DirStream)> = Vec::new();

fn with_dirs<R>(f: impl FnOnce(&mut Vec<(usize, *mut DirStream)>) -> R) -> R {
    while DIRS_LOCK.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    // SAFETY: the table is only touched with its spin lock held (taken above), so no other reference exists.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(DIRS) });
    DIRS_COUNT.store(
        // SAFETY: the table is only touched with its spin lock held (taken above), so no other reference exists.
        unsafe { (*std::ptr::addr_of!(DIRS)).len() },
        Ordering::Release,
    );
    DIRS_LOCK.store(false, Ordering::Release);
    r
}

#[inline]
fn lookup(d: *mut DIR) -> Option<*mut DirStream> {
    if DIRS_COUNT.load(Ordering::Acquire) == 0 || d.is_null() || crate::guarded() {
        return None;
    }
    with_dirs(|v| v.iter().find(|e| e.0 == d as usize).map(|e| e.1))
}

/// Takes the snapshot of a freshly opened tracked directory stream.
unsafe fn adopt(d: *mut DIR, abs: AbsPath) -> *mut DIR {
    let Some(path) = abs.as_str().map(str::to_string) else {
        return d;
    };
    let e = errno();
    let ds = run(|| {
        let mut ds = Box::new(DirStream {
            path,
            buf: Vec::new(),
            offs: Vec::new(),
            pos: 0,
        });
        ds.fill(d);
        Ok(Box::into_raw(ds) as isize)
    }) as *mut DirStream;
    if !ds.is_null() && ds as isize != -1 {
        with_dirs(|v| v.push((d as usize, ds)));
    }
    set_errno(e);
    d
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let d = real::opendir(path);
    if d.is_null() {
        return d;
    }
    match tracked_dir(libc::AT_FDCWD, path) {
        Some(abs) => adopt(d, abs),
        None => d,
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let d = real::fdopendir(fd);
    if d.is_null() {
        return d;
    }
    match tracked_dir_fd(fd) {
        Some(abs) => adopt(d, abs),
        None => d,
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut dirent64 {
    readdir64(d)
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    match lookup(d) {
        None => real::readdir64(d),
        Some(ds) => {
            let ds = &mut *ds;
            if ds.pos < ds.offs.len() {
                ds.pos += 1;
                ds.entry(ds.pos - 1)
            } else {
                std::ptr::null_mut()
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    d: *mut DIR,
    e: *mut dirent64,
    res: *mut *mut dirent64,
) -> c_int {
    readdir64_r(d, e, res)
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut DIR,
    e: *mut dirent64,
    res: *mut *mut dirent64,
) -> c_int {
    match lookup(d) {
        None => real::readdir64_r(d, e, res),
        Some(_) => {
            let r = readdir64(d);
            if r.is_null() {
                *res = std::ptr::null_mut();
            } else {
                let len = ((*r).d_reclen as usize).min(std::mem::size_of::<dirent64>());
                std::ptr::copy_nonoverlapping(r as *const u8, e as *mut u8, len);
                *res = e;
            }
            0
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if DIRS_COUNT.load(Ordering::Acquire) != 0 && !d.is_null() {
        let ds = with_dirs(|v| {
            v.iter()
                .position(|e| e.0 == d as usize)
                .map(|i| v.swap_remove(i).1)
        });
        if let Some(ds) = ds {
            drop(Box::from_raw(ds));
        }
    }
    real::closedir(d)
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    real::rewinddir(d);
    if let Some(ds) = lookup(d) {
        let e = errno();
        run(|| {
            (*ds).fill(d);
            Ok(0)
        });
        set_errno(e);
    }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, loc: c_long) {
    match lookup(d) {
        None => real::seekdir(d, loc),
        Some(ds) => (*ds).pos = (loc.max(0) as usize).min((*ds).offs.len()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    match lookup(d) {
        None => real::telldir(d),
        Some(ds) => (*ds).pos as c_long,
    }
}

// ---------------------------------------------------------------------------
// scandir

type Filter = unsafe extern "C" fn(*const dirent64) -> c_int;
type Compar = unsafe extern "C" fn(*const c_void, *const c_void) -> c_int;

/// glibc's scandir over an opened tracked stream (closed here).
unsafe fn scan(d: *mut DIR, list: *mut *mut *mut dirent64, filter: usize, compar: usize) -> c_int {
    let filter: Option<Filter> = if filter == 0 {
        None
    } else {
        Some(std::mem::transmute::<usize, Filter>(filter))
    };
    let mut v: Vec<*mut dirent64> = Vec::new();
    let mut failed = 0;
    loop {
        let e = readdir64(d);
        if e.is_null() {
            break;
        }
        if let Some(f) = filter {
            if f(e) == 0 {
                continue;
            }
        }
        let len = (*e).d_reclen as usize;
        let p = libc::malloc(len) as *mut dirent64;
        if p.is_null() {
            failed = libc::ENOMEM;
            break;
        }
        std::ptr::copy_nonoverlapping(e as *const u8, p as *mut u8, len);
        v.push(p);
    }
    closedir(d);
    let arr = if failed == 0 {
        libc::malloc(v.len().max(1) * std::mem::size_of::<*mut dirent64>()) as *mut *mut dirent64
    } else {
        std::ptr::null_mut()
    };
    if arr.is_null() {
        for p in v {
            libc::free(p as *mut c_void);
        }
        set_errno(libc::ENOMEM);
        return -1;
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
    if compar != 0 && v.len() > 1 {
        let cmp: Compar = std::mem::transmute::<usize, Compar>(compar);
        libc::qsort(
            arr as *mut c_void,
            v.len(),
            std::mem::size_of::<*mut dirent64>(),
            Some(cmp),
        );
    }
    *list = arr;
    v.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: usize,
    compar: usize,
) -> c_int {
    scandir64(path, list, filter, compar)
}

#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: usize,
    compar: usize,
) -> c_int {
    if tracked_dir(libc::AT_FDCWD, path).is_none() {
        return real::scandir64(path, list, filter, compar);
    }
    let d = opendir(path);
    if d.is_null() {
        return -1;
    }
    scan(d, list, filter, compar)
}

#[no_mangle]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: usize,
    compar: usize,
) -> c_int {
    scandirat64(dirfd, path, list, filter, compar)
}

#[no_mangle]
pub unsafe extern "C" fn scandirat64(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: usize,
    compar: usize,
) -> c_int {
    if tracked_dir(dirfd, path).is_none() {
        return real::scandirat64(dirfd, path, list, filter, compar);
    }
    let fd = real::openat(
        dirfd,
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        return -1;
    }
    crate::set_kind(fd, crate::K_UNTRACKED);
    let d = fdopendir(fd);
    if d.is_null() {
        let e = errno();
        real::close(fd);
        set_errno(e);
        return -1;
    }
    scan(d, list, filter, compar)
}

// ---------------------------------------------------------------------------
// rmdir: a directory holding buffered files is not empty

/// Err(ENOTEMPTY) when buffered files live directly in the directory.
unsafe fn check_empty(abs: &AbsPath) -> Result<(), c_int> {
    let Some(p) = abs.as_str() else { return Ok(()) };
    let Ok(c) = client() else { return Ok(()) };
    match c.file_list_dir(p) {
        Ok(names) if !names.is_empty() => {
            trace!("rmdir {}: {} buffered files inside", p, names.len());
            Err(libc::ENOTEMPTY)
        }
        _ => Ok(()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    match crate::path::tracked_dir_at(libc::AT_FDCWD, path, crate::path::Last::NoFollow) {
        None => crate::path::rmdir_fix(real::rmdir(path), libc::AT_FDCWD, path),
        Some(abs) => run(|| {
            check_empty(&abs)?;
            crate::cvt(real::rmdir(path))
        }),
    }
}

/// unlinkat(AT_REMOVEDIR) of a tracked directory (called by the unlinkat hook).
pub(crate) unsafe fn rmdir_at(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match crate::path::tracked_dir_at(dirfd, path, crate::path::Last::NoFollow) {
        None => crate::path::rmdir_fix(real::unlinkat(dirfd, path, flags), dirfd, path),
        Some(abs) => run(|| {
            check_empty(&abs)?;
            crate::cvt(real::unlinkat(dirfd, path, flags))
        }),
    }
}
