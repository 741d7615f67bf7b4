//! POSIX AIO on buffered files (issue 12 item 24). glibc performs AIO with
//! helper threads that call its internal `pread`/`pwrite`, which no hook
//! sees: Open MPI's MPI-IO (`MPI_File_iwrite`, …) wrote straight into the
//! placeholder and the data was lost. A request on a tracked descriptor is
//! therefore performed here, synchronously, through the adapter's own
//! `pread64`/`pwrite64`/`fsync` (POSIX allows completion before the call
//! returns); its result goes into the control block's `__error_code` /
//! `__return_value` exactly where glibc keeps them, so `aio_error`,
//! `aio_return` and `aio_suspend` answer correctly whichever library's
//! version a program reaches, and the notification (`SIGEV_SIGNAL`,
//! `SIGEV_THREAD`) is delivered as glibc would. Requests on other
//! descriptors go to glibc untouched.

use libc::{c_int, c_void, off64_t, size_t, ssize_t};

use crate::{hooks, real};

/// glibc's `union sigval` + `struct sigevent` (64 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy)]
struct SigEvent {
    value: usize,
    signo: c_int,
    notify: c_int,
    function: usize,
    attribute: usize,
    _pad: [u8; 32],
}

/// glibc's `struct aiocb` / `struct aiocb64` on LP64 (identical layouts).
#[repr(C)]
pub struct Aiocb {
    fildes: c_int,
    lio_opcode: c_int,
    reqprio: c_int,
    buf: *mut c_void,
    nbytes: size_t,
    sigevent: SigEvent,
    next_prio: *mut Aiocb,
    abs_prio: c_int,
    policy: c_int,
    error_code: c_int,
    return_value: ssize_t,
    offset: off64_t,
    _reserved: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<SigEvent>() == 64);
const _: () = assert!(std::mem::size_of::<Aiocb>() == 168);
const _: () = assert!(std::mem::offset_of!(Aiocb, error_code) == 112);
const _: () = assert!(std::mem::offset_of!(Aiocb, offset) == 128);

/// Whether `cb`'s descriptor is one of ours.
unsafe fn ours(cb: *const Aiocb) -> bool {
    !cb.is_null() && crate::tracked_fd((*cb).fildes).is_some()
}

/// Delivers `ev` as glibc's AIO would on completion.
unsafe fn notify(ev: SigEvent) {
    match ev.notify {
        libc::SIGEV_SIGNAL => {
            let v = libc::sigval {
                sival_ptr: ev.value as *mut c_void,
            };
            libc::sigqueue(libc::getpid(), ev.signo, v);
        }
        libc::SIGEV_THREAD if ev.function != 0 => {
            let f: extern "C" fn(usize) = std::mem::transmute(ev.function);
            let v = ev.value;
            // A thread of its own, as glibc does (the callback may block).
            if std::thread::Builder::new()
                .name("strata-aio-notify".into())
                .spawn(move || f(v))
                .is_err()
            {
                f(v);
            }
        }
        _ => {}
    }
}

/// Performs one request on a tracked descriptor and records its result.
unsafe fn perform(cb: *mut Aiocb, op: c_int) {
    let c = &mut *cb;
    let r: ssize_t = match op {
        libc::LIO_READ => hooks::pread64(c.fildes, c.buf, c.nbytes, c.offset),
        libc::LIO_WRITE => hooks::pwrite64(c.fildes, c.buf, c.nbytes, c.offset),
        libc::O_SYNC => hooks::fsync(c.fildes) as ssize_t,
        libc::O_DSYNC => hooks::fdatasync(c.fildes) as ssize_t,
        _ => {
            c.error_code = libc::EINVAL;
            c.return_value = -1;
            return;
        }
    };
    // Short transfers are legal AIO results; the count is what aio_return says.
    if r < 0 {
        c.error_code = *libc::__errno_location();
        c.return_value = -1;
    } else {
        c.error_code = 0;
        c.return_value = r;
    }
}

unsafe fn submit(cb: *mut Aiocb, op: c_int) -> c_int {
    if (*cb).nbytes > isize::MAX as size_t
        || (op != libc::O_SYNC && op != libc::O_DSYNC && (*cb).offset < 0)
    {
        *libc::__errno_location() = libc::EINVAL;
        return -1;
    }
    perform(cb, op);
    notify((*cb).sigevent);
    0
}

macro_rules! aio_rw {
    ($($name:ident => $real:ident, $op:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut Aiocb) -> c_int {
            if ours(cb) {
                return submit(cb, $op);
            }
            real::$real(cb as *mut c_void)
        }
    )*};
}

aio_rw! {
    aio_read => aio_read, libc::LIO_READ;
    aio_read64 => aio_read64, libc::LIO_READ;
    aio_write => aio_write, libc::LIO_WRITE;
    aio_write64 => aio_write64, libc::LIO_WRITE;
}

macro_rules! aio_fsync_fns {
    ($($name:ident => $real:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(op: c_int, cb: *mut Aiocb) -> c_int {
            if ours(cb) {
                if op != libc::O_SYNC && op != libc::O_DSYNC {
                    *libc::__errno_location() = libc::EINVAL;
                    return -1;
                }
                return submit(cb, op);
            }
            real::$real(op, cb as *mut c_void)
        }
    )*};
}

aio_fsync_fns! {
    aio_fsync => aio_fsync;
    aio_fsync64 => aio_fsync64;
}

macro_rules! aio_result_fns {
    ($($name:ident => $real:ident, $ret:ty, $field:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *const Aiocb) -> $ret {
            if ours(cb) {
                return (*cb).$field as $ret;
            }
            real::$real(cb as *const c_void)
        }
    )*};
}

aio_result_fns! {
    aio_error => aio_error, c_int, error_code;
    aio_error64 => aio_error64, c_int, error_code;
    aio_return => aio_return, ssize_t, return_value;
    aio_return64 => aio_return64, ssize_t, return_value;
}

macro_rules! aio_cancel_fns {
    ($($name:ident => $real:ident;)*) => {$(
        /// Our requests are complete when submitted: nothing to cancel.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cb: *mut Aiocb) -> c_int {
            let fd_ours = crate::tracked_fd(fd).is_some();
            if fd_ours && (cb.is_null() || (*cb).fildes == fd) {
                return libc::AIO_ALLDONE;
            }
            real::$real(fd, cb as *mut c_void)
        }
    )*};
}

aio_cancel_fns! {
    aio_cancel => aio_cancel;
    aio_cancel64 => aio_cancel64;
}

/// Most entries of one `lio_listio` call (glibc: AIO_LISTIO_MAX is unbounded;
/// the kernel's IOV_MAX is a sane bound for one call's bookkeeping here).
const LIO_ENTRIES_MAX: c_int = 1 << 16;

macro_rules! lio_fns {
    ($($name:ident => $real:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(mode: c_int, list: *const *mut Aiocb, nent: c_int, sig: *mut c_void) -> c_int {
            if list.is_null() || !(0..=LIO_ENTRIES_MAX).contains(&nent) || (mode != libc::LIO_WAIT && mode != libc::LIO_NOWAIT) {
                *libc::__errno_location() = libc::EINVAL;
                return -1;
            }
            let entries = std::slice::from_raw_parts(list, nent as usize);
            if !entries.iter().any(|&cb| ours(cb)) {
                return real::$real(mode, list as *const *mut c_void, nent, sig);
            }
            // Ours now, in list order; the rest to glibc (which notifies
            // when those finish: ours are finished already).
            let mut rest: Vec<*mut c_void> = Vec::new();
            let mut failed = false;
            for &cb in entries {
                if cb.is_null() {
                    continue;
                }
                if ours(cb) {
                    let op = (*cb).lio_opcode;
                    if op == libc::LIO_NOP {
                        continue;
                    }
                    perform(cb, op);
                    failed |= (*cb).error_code != 0;
                } else {
                    rest.push(cb as *mut c_void);
                }
            }
            if !rest.is_empty() {
                let r = real::$real(mode, rest.as_ptr(), rest.len() as c_int, sig);
                if r != 0 {
                    return r;
                }
            } else if mode == libc::LIO_NOWAIT && !sig.is_null() {
                notify(*(sig as *const SigEvent));
            }
            if failed && mode == libc::LIO_WAIT {
                *libc::__errno_location() = libc::EIO;
                return -1;
            }
            0
        }
    )*};
}

lio_fns! {
    lio_listio => lio_listio;
    lio_listio64 => lio_listio64;
}

macro_rules! aio_suspend_fns {
    ($($name:ident => $real:ident;)*) => {$(
        /// One of ours in the list is complete: return at once, as glibc does
        /// for any completed entry.
        #[no_mangle]
        pub unsafe extern "C" fn $name(list: *const *const Aiocb, nent: c_int, timeout: *const libc::timespec) -> c_int {
            if !list.is_null() && (0..=LIO_ENTRIES_MAX).contains(&nent) {
                let entries = std::slice::from_raw_parts(list, nent as usize);
                if entries.iter().any(|&cb| ours(cb)) {
                    return 0;
                }
            }
            real::$real(list as *const *const c_void, nent, timeout)
        }
    )*};
}

aio_suspend_fns! {
    aio_suspend => aio_suspend;
    aio_suspend64 => aio_suspend64;
}
