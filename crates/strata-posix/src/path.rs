//! Path resolution without allocation: absolute, lexically normalised paths
//! in a stack buffer (relative paths against the cached cwd or an `openat`
//! directory descriptor's /proc link), and the tracked-path test.

use std::ffi::OsStr;
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use strata_client::file::Persist;

pub const PATH_BYTES: usize = 4096;

/// An absolute, normalised path (no `.`/`..`/`//`, no trailing slash).
///
/// The buffer is not zeroed: every path operation of the adapter makes
/// several, and 4 KiB of `memset` each was a measurable share of a `stat`
/// (issue 18, t2s). Only `buf[..len]` is ever read, and it is always written
/// first (`push`, `fix_root`).
pub struct AbsPath {
    buf: RawBuf,
    len: usize,
}

impl AbsPath {
    fn new() -> AbsPath {
        AbsPath {
            buf: RawBuf::new(),
            len: 0,
        }
    }
    pub fn bytes(&self) -> &[u8] {
        // buf[..len] was written by push/fix_root before len grew over it
        self.buf.get(self.len)
    }
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.bytes()).ok()
    }
    pub fn as_path(&self) -> &std::path::Path {
        std::path::Path::new(OsStr::from_bytes(self.bytes()))
    }
    /// The byte before `len` (the caller checked len > 0).
    fn last_byte(&self) -> u8 {
        self.bytes()[self.len - 1]
    }
    fn put(&mut self, at: usize, src: &[u8]) {
        for (d, &b) in self.buf.0[at..at + src.len()].iter_mut().zip(src) {
            d.write(b);
        }
    }
    /// Appends `rel`'s components. False if it does not fit.
    fn push(&mut self, rel: &[u8]) -> bool {
        for comp in rel.split(|&c| c == b'/') {
            match comp {
                b"" | b"." => {}
                b".." => {
                    while self.len > 0 && self.last_byte() != b'/' {
                        self.len -= 1;
                    }
                    if self.len > 0 {
                        self.len -= 1; // the slash
                    }
                }
                c => {
                    if self.len + 1 + c.len() > PATH_BYTES {
                        return false;
                    }
                    self.put(self.len, b"/");
                    self.put(self.len + 1, c);
                    self.len += 1 + c.len();
                }
            }
        }
        true
    }
    /// The root is the empty buffer internally; present it as "/".
    fn fix_root(&mut self) {
        if self.len == 0 {
            self.put(0, b"/");
            self.len = 1;
        }
    }
}

/// Normalises an absolute (or cwd-relative) path into an owned byte string.
pub fn normalise_owned(p: &OsStr) -> Vec<u8> {
    let mut a = AbsPath::new();
    let b = p.as_bytes();
    if !b.starts_with(b"/") {
        copy_cwd(&mut a);
    }
    a.push(b);
    a.fix_root();
    a.bytes().to_vec()
}

// Cached current directory (refreshed by chdir/fchdir), behind a spin lock
// (reset in a fork child).
pub static CWD_LOCK: AtomicBool = AtomicBool::new(false);
static mut CWD: [u8; PATH_BYTES] = [0; PATH_BYTES];
static mut CWD_LEN: usize = 0;

fn lock_cwd() {
    while CWD_LOCK.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
}

pub fn refresh_cwd() {
    let mut b = [0u8; PATH_BYTES];
    // SAFETY: `b` is a live buffer of PATH_BYTES bytes; getcwd writes at most that many.
    let r = unsafe { libc::getcwd(b.as_mut_ptr() as *mut c_char, PATH_BYTES) };
    if r.is_null() {
        return;
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(0);
    lock_cwd();
    // SAFETY: CWD is written only while CWD_LOCK is held (lock_cwd above); n ≤ PATH_BYTES, the buffer's size.
    unsafe {
        let cwd = &mut *std::ptr::addr_of_mut!(CWD);
        cwd[..n].copy_from_slice(&b[..n]);
        CWD_LEN = n;
    }
    CWD_LOCK.store(false, Ordering::Release);
}

fn copy_cwd(a: &mut AbsPath) -> bool {
    lock_cwd();
    // SAFETY: CWD and CWD_LEN are read only while CWD_LOCK is held (lock_cwd above); n ≤ PATH_BYTES.
    let ok = unsafe {
        let n = CWD_LEN;
        let cwd = &*std::ptr::addr_of!(CWD);
        if n > 0 {
            a.len = 0;
            a.push(&cwd[..n]);
        }
        n > 0
    };
    CWD_LOCK.store(false, Ordering::Release);
    ok
}

/// readlink(/proc/self/fd/N) into `buf`; None if the descriptor is not open.
pub fn fd_link(fd: c_int, buf: &mut [u8]) -> Option<usize> {
    let mut name = [0u8; 32];
    let mut w = &mut name[..];
    use std::io::Write;
    let _ = write!(w, "/proc/self/fd/{fd}\0");
    // SAFETY: `name` is NUL-terminated by the write above; readlink writes at most buf.len() bytes into `buf`.
    let n = unsafe {
        libc::readlink(
            name.as_ptr() as *const c_char,
            buf.as_mut_ptr() as *mut c_char,
            buf.len(),
        )
    };
    if n < 0 {
        None
    } else {
        Some(n as usize)
    }
}

/// Absolute normalised form of `path` relative to `dirfd`. None when it
/// cannot be resolved here (too long, dirfd not a directory link): the
/// caller passes the call through and the kernel answers.
pub fn resolve(dirfd: c_int, path: &[u8]) -> Option<AbsPath> {
    let mut a = AbsPath::new();
    resolve_into(dirfd, path, &mut a).then_some(a)
}

/// [`resolve`] into `a` (no 4 KiB move of a returned path); false: None.
fn resolve_into(dirfd: c_int, path: &[u8], a: &mut AbsPath) -> bool {
    a.len = 0;
    if path.is_empty() {
        return false;
    }
    if !path.starts_with(b"/") && !dir_base(dirfd, a) {
        return false;
    }
    if !a.push(path) {
        return false;
    }
    a.fix_root();
    true
}

/// Symbolic links one resolution follows at most (the kernel's limit).
pub const SYMLINK_HOPS_MAX: u32 = 40;

/// Whether a symbolic link as the last component is followed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Last {
    /// The link's target (stat, open, chmod, …).
    Follow,
    /// The name itself, whatever it is (lstat, unlink, rename, link's new name).
    NoFollow,
    /// The name itself, but a symbolic link there is the kernel's to answer
    /// (`O_NOFOLLOW` → ELOOP, `O_CREAT|O_EXCL` → EEXIST): None.
    NotLink,
}

/// Closes a descriptor this module opened (raw system call: no hook).
struct OwnedFd(c_int);
impl Drop for OwnedFd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this guard's own, closed exactly once here (Drop).
        unsafe { libc::syscall(libc::SYS_close, self.0) };
    }
}

/// The absolute path a directory descriptor (or the cwd) stands for.
fn dir_base(dirfd: c_int, a: &mut AbsPath) -> bool {
    a.len = 0;
    if dirfd == libc::AT_FDCWD {
        return copy_cwd(a);
    }
    let mut b = [0u8; PATH_BYTES];
    let Some(n) = fd_link(dirfd, &mut b) else {
        return false;
    };
    let link = &b[..n];
    if !link.starts_with(b"/") || link.ends_with(b" (deleted)") || link.starts_with(b"/memfd:") {
        return false;
    }
    a.push(link)
}

/// `struct open_how` of openat2(2) (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// openat2(2) is not available here (kernel before 5.6, or a seccomp
/// filter refuses it): set at the first refusal, then only `openat` is used.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Opens directory `d` (relative to `base_fd`) with `O_PATH`. The flag is
/// true when `d` is absolute and was resolved without following any
/// symbolic link (`RESOLVE_NO_SYMLINKS`): its lexical normal form is then
/// its canonical name, and the caller need not read it back from /proc
/// (≈ 0.9 µs of a 5 µs `stat` through the adapter, issue 18 t2s). None when
/// the kernel refuses to open it (the caller's call then goes to the kernel,
/// which answers the same).
fn open_dir(base_fd: c_int, d: &[u8]) -> Option<(c_int, bool)> {
    let mut dz = RawBuf::new();
    let dz = dz.c_str(d)?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if d.starts_with(b"/") && !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow {
            flags: flags as u64,
            mode: 0,
            resolve: 0x04, // RESOLVE_NO_SYMLINKS
        };
        // SAFETY: raw openat2(2): `dz` is a NUL-terminated path and `how` a
        // live open_how of the size passed; the result is a new descriptor or an error.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                dz,
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        } as c_int;
        if fd >= 0 {
            return Some((fd, true));
        }
        match crate::errno() {
            // a symbolic link on the way: opened below, named by /proc
            libc::ELOOP => {}
            libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG => {
                NO_OPENAT2.store(true, Ordering::Relaxed)
            }
            _ => return None,
        }
    }
    // SAFETY: raw openat(2): `dz` is a NUL-terminated path in a live local; the result is a new descriptor or an error.
    let fd = unsafe { libc::syscall(libc::SYS_openat, base_fd, dz, flags, 0) } as c_int;
    (fd >= 0).then_some((fd, false))
}

/// A path-sized stack buffer that is not zeroed (see [`AbsPath`]).
struct RawBuf([std::mem::MaybeUninit<u8>; PATH_BYTES]);

impl RawBuf {
    fn new() -> RawBuf {
        RawBuf([std::mem::MaybeUninit::uninit(); PATH_BYTES])
    }
    /// `src` NUL-terminated in the buffer; None when it does not fit.
    fn c_str(&mut self, src: &[u8]) -> Option<*const c_char> {
        if src.len() >= PATH_BYTES {
            return None;
        }
        for (d, &b) in self.0.iter_mut().zip(src) {
            d.write(b);
        }
        self.0[src.len()].write(0);
        Some(self.0.as_ptr() as *const c_char)
    }
    /// The first `n` bytes, which the caller wrote (or the kernel did).
    fn get(&self, n: usize) -> &[u8] {
        assert!(n <= PATH_BYTES);
        // SAFETY: bytes [..n] were written before (the caller's contract);
        // MaybeUninit<u8> has u8's layout.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, n) }
    }
}

/// Resolves `path` relative to `dirfd` as the kernel does (issue 12 item
/// 4: a lexical normalisation made `link -> t.txt` a second record, and
/// `dir/symlink/..` the wrong directory). The directory part is opened by the
/// kernel (`O_PATH`), so symbolic links and `..` anywhere in it resolve as
/// they would for the real call, and its canonical name is read back from
/// /proc; the last component, when it is a symbolic link and `last` says
/// follow, is replaced by the link's target and resolution starts again (at
/// most [`SYMLINK_HOPS_MAX`] times). A path relative to the cwd without a
/// slash costs one `fstatat`; an absolute one without symbolic links an
/// `openat2`, an `fstatat` and a `close` (see [`open_dir`]); any other an
/// `openat`, a `readlink` of /proc, an `fstatat` and a `close`.
///
/// None when the kernel must answer: the directory part does not resolve
/// (ENOENT, ENOTDIR, EACCES, ELOOP), the last component is `.`/`..` or ends in
/// a slash, the last component is a symbolic link and `last` is
/// [`Last::NotLink`], too many links, too long. With [`Last::NoFollow`] a
/// symbolic link's own path is returned (no record ever has it: symbolic
/// links are always real, so the caller's lookup finds nothing and the
/// kernel acts on the link).
pub fn resolve_real(dirfd: c_int, path: &[u8], last: Last) -> Option<AbsPath> {
    let mut a = AbsPath::new();
    resolve_real_into(dirfd, path, last, &mut a).map(|()| a)
}

/// [`resolve_real`] into `a`: each path operation of the adapter moved its
/// 4 KiB path several times when it was returned by value (issue 18, t2s).
fn resolve_real_into(dirfd: c_int, path: &[u8], last: Last, a: &mut AbsPath) -> Option<()> {
    a.len = 0;
    if path.is_empty() || path.len() >= PATH_BYTES {
        return None;
    }
    // the path being resolved: the caller's, then a link's target
    let mut cur = RawBuf::new();
    let mut cur_len = 0usize;
    let mut followed = false;
    let mut base_fd = dirfd;
    let mut _held: Option<OwnedFd> = None;
    for _hop in 0..=SYMLINK_HOPS_MAX {
        let p = if followed { cur.get(cur_len) } else { path };
        if p.ends_with(b"/") {
            return None;
        }
        let (dir, name) = match p.iter().rposition(|&c| c == b'/') {
            Some(0) => (Some(&b"/"[..]), &p[1..]),
            Some(i) => (Some(&p[..i]), &p[i + 1..]),
            None => (None, p),
        };
        if name == b"." || name == b".." || name.is_empty() {
            return None;
        }
        // the directory the name lives in: (descriptor to stat in, its path)
        let (sfd, owned) = match dir {
            None => {
                if !dir_base(base_fd, a) {
                    return None;
                }
                (base_fd, None)
            }
            Some(d) => {
                let (fd, canonical) = open_dir(base_fd, d)?;
                let o = OwnedFd(fd);
                if canonical {
                    // no symbolic link on the way: the name is the kernel's
                    a.len = 0;
                    if !a.push(d) {
                        return None;
                    }
                } else if !dir_base(fd, a) {
                    return None;
                }
                (fd, Some(o))
            }
        };
        let mut nz = [0u8; 256];
        if name.len() >= nz.len() {
            return None; // NAME_MAX: the kernel says ENAMETOOLONG
        }
        nz[..name.len()].copy_from_slice(name);
        // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: raw newfstatat(2): `nz` is NUL-terminated, `st` a live local stat64 the kernel fills.
        let r = unsafe {
            libc::syscall(
                libc::SYS_newfstatat,
                sfd,
                nz.as_ptr(),
                &mut st as *mut libc::stat64,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 && crate::errno() != libc::ENOENT {
            // EACCES (no search permission on the directory), ELOOP...: the
            // kernel answers; the buffer must not serve what it would refuse
            return None;
        }
        let is_link = r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK;
        if !is_link || last == Last::NoFollow {
            if !a.push(name) {
                return None;
            }
            a.fix_root();
            // an open that follows need not look again (one metadata
            // round trip less per create on a parallel file system)
            strata_client::file::note_dest_absent((r != 0).then(|| a.bytes()));
            return Some(());
        }
        if last == Last::NotLink {
            return None;
        }
        // SAFETY: raw readlinkat(2): `nz` is NUL-terminated; the kernel writes at most PATH_BYTES - 1 bytes into `cur`, a live local of PATH_BYTES.
        let n = unsafe {
            libc::syscall(
                libc::SYS_readlinkat,
                sfd,
                nz.as_ptr(),
                cur.0.as_mut_ptr(),
                PATH_BYTES - 1,
            )
        };
        if n <= 0 || n as usize >= PATH_BYTES - 1 {
            return None;
        }
        cur_len = n as usize;
        followed = true;
        // a relative target is relative to the link's directory: keep it open
        base_fd = sfd;
        if owned.is_some() {
            _held = owned;
        }
    }
    None // too many links: the kernel says ELOOP
}

fn under(p: &[u8], prefix: &[u8]) -> bool {
    if prefix == b"/" {
        return true;
    }
    p.starts_with(prefix) && (p.len() == prefix.len() || p[prefix.len()] == b'/')
}

/// A tracked path and how to buffer it.
pub struct Tracked {
    pub abs: AbsPath,
    pub persist: Persist,
    pub page_bytes: u64,
}

/// Whether `path` (relative to `dirfd`) is tracked. Allocation-free; None
/// for untracked paths, before start-up, inside the adapter, and when no
/// daemon could be reached.
#[inline]
pub fn tracked_path(dirfd: c_int, path: *const c_char) -> Option<Tracked> {
    tracked_path_at(dirfd, path, Last::Follow)
}

/// [`tracked_path`] for calls about the name itself (lstat, unlink, rename,
/// `O_NOFOLLOW`, …): a symbolic link as the last component is the kernel's.
#[inline]
pub fn tracked_path_nofollow(dirfd: c_int, path: *const c_char) -> Option<Tracked> {
    tracked_path_at(dirfd, path, Last::NoFollow)
}

#[inline]
pub fn tracked_path_at(dirfd: c_int, path: *const c_char, last: Last) -> Option<Tracked> {
    if !crate::ready() || crate::guarded() || crate::connect_failed() {
        return None;
    }
    classify_path_at(dirfd, crate::readable_cstr(path)?, last)
}

pub fn classify_path_at(dirfd: c_int, path: &[u8], last: Last) -> Option<Tracked> {
    let st = crate::state();
    if path.ends_with(b"/") {
        return None; // only directories end in a slash: the kernel answers
    }
    // system paths (lexically) never reach the resolver: no extra system calls
    let mut lex = AbsPath::new();
    if !resolve_into(dirfd, path, &mut lex) || st.never.iter().any(|n| under(lex.bytes(), n)) {
        return None;
    }
    // built in place: a 4 KiB path is not moved on its way out
    let mut t = Tracked {
        abs: AbsPath::new(),
        persist: Persist::Default,
        page_bytes: 0,
    };
    resolve_real_into(dirfd, path, last, &mut t.abs)?;
    let p = t.abs.bytes();
    if !st.include.iter().any(|i| under(p, i))
        || st.exclude.iter().any(|e| under(p, e))
        || st.never.iter().any(|n| under(p, n))
    {
        return None;
    }
    // the include prefix itself (a directory) is never a file to buffer
    if st.include.iter().any(|i| i.as_slice() == p) {
        return None;
    }
    let (mode, page_bytes) = st.adapter.settings_for(t.abs.as_path());
    t.persist = crate::persist_for(mode)?;
    t.page_bytes = page_bytes;
    t.abs.as_str()?;
    Some(t)
}

/// Whether `path` (relative to `dirfd`) names a directory that may hold
/// buffered files: the directory itself is under an include prefix (or is
/// one), under no exclude/never prefix, and its mode is not BYPASS.
/// Allocation-free; None in the same cases as [`tracked_path`].
pub fn tracked_dir(dirfd: c_int, path: *const c_char) -> Option<AbsPath> {
    tracked_dir_at(dirfd, path, Last::Follow)
}

/// [`tracked_dir`] resolved by the kernel: the directory is opened
/// (`O_PATH`; with [`Last::NoFollow`] a symbolic link is not a directory) and
/// its canonical name read back. None when it does not exist or is not a
/// directory: the kernel answers.
pub fn tracked_dir_at(dirfd: c_int, path: *const c_char, last: Last) -> Option<AbsPath> {
    if !crate::ready() || crate::guarded() || crate::connect_failed() {
        return None;
    }
    let lex = resolve(dirfd, crate::readable_cstr(path)?)?;
    let st = crate::state();
    if st.never.iter().any(|n| under(lex.bytes(), n)) {
        return None;
    }
    let nofollow = if last == Last::NoFollow {
        libc::O_NOFOLLOW
    } else {
        0
    };
    // SAFETY: raw openat(2) on a NUL-terminated path in a live local; the result is a new descriptor or an error.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC | nofollow,
            0,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    let fd = OwnedFd(fd);
    let mut a = AbsPath::new();
    if !dir_base(fd.0, &mut a) {
        return None;
    }
    a.fix_root();
    tracked_dir_abs(a)
}

/// [`tracked_dir`] for an absolute path already resolved.
pub fn tracked_dir_abs(abs: AbsPath) -> Option<AbsPath> {
    let st = crate::state();
    let p = abs.bytes();
    if !st.include.iter().any(|i| under(p, i))
        || st.exclude.iter().any(|e| under(p, e))
        || st.never.iter().any(|n| under(p, n))
    {
        return None;
    }
    let (mode, _) = st.adapter.settings_for(abs.as_path());
    crate::persist_for(mode)?;
    abs.as_str()?;
    Some(abs)
}

/// The directory a descriptor refers to (its /proc link), if tracked.
pub fn tracked_dir_fd(fd: c_int) -> Option<AbsPath> {
    if !crate::ready() || crate::guarded() || crate::connect_failed() {
        return None;
    }
    let mut a = AbsPath::new();
    if fd < 0 || !dir_base(fd, &mut a) {
        return None;
    }
    a.fix_root();
    tracked_dir_abs(a)
}

/// Most ancestors [`enotdir_fix`] asks the daemon about.
const ANCESTORS_CHECKED_MAX: usize = 64;

/// After a call passed through to the kernel failed with ENOENT: if a
/// directory part of `path` is a file that exists only in the buffer, the
/// kernel (which does not see it) said ENOENT where, with the file there, it
/// says ENOTDIR; errno becomes ENOTDIR. `r` is the call's result, returned.
/// Costs nothing unless the call failed with ENOENT under an include prefix.
pub fn enotdir_fix<T: PartialEq + From<i8>>(r: T, dirfd: c_int, path: *const c_char) -> T {
    if r != T::from(-1) || crate::errno() != libc::ENOENT {
        return r;
    }
    if crate::run_raw(false, || buffered_ancestor(dirfd, path)) {
        crate::set_errno(libc::ENOTDIR);
    } else {
        crate::set_errno(libc::ENOENT);
    }
    r
}

/// [`enotdir_fix`] for rmdir: the name itself a buffered-only file is
/// ENOTDIR too (the kernel, not seeing it, says ENOENT).
pub fn rmdir_fix(r: c_int, dirfd: c_int, path: *const c_char) -> c_int {
    let r = enotdir_fix(r, dirfd, path);
    if r != -1 || crate::errno() != libc::ENOENT {
        return r;
    }
    let is_file = crate::ready()
        && !crate::connect_failed()
        && crate::run_raw(None, || {
            classify_path_at(dirfd, crate::readable_cstr(path)?, Last::NoFollow)
        })
        .is_some_and(|t| crate::hooks::buffered(&t));
    crate::set_errno(if is_file { libc::ENOTDIR } else { libc::ENOENT });
    r
}

/// [`enotdir_fix`] for a call with two paths (rename, link).
pub fn enotdir_fix2(
    r: c_int,
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
) -> c_int {
    enotdir_fix(enotdir_fix(r, ofd, from), nfd, to)
}

fn buffered_ancestor(dirfd: c_int, path: *const c_char) -> bool {
    if !crate::ready() || crate::connect_failed() {
        return false;
    }
    let Some(lex) = crate::readable_cstr(path).and_then(|b| resolve(dirfd, b)) else {
        return false;
    };
    let st = crate::state();
    let p = lex.bytes();
    if !st.include.iter().any(|i| under(p, i)) {
        return false;
    }
    // from the deepest directory part up: the first that exists in the
    // kernel ends the search
    let mut end = p.len();
    for _ in 0..ANCESTORS_CHECKED_MAX {
        let Some(slash) = p[..end].iter().rposition(|&b| b == b'/') else {
            return false;
        };
        if slash == 0 {
            return false;
        }
        end = slash;
        let anc = &p[..end];
        if !st.include.iter().any(|i| under(anc, i)) || st.include.iter().any(|i| i == anc) {
            return false;
        }
        let mut z = [0u8; PATH_BYTES];
        z[..anc.len()].copy_from_slice(anc);
        // SAFETY: raw newfstatat(2): `z` is NUL-terminated and `s` a live stat64 the kernel fills.
        let stat_at = |flags: c_int, s: &mut libc::stat64| unsafe {
            libc::syscall(
                libc::SYS_newfstatat,
                libc::AT_FDCWD,
                z.as_ptr(),
                s as *mut libc::stat64,
                flags,
            ) == 0
        };
        // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
        let mut s: libc::stat64 = unsafe { std::mem::zeroed() };
        if stat_at(0, &mut s) {
            // a directory (or a link to one): ENOENT was right; anything
            // else (a buffered file the flusher just wrote there) makes
            // the path ENOTDIR
            return s.st_mode & libc::S_IFMT != libc::S_IFDIR;
        }
        if stat_at(libc::AT_SYMLINK_NOFOLLOW, &mut s) {
            // a dangling symbolic link: the kernel's ENOENT
            return false;
        }
        // not in the kernel: a buffered file? (the daemon is asked only now:
        // a failed open in an existing directory never connects)
        let (Ok(a), Ok(c)) = (std::str::from_utf8(anc), crate::client()) else {
            return false;
        };
        if matches!(c.file_stat_path(a), Ok(Some(_))) {
            return true;
        }
    }
    false
}
