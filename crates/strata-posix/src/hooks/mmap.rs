//! mmap

#[allow(unused_imports)]
use super::*;

pub(super) unsafe fn mmap_tracked(
    t: Tfd,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> Result<isize, c_int> {
    if t.acc == libc::O_WRONLY {
        return Err(libc::EACCES);
    }
    let shared_write = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    if shared_write && t.acc != libc::O_RDWR {
        return Err(libc::EACCES);
    }
    let c = cl()?;
    // A file unlinked or replaced while open (an orphan: its record has a
    // hidden name) has no destination path any more: map a private copy of
    // its bytes, which is what this descriptor still reads.
    let orphan =
        t.persist == Persist::Default && c.file_path(t.id).map_err(os)?.starts_with('\u{1}');
    if shared_write {
        // the kernel's own file behind every descriptor (mapped.rs)
        return crate::mapped::map_shared(t, orphan, addr, len, prot, flags, off);
    }
    let fd = match t.persist {
        Persist::Default if !orphan => {
            // flush, then let the kernel map the destination itself
            c.file_sync_dest(t.id, false).map_err(os)?;
            // The destination now holds the bytes: pin its inode for this
            // process's read-through, as the mapping pins it for the kernel.
            let _ = c.pin_dest(t.id);
            let p = c.file_path(t.id).map_err(os)?;
            let cp = std::ffi::CString::new(p).map_err(|_| libc::EINVAL)?;
            cvt(real::open(
                cp.as_ptr(),
                if shared_write {
                    libc::O_RDWR
                } else {
                    libc::O_RDONLY
                } | libc::O_CLOEXEC,
                0,
            ))?
        }
        _ => {
            // SCRATCH / WORKFLOW never reach the destination: map a private copy
            let size = c.file_stat(t.id).map_err(os)?.size;
            memfd_copy(c, t.id, size, c"strata-map", libc::MFD_CLOEXEC)?
        }
    };
    let r = real::mmap64(addr, len, prot, flags, fd, off);
    let e = errno();
    real::close(fd);
    trace!(
        "mmap fd={} id={:x} len={} persist={:?}",
        t.fd,
        t.id,
        len,
        t.persist
    );
    if r == libc::MAP_FAILED {
        Err(e)
    } else {
        Ok(r as isize)
    }
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    mmap64(addr, len, prot, flags, fd, off)
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS != 0 {
        return real::mmap64(addr, len, prot, flags, fd, off);
    }
    match tracked_fd(fd) {
        None => real::mmap64(addr, len, prot, flags, fd, off),
        Some(t) => run(|| mmap_tracked(t, addr, len, prot, flags, off)) as *mut c_void,
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let r = real::munmap(addr, len);
    if r == 0 {
        crate::forget_good_pages();
    }
    if r == 0 && crate::ready() && !crate::guarded() {
        crate::mapped::unmapped(addr as usize, len);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let r = real::msync(addr, len, flags);
    if r != 0 || !crate::ready() || crate::guarded() {
        return r;
    }
    run(|| crate::mapped::msynced(addr as usize, len).map(|_| 0))
}
