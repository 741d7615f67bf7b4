//! exec: keep LD_PRELOAD and STRATA_* when the new environment drops them

#[allow(unused_imports)]
use super::*;

extern "C" {
    static mut environ: *const *const c_char;
}

pub(super) unsafe fn env_has(envp: *const *const c_char, name_eq: &[u8]) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut p = envp;
    while !(*p).is_null() {
        if crate::c_str(*p).starts_with(name_eq) {
            return true;
        }
        p = p.add(1);
    }
    false
}

/// None = `envp` already carries everything (no allocation).
pub(super) unsafe fn fixed_env(envp: *const *const c_char) -> Option<Vec<*const c_char>> {
    if !crate::ready() {
        return None;
    }
    let keep = &crate::state().env_keep;
    let mut missing = Vec::new();
    for k in keep {
        let b = k.as_bytes();
        let eq = b
            .iter()
            .position(|&c| c == b'=')
            .map(|i| i + 1)
            .unwrap_or(b.len());
        if !env_has(envp, &b[..eq]) {
            missing.push(k.as_ptr());
        }
    }
    if missing.is_empty() {
        return None;
    }
    let mut v = Vec::new();
    if !envp.is_null() {
        let mut p = envp;
        while !(*p).is_null() {
            v.push(*p);
            p = p.add(1);
        }
    }
    v.extend(missing);
    v.push(std::ptr::null());
    Some(v)
}

/// Makes a buffered file executable by the kernel before `execve`,
/// `posix_spawn` or `dlopen` of `path` (issue 12 item 9: a program just
/// written under `strata run` was "required file not found"):
/// - not buffered: `Ok(None)`, the kernel finds it as it is;
/// - DEFAULT: its bytes are flushed and synced at the destination, `Ok(None)`;
/// - SCRATCH/WORKFLOW (never at the destination): a memfd holding its bytes
///   and mode, `Ok(Some(fd))`, to be run as `/proc/self/fd/<fd>` (inherited,
///   so an interpreter started for a `#!` script can open it too).
pub(super) unsafe fn exec_prepare(path: *const c_char) -> Result<Option<c_int>, c_int> {
    let Some(t) = tracked_path(libc::AT_FDCWD, path) else {
        return Ok(None);
    };
    crate::run_raw(Err(libc::EIO), || {
        let Ok(c) = cl() else { return Ok(None) };
        let p = t.abs.as_str().ok_or(libc::EINVAL)?;
        let Some(a) = c.file_stat_path(p).map_err(os)? else {
            return Ok(None);
        };
        if a.persist == Persist::Default {
            if a.dirty {
                c.file_sync_dest(a.id, false).map_err(os)?;
            }
            trace!("exec {}: made real at the destination", p);
            return Ok(None);
        }
        if a.mode & 0o111 == 0 {
            return Err(libc::EACCES);
        }
        let fd = memfd_copy(c, a.id, a.size, c"strata-exec", 0)?;
        real::fchmod(fd, a.mode as mode_t);
        trace!("exec {}: from a private copy (fd {})", p, fd);
        Ok(Some(fd))
    })
}

/// `/proc/self/fd/<fd>` as a C string.
pub(crate) fn fd_path(fd: c_int) -> std::ffi::CString {
    std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

/// Runs `f` with the path to execute: `path` itself, or the private copy.
pub(super) unsafe fn with_exec_path(
    path: *const c_char,
    f: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    // (not in a vfork child: it shares the parent's memory and backings)
    if crate::ready() && !crate::guarded() && crate::own_process() {
        // backings with no descriptor or mapping left are let go now
        if let Err(e) = crate::run_raw(Err(libc::EIO), || crate::mapped::sync_backings(None)) {
            set_errno(e);
            return -1;
        }
    }
    match exec_prepare(path) {
        Err(e) => {
            set_errno(e);
            -1
        }
        Ok(None) => f(path),
        Ok(Some(fd)) => {
            let p = fd_path(fd);
            let r = f(p.as_ptr());
            let e = errno();
            real::close(fd);
            set_errno(e);
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let v = fixed_env(envp);
    let envp = v.as_ref().map_or(envp, |v| v.as_ptr());
    with_exec_path(path, |p| real::execve(p, argv, envp))
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    execve(path, argv, environ)
}

/// A file name with a slash is a path (no PATH search).
pub(super) unsafe fn has_slash(file: *const c_char) -> bool {
    !file.is_null() && crate::c_str(file).contains(&b'/')
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if has_slash(file) {
        return execve(file, argv, envp);
    }
    let v = fixed_env(envp);
    real::execvpe(file, argv, v.as_ref().map_or(envp, |v| v.as_ptr()))
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(file, argv, environ)
}

/// glibc's posix_spawn execs with its internal `__execve`, which no hook
/// sees: the file is prepared and the environment fixed here.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let v = fixed_env(envp);
    let envp = v.as_ref().map_or(envp, |v| v.as_ptr());
    match exec_prepare(path) {
        Err(e) => e,
        Ok(None) => real::posix_spawn(pid, path, acts, attr, argv, envp),
        Ok(Some(fd)) => {
            let p = fd_path(fd);
            let r = real::posix_spawn(pid, p.as_ptr(), acts, attr, argv, envp);
            real::close(fd);
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if has_slash(file) {
        return posix_spawn(pid, file, acts, attr, argv, envp);
    }
    let v = fixed_env(envp);
    real::posix_spawnp(
        pid,
        file,
        acts,
        attr,
        argv,
        v.as_ref().map_or(envp, |v| v.as_ptr()),
    )
}

/// A shared object just written under strata: made real (DEFAULT) or loaded
/// from a private copy (SCRATCH/WORKFLOW) before the loader opens it.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    if file.is_null() || !crate::ready() || crate::guarded() || !has_slash(file) {
        return real::dlopen(file, mode);
    }
    let mut out: *mut c_void = std::ptr::null_mut();
    let r = with_exec_path(file, |p| {
        out = real::dlopen(p, mode);
        0
    });
    if r != 0 {
        return std::ptr::null_mut();
    }
    out
}
