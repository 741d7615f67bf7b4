//! The real (next) definitions of every intercepted function, resolved with
//! `dlsym(RTLD_NEXT)` by the library constructor (`resolve_all`). Before
//! that, a call falls back to the raw system call (`sys` entries) or, for
//! the few functions that have none (stdio, exec helpers, `remove`), resolves
//! that one function on the spot (`dl` entries: only reachable if another
//! library's constructor calls them before ours ran).
#![allow(non_upper_case_globals, clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_long, c_uint, c_void, mode_t, off64_t, size_t, ssize_t, FILE};
use std::sync::atomic::{AtomicUsize, Ordering};

unsafe fn dlnext(name: &'static str) -> usize {
    libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) as usize
}

macro_rules! reals {
    ($( $kind:ident fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(= $fb:expr)? ; )*) => {
        mod ptr {
            use std::sync::atomic::AtomicUsize;
            $( pub static $name: AtomicUsize = AtomicUsize::new(0); )*
        }
        /// Resolves every real function. Called once from the constructor.
        pub unsafe fn resolve_all() {
            $( ptr::$name.store(dlnext(concat!(stringify!($name), "\0")), Ordering::Release); )*
            resolve_variadic();
        }
        $(
            #[inline]
            pub unsafe fn $name($($a: $t),*) -> $r {
                let p = ptr::$name.load(Ordering::Acquire);
                if p != 0 {
                    let f: unsafe extern "C" fn($($t),*) -> $r = std::mem::transmute(p);
                    return f($($a),*);
                }
                reals!(@fallback $kind $name ($($a: $t),*) -> $r $(= $fb)?)
            }
        )*
    };
    (@fallback sys $name:ident ($($a:ident : $t:ty),*) -> $r:ty = $fb:expr) => { $fb };
    (@fallback dl $name:ident ($($a:ident : $t:ty),*) -> $r:ty) => {{
        let p = dlnext(concat!(stringify!($name), "\0"));
        ptr::$name.store(p, Ordering::Release);
        if p == 0 {
            *libc::__errno_location() = libc::ENOSYS;
            std::process::abort();
        }
        let f: unsafe extern "C" fn($($t),*) -> $r = std::mem::transmute(p);
        f($($a),*)
    }};
}

macro_rules! sc {
    ($ty:ty, $nr:expr $(, $arg:expr)*) => { libc::syscall($nr $(, $arg)*) as $ty };
}

reals! {
    sys fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_read, fd, buf, n);
    sys fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_write, fd, buf, n);
    sys fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t = sc!(ssize_t, libc::SYS_pread64, fd, buf, n, off);
    sys fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t = sc!(ssize_t, libc::SYS_pwrite64, fd, buf, n, off);
    sys fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = sc!(ssize_t, libc::SYS_readv, fd, iov, cnt);
    sys fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = sc!(ssize_t, libc::SYS_writev, fd, iov, cnt);
    sys fn preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = sc!(ssize_t, libc::SYS_preadv, fd, iov, cnt, off, 0);
    sys fn pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = sc!(ssize_t, libc::SYS_pwritev, fd, iov, cnt, off, 0);
    sys fn preadv64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t, fl: c_int) -> ssize_t = sc!(ssize_t, libc::SYS_preadv2, fd, iov, cnt, off, 0, fl);
    sys fn pwritev64v2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t, fl: c_int) -> ssize_t = sc!(ssize_t, libc::SYS_pwritev2, fd, iov, cnt, off, 0, fl);
    sys fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t = sc!(off64_t, libc::SYS_lseek, fd, off, whence);
    sys fn close(fd: c_int) -> c_int = sc!(c_int, libc::SYS_close, fd);
    sys fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int = sc!(c_int, libc::SYS_close_range, first, last, flags);
    sys fn closefrom(low: c_int) -> () = { let _ = sc!(c_int, libc::SYS_close_range, low, c_uint::MAX, 0); };
    sys fn fsync(fd: c_int) -> c_int = sc!(c_int, libc::SYS_fsync, fd);
    sys fn fdatasync(fd: c_int) -> c_int = sc!(c_int, libc::SYS_fdatasync, fd);
    sys fn ftruncate64(fd: c_int, len: off64_t) -> c_int = sc!(c_int, libc::SYS_ftruncate, fd, len);
    sys fn truncate64(path: *const c_char, len: off64_t) -> c_int = sc!(c_int, libc::SYS_truncate, path, len);
    sys fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int = sc!(c_int, libc::SYS_fallocate, fd, mode, off, len);
    dl fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int;
    sys fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int = sc!(c_int, libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, 0);
    sys fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int = sc!(c_int, libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW);
    sys fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int = sc!(c_int, libc::SYS_fstat, fd, buf);
    sys fn fstatat64(dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int = sc!(c_int, libc::SYS_newfstatat, dirfd, path, buf, flags);
    sys fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int = sc!(c_int, libc::SYS_statx, dirfd, path, flags, mask, buf);
    sys fn __xstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int = { let _ = ver; sc!(c_int, libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, 0) };
    sys fn __lxstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int = { let _ = ver; sc!(c_int, libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) };
    sys fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int = { let _ = ver; sc!(c_int, libc::SYS_fstat, fd, buf) };
    sys fn __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int = { let _ = ver; sc!(c_int, libc::SYS_newfstatat, dirfd, path, buf, flags) };
    sys fn access(path: *const c_char, mode: c_int) -> c_int = sc!(c_int, libc::SYS_faccessat, libc::AT_FDCWD, path, mode);
    sys fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int = sc!(c_int, libc::SYS_faccessat2, dirfd, path, mode, flags);
    dl fn euidaccess(path: *const c_char, mode: c_int) -> c_int;
    sys fn unlink(path: *const c_char) -> c_int = sc!(c_int, libc::SYS_unlinkat, libc::AT_FDCWD, path, 0);
    sys fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = sc!(c_int, libc::SYS_unlinkat, dirfd, path, flags);
    dl fn remove(path: *const c_char) -> c_int;
    sys fn rename(from: *const c_char, to: *const c_char) -> c_int = sc!(c_int, libc::SYS_renameat2, libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0);
    sys fn renameat(ofd: c_int, from: *const c_char, nfd: c_int, to: *const c_char) -> c_int = sc!(c_int, libc::SYS_renameat2, ofd, from, nfd, to, 0);
    sys fn renameat2(ofd: c_int, from: *const c_char, nfd: c_int, to: *const c_char, fl: c_uint) -> c_int = sc!(c_int, libc::SYS_renameat2, ofd, from, nfd, to, fl);
    sys fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int = sc!(c_int, libc::SYS_socket, domain, ty, proto);
    sys fn dup(fd: c_int) -> c_int = sc!(c_int, libc::SYS_dup, fd);
    sys fn dup2(fd: c_int, to: c_int) -> c_int = if fd == to { if sc!(c_int, libc::SYS_fcntl, fd, libc::F_GETFD) < 0 { -1 } else { fd } } else { sc!(c_int, libc::SYS_dup3, fd, to, 0) };
    sys fn dup3(fd: c_int, to: c_int, fl: c_int) -> c_int = sc!(c_int, libc::SYS_dup3, fd, to, fl);
    dl fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    dl fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t;
    sys fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, fl: c_int, fd: c_int, off: off64_t) -> *mut c_void = sc!(isize, libc::SYS_mmap, addr, len, prot, fl, fd, off) as *mut c_void;
    sys fn munmap(addr: *mut c_void, len: size_t) -> c_int = sc!(c_int, libc::SYS_munmap, addr, len);
    sys fn msync(addr: *mut c_void, len: size_t, fl: c_int) -> c_int = sc!(c_int, libc::SYS_msync, addr, len, fl);
    sys fn copy_file_range(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, len: size_t, fl: c_uint) -> ssize_t = sc!(ssize_t, libc::SYS_copy_file_range, fd_in, off_in, fd_out, off_out, len, fl);
    sys fn sendfile64(out_fd: c_int, in_fd: c_int, off: *mut off64_t, count: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_sendfile, out_fd, in_fd, off, count);
    sys fn splice(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, len: size_t, fl: c_uint) -> ssize_t = sc!(ssize_t, libc::SYS_splice, fd_in, off_in, fd_out, off_out, len, fl);
    sys fn fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int = sc!(c_int, libc::SYS_fstatfs, fd, buf);
    sys fn statfs64(path: *const c_char, buf: *mut libc::statfs64) -> c_int = sc!(c_int, libc::SYS_statfs, path, buf);
    sys fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, fl: c_uint) -> c_int = sc!(c_int, libc::SYS_sync_file_range, fd, off, n, fl);
    sys fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_readahead, fd, off, n);
    dl fn posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int;
    sys fn chdir(path: *const c_char) -> c_int = sc!(c_int, libc::SYS_chdir, path);
    sys fn fchdir(fd: c_int) -> c_int = sc!(c_int, libc::SYS_fchdir, fd);
    sys fn umask(mask: mode_t) -> mode_t = sc!(mode_t, libc::SYS_umask, mask);
    sys fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int = sc!(c_int, libc::SYS_execve, path, argv, envp);
    dl fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    dl fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, acts: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    dl fn posix_spawnp(pid: *mut libc::pid_t, file: *const c_char, acts: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    dl fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    dl fn aio_read(cb: *mut c_void) -> c_int;
    dl fn aio_read64(cb: *mut c_void) -> c_int;
    dl fn aio_write(cb: *mut c_void) -> c_int;
    dl fn aio_write64(cb: *mut c_void) -> c_int;
    dl fn aio_fsync(op: c_int, cb: *mut c_void) -> c_int;
    dl fn aio_fsync64(op: c_int, cb: *mut c_void) -> c_int;
    dl fn aio_error(cb: *const c_void) -> c_int;
    dl fn aio_error64(cb: *const c_void) -> c_int;
    dl fn aio_return(cb: *const c_void) -> ssize_t;
    dl fn aio_return64(cb: *const c_void) -> ssize_t;
    dl fn aio_cancel(fd: c_int, cb: *mut c_void) -> c_int;
    dl fn aio_cancel64(fd: c_int, cb: *mut c_void) -> c_int;
    dl fn aio_suspend(list: *const *const c_void, n: c_int, t: *const libc::timespec) -> c_int;
    dl fn aio_suspend64(list: *const *const c_void, n: c_int, t: *const libc::timespec) -> c_int;
    dl fn lio_listio(mode: c_int, list: *const *mut c_void, n: c_int, sig: *mut c_void) -> c_int;
    dl fn lio_listio64(mode: c_int, list: *const *mut c_void, n: c_int, sig: *mut c_void) -> c_int;
    dl fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE;
    dl fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE;
    dl fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE;
    dl fn fclose(f: *mut FILE) -> c_int;
    dl fn fileno(f: *mut FILE) -> c_int;
    dl fn fileno_unlocked(f: *mut FILE) -> c_int;
    sys fn chmod(path: *const c_char, mode: mode_t) -> c_int = sc!(c_int, libc::SYS_fchmodat, libc::AT_FDCWD, path, mode);
    sys fn fchmod(fd: c_int, mode: mode_t) -> c_int = sc!(c_int, libc::SYS_fchmod, fd, mode);
    dl fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int;
    sys fn fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int = sc!(c_int, libc::SYS_fchownat, dirfd, path, uid, gid, flags);
    sys fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int = sc!(c_int, libc::SYS_fchown, fd, uid, gid);
    sys fn utimensat(dirfd: c_int, path: *const c_char, ts: *const libc::timespec, flags: c_int) -> c_int = sc!(c_int, libc::SYS_utimensat, dirfd, path, ts, flags);
    sys fn futimens(fd: c_int, ts: *const libc::timespec) -> c_int = sc!(c_int, libc::SYS_utimensat, fd, std::ptr::null::<c_char>(), ts, 0);
    dl fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int;
    dl fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int;
    dl fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int;
    dl fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int;
    sys fn fsetxattr(fd: c_int, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int = sc!(c_int, libc::SYS_fsetxattr, fd, name, v, n, fl);
    sys fn setxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int = sc!(c_int, libc::SYS_setxattr, path, name, v, n, fl);
    sys fn lsetxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int = sc!(c_int, libc::SYS_lsetxattr, path, name, v, n, fl);
    sys fn getxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_getxattr, path, name, v, n);
    sys fn lgetxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_lgetxattr, path, name, v, n);
    sys fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_listxattr, path, list, n);
    sys fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_llistxattr, path, list, n);
    sys fn rmdir(path: *const c_char) -> c_int = sc!(c_int, libc::SYS_unlinkat, libc::AT_FDCWD, path, libc::AT_REMOVEDIR);
    sys fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int = sc!(c_int, libc::SYS_mkdirat, dirfd, path, mode);
    sys fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int = sc!(c_int, libc::SYS_mknodat, dirfd, path, mode, dev);
    sys fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int = sc!(c_int, libc::SYS_symlinkat, target, dirfd, path);
    sys fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t = sc!(ssize_t, libc::SYS_readlinkat, dirfd, path, buf, n);
    sys fn linkat(ofd: c_int, from: *const c_char, nfd: c_int, to: *const c_char, fl: c_int) -> c_int = sc!(c_int, libc::SYS_linkat, ofd, from, nfd, to, fl);
    dl fn setuid(uid: libc::uid_t) -> c_int;
    dl fn seteuid(uid: libc::uid_t) -> c_int;
    dl fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int;
    dl fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int;
    dl fn opendir(path: *const c_char) -> *mut libc::DIR;
    dl fn fdopendir(fd: c_int) -> *mut libc::DIR;
    dl fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64;
    dl fn readdir64_r(d: *mut libc::DIR, e: *mut libc::dirent64, res: *mut *mut libc::dirent64) -> c_int;
    dl fn closedir(d: *mut libc::DIR) -> c_int;
    dl fn rewinddir(d: *mut libc::DIR) -> ();
    dl fn seekdir(d: *mut libc::DIR, loc: c_long) -> ();
    dl fn telldir(d: *mut libc::DIR) -> c_long;
    dl fn scandir64(path: *const c_char, list: *mut *mut *mut libc::dirent64, filter: usize, compar: usize) -> c_int;
    dl fn scandirat64(dirfd: c_int, path: *const c_char, list: *mut *mut *mut libc::dirent64, filter: usize, compar: usize) -> c_int;
}

static open_p: AtomicUsize = AtomicUsize::new(0);
static openat_p: AtomicUsize = AtomicUsize::new(0);
static fcntl_p: AtomicUsize = AtomicUsize::new(0);

unsafe fn resolve_variadic() {
    open_p.store(dlnext("open64\0"), Ordering::Release);
    openat_p.store(dlnext("openat64\0"), Ordering::Release);
    fcntl_p.store(dlnext("fcntl64\0"), Ordering::Release);
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

pub unsafe fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let p = open_p.load(Ordering::Acquire);
    if p != 0 {
        let f: OpenFn = std::mem::transmute(p);
        return f(path, flags, mode);
    }
    sc!(c_int, libc::SYS_openat, libc::AT_FDCWD, path, flags, mode)
}

pub unsafe fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let p = openat_p.load(Ordering::Acquire);
    if p != 0 {
        let f: OpenatFn = std::mem::transmute(p);
        return f(dirfd, path, flags, mode);
    }
    sc!(c_int, libc::SYS_openat, dirfd, path, flags, mode)
}

pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let p = fcntl_p.load(Ordering::Acquire);
    if p != 0 {
        let f: FcntlFn = std::mem::transmute(p);
        return f(fd, cmd, arg);
    }
    sc!(c_int, libc::SYS_fcntl, fd, cmd, arg)
}
