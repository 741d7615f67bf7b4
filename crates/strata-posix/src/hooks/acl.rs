//! Access ACLs (cp -p, tar --acls set permissions with
//! setxattr("system.posix_acl_access")): a buffered file keeps the
//! permission bits the ACL implies.

#[allow(unused_imports)]
use super::*;

pub(super) const ACL_XATTR: &[u8] = b"system.posix_acl_access";

/// Permission bits of a POSIX ACL in its xattr form (version 2; entries of
/// tag u16, perm u16, id u32). None if malformed.
pub(super) fn acl_mode(v: &[u8]) -> Option<u32> {
    if v.len() < 4
        || u32::from_le_bytes(v[0..4].try_into().ok()?) != 2
        || !(v.len() - 4).is_multiple_of(8)
    {
        return None;
    }
    let (mut user, mut group, mut other, mut mask) = (None, None, None, None);
    for e in v[4..].chunks(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = (u16::from_le_bytes([e[2], e[3]]) & 7) as u32;
        match tag {
            0x01 => user = Some(perm),
            0x04 => group = Some(perm),
            0x10 => mask = Some(perm),
            0x20 => other = Some(perm),
            _ => {}
        }
    }
    Some(user? << 6 | mask.or(group)? << 3 | other?)
}

/// Ok(None) = not an access ACL of a buffered file: pass through.
pub(super) unsafe fn acl_set(
    id: u64,
    path: &str,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
) -> Result<Option<c_int>, c_int> {
    if crate::c_str(name) != ACL_XATTR || v.is_null() {
        return Ok(None);
    }
    let Some(bits) = acl_mode(std::slice::from_raw_parts(v as *const u8, n)) else {
        return Err(libc::EINVAL);
    };
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return Ok(None),
    };
    let Some(cur) = record_by(c, id, path)? else {
        return Ok(None);
    };
    let mode = (cur.mode & 0o7000) | bits;
    c.file_set_attr(
        cur.id,
        "",
        SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .map_err(os)?;
    trace!("acl -> chmod id={:x} {:o}", cur.id, mode);
    Ok(Some(0))
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    match tracked_fd(fd) {
        None => real::fsetxattr(fd, name, v, n, fl),
        Some(t) => {
            let mut pass = false;
            let r = run(|| match acl_set(t.id, "", name, v, n)? {
                Some(r) => Ok(r),
                None => {
                    pass = true;
                    Ok(0)
                }
            });
            if pass {
                real::fsetxattr(fd, name, v, n, fl)
            } else {
                r
            }
        }
    }
}

pub(super) unsafe fn setxattr_impl(
    path: *const c_char,
    last: Last,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fb: impl FnOnce() -> c_int,
) -> c_int {
    match tracked_path_at(libc::AT_FDCWD, path, last) {
        None => fb(),
        Some(t) => {
            let mut pass = false;
            let r = run(
                || match acl_set(0, t.abs.as_str().ok_or(libc::EINVAL)?, name, v, n)? {
                    Some(r) => Ok(r),
                    None => {
                        pass = true;
                        Ok(0)
                    }
                },
            );
            if pass {
                fb()
            } else {
                r
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    setxattr_impl(path, Last::Follow, name, v, n, || {
        real::setxattr(path, name, v, n, fl)
    })
}

#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    setxattr_impl(path, Last::NoFollow, name, v, n, || {
        real::lsetxattr(path, name, v, n, fl)
    })
}

/// getxattr/listxattr of a tracked path: the destination's answer, except
/// that a buffered file missing at the destination has no attributes
/// (ENODATA / an empty list) instead of not existing (ls -l asks for ACLs).
pub(super) unsafe fn xattr_read(
    path: *const c_char,
    last: Last,
    empty: ssize_t,
    real_op: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let r = real_op();
    if r >= 0 || errno() != libc::ENOENT {
        return r;
    }
    let Some(t) = tracked_path_at(libc::AT_FDCWD, path, last) else {
        return r;
    };
    if !buffered(&t) {
        set_errno(libc::ENOENT);
        return -1;
    }
    if empty < 0 {
        set_errno(libc::ENODATA);
    }
    empty
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    xattr_read(path, Last::Follow, -1, || real::getxattr(path, name, v, n))
}

#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    xattr_read(path, Last::NoFollow, -1, || {
        real::lgetxattr(path, name, v, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    xattr_read(path, Last::Follow, 0, || real::listxattr(path, list, n))
}

#[no_mangle]
pub unsafe extern "C" fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    xattr_read(path, Last::NoFollow, 0, || real::llistxattr(path, list, n))
}
