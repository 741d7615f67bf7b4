//! A daemon's identity: its socket, its shared-memory prefix and its tier
//! directories, each held under an exclusive `flock` for the daemon's
//! lifetime. All locks are taken before anything is swept, replaced or
//! replayed, so a second daemon that shares any one of them is refused
//! without touching the first one's segments, tiers or journal.
//!
//! **Architecture Invariant:** nothing of this daemon's is created inside a
//! directory owned by another user, reached through a symlink, or readable
//! by other users (directories 0700, files 0600); a shared-memory name of our
//! prefix owned by another user is an error that names the owner.
//!
//! **API Boundary:** locks and ownership checks only; what the daemon keeps
//! in those places is the business of `tier.rs`, `journal.rs` and `lib.rs`.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use strata_config::{Config, DeviceKind};

/// Name of the lock file in each dir tier.
pub const TIER_LOCK_NAME: &str = "strata.lock";

/// The locks of one running daemon; released when dropped.
pub struct Identity {
    pub socket: PathBuf,
    pub prefix: String,
    _locks: Vec<File>,
}

/// A user name for messages ("alice (uid 1001)"), or just the uid.
pub fn describe_uid(uid: u32) -> String {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into our buffers only.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc == 0 && !out.is_null() && !pw.pw_name.is_null() {
        // SAFETY: getpwuid_r succeeded, so pw_name points to a NUL-terminated string inside `buf`, which is alive.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .to_string();
        return format!("{name} (uid {uid})");
    }
    format!("uid {uid}")
}

/// The gid of `daemon.group` (a name or a number); the daemon's own user
/// must be a member (it gives its socket and segments to that group).
pub fn resolve_group(spec: &str) -> anyhow::Result<u32> {
    let gid = match spec.parse::<u32>() {
        Ok(g) => g,
        Err(_) => {
            let name = std::ffi::CString::new(spec).context("daemon.group: a NUL in the name")?;
            let mut buf = vec![0 as libc::c_char; 1 << 16];
            // SAFETY: a plain C struct for which all-zero bytes are valid.
            let mut gr: libc::group = unsafe { std::mem::zeroed() };
            let mut out: *mut libc::group = std::ptr::null_mut();
            // SAFETY: getgrnam_r writes into our buffers only.
            let rc = unsafe {
                libc::getgrnam_r(
                    name.as_ptr(),
                    &mut gr,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut out,
                )
            };
            if rc != 0 || out.is_null() {
                bail!(
                    "daemon.group: no group named {spec:?} on this machine (getent group {spec})"
                );
            }
            gr.gr_gid
        }
    };
    let me = rustix::process::getegid().as_raw();
    let mine = rustix::process::getgroups().unwrap_or_default();
    if gid != me && !mine.iter().any(|g| g.as_raw() == gid) {
        bail!(
            "daemon.group: {} is not a member of group {spec} (gid {gid}); it can only share what it owns with a group it belongs to",
            describe_uid(my_uid())
        );
    }
    Ok(gid)
}

/// Whether the process `pid` (primary group `gid`, from `SO_PEERCRED`)
/// belongs to group `group`: its primary group, or one of its
/// supplementary groups as the kernel lists them in /proc.
/// `uid` is the peer's effective uid (also from `SO_PEERCRED`): the /proc
/// entry must still be that process's (a pid reused by another user's
/// process is not taken for it).
pub fn peer_in_group(pid: u32, uid: u32, gid: u32, group: u32) -> bool {
    if gid == group {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // Uid: real, effective, saved, file system.
    if field("Uid:").get(1) != Some(&uid) {
        return false;
    }
    field("Groups:").contains(&group)
}

/// Gives `path` to group `gid` with `mode` (the runtime directory 0710, the
/// socket 0660): members reach the socket, nothing else.
pub fn share_with_group(path: &Path, gid: u32, mode: u32) -> anyhow::Result<()> {
    rustix::fs::chownat(
        rustix::fs::CWD,
        path,
        None,
        Some(rustix::fs::Gid::from_raw(gid)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .with_context(|| format!("cannot give {} to group {gid}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(())
}

fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Creates `dir` (and missing parents, 0700) or checks the existing one: a
/// real directory (not a symlink) owned by us, with no access for group or
/// others (tightened to 0700 if it is ours and looser).
/// `follow`: a symlink to such a directory is accepted (tier directories on
/// HPC systems are often reached through one); the runtime directory, which
/// may live in a world-writable `/tmp`, must not be one.
pub fn private_dir(dir: &Path, what: &str, follow: bool) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the {what} {}", dir.display()))?;
    }
    let md = if follow {
        std::fs::metadata(dir)
    } else {
        std::fs::symlink_metadata(dir)
    };
    let md = md.with_context(|| format!("cannot stat the {what} {}", dir.display()))?;
    if md.file_type().is_symlink() {
        bail!("the {what} {} is a symbolic link; refusing to use it (remove it, or point the config at a private directory)", dir.display());
    }
    if !md.is_dir() {
        bail!("the {what} {} is not a directory", dir.display());
    }
    if md.uid() != my_uid() {
        bail!(
            "the {what} {} belongs to {}, not to you ({}); refusing to use it — another user may be intercepting strata. Remove it or use another path",
            dir.display(),
            describe_uid(md.uid()),
            describe_uid(my_uid())
        );
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("the {what} {} is accessible to other users (mode {:o}) and cannot be made private", dir.display(), md.mode() & 0o7777))?;
    }
    Ok(())
}

/// Opens (creating, 0600) a lock file owned by us and locks it exclusively;
/// `Ok(Err(holder))` when another process holds it (`holder`: what that
/// process wrote into it).
fn lock_file(path: &Path) -> anyhow::Result<Result<File, String>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    let md = file.metadata()?;
    if md.uid() != my_uid() {
        bail!("the lock file {} belongs to {}, not to you; refusing to use it (remove it, or use another path)", path.display(), describe_uid(md.uid()));
    }
    if !md.is_file() {
        bail!("the lock file {} is not a regular file", path.display());
    }
    if md.mode() & 0o077 != 0 {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
    }
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut holder = String::new();
        let mut f = &file;
        let _ = f.read_to_string(&mut holder);
        return Ok(Err(holder.trim().to_string()));
    }
    Ok(Ok(file))
}

/// Writes who holds a lock (for the refusal message of the next daemon).
fn stamp(mut f: &File, socket: &Path) {
    let _ = f.set_len(0);
    let _ = f.rewind();
    let _ = writeln!(f, "{} (pid {})", socket.display(), std::process::id());
}

/// Shared-memory names of `prefix` owned by another user: `(name, uid)`.
pub fn foreign_segments(prefix: &str) -> Vec<(String, u32)> {
    let me = my_uid();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/dev/shm") else {
        return out;
    };
    // Bounded by the directory's size.
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let ours = name
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('-') || r.starts_with('.'));
        if !ours {
            continue;
        }
        if let Ok(md) = std::fs::symlink_metadata(e.path()) {
            if md.uid() != me {
                out.push((name, md.uid()));
            }
        }
    }
    out
}

/// Takes the lock at `path` for the daemon of `socket` (stamping it with
/// that socket), or fails with `refused(holder)` naming who holds it.
fn take(
    locks: &mut Vec<File>,
    path: &Path,
    socket: &Path,
    refused: impl FnOnce(&str) -> String,
) -> anyhow::Result<()> {
    match lock_file(path)? {
        Ok(f) => {
            stamp(&f, socket);
            locks.push(f);
            Ok(())
        }
        Err(holder) => {
            let holder = if holder.is_empty() {
                "unknown socket".to_string()
            } else {
                format!("socket {holder}")
            };
            bail!("{}", refused(&holder))
        }
    }
}

/// Takes every lock of `cfg`'s identity, or explains which one is taken.
pub fn acquire(cfg: &Config) -> anyhow::Result<Identity> {
    let socket = cfg.resolved_socket_path();
    let prefix = cfg.resolved_shm_prefix();
    let mut locks = Vec::new();

    // 1. The socket (and its runtime directory).
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .context("socket path has no parent directory")?;
    private_dir(dir, "runtime directory", false)?;
    take(&mut locks, &socket.with_extension("lock"), &socket, |_| {
        format!("a strata daemon is already running for this user (socket {}); use it, or stop it with `strata daemon stop`", socket.display())
    })?;

    // 2. The shared-memory prefix.
    if let Some((name, uid)) = foreign_segments(&prefix).first() {
        bail!(
            "/dev/shm/{name} belongs to {}, not to you: another user created shared memory with this daemon's prefix {prefix:?}; refusing to start (set daemon.shm_prefix to another name, or have it removed)",
            describe_uid(*uid)
        );
    }
    take(
        &mut locks,
        Path::new(&format!("/dev/shm/{prefix}.lock")),
        &socket,
        |holder| {
            format!("the shared-memory prefix {prefix:?} is in use by another strata daemon ({holder}); give this daemon its own daemon.shm_prefix, or use that daemon")
        },
    )?;

    // 3. Every directory tier. A refusal here leaves no shared-memory lock
    // file behind (this daemon holds it, and never started).
    let tiers = (|| -> anyhow::Result<()> {
        for (i, d) in cfg.devices.iter().enumerate() {
            if d.kind != DeviceKind::Dir {
                continue;
            }
            let Some(path) = d.path.as_ref() else {
                bail!("devices[{i}] ({}) is a dir device without a path", d.name)
            };
            private_dir(path, &format!("tier directory of device {}", d.name), true)?;
            take(&mut locks, &path.join(TIER_LOCK_NAME), &socket, |holder| {
                format!(
                    "the tier directory {} of device {} is in use by another strata daemon ({holder}); give each daemon its own device path, or use that daemon",
                    path.display(),
                    d.name
                )
            })?;
        }
        Ok(())
    })();
    if let Err(e) = tiers {
        let _ = std::fs::remove_file(format!("/dev/shm/{prefix}.lock"));
        return Err(e);
    }
    Ok(Identity {
        socket,
        prefix,
        _locks: locks,
    })
}

impl Identity {
    /// Removes the shared-memory lock file at a clean shutdown (the socket's
    /// and tiers' lock files stay: they are private and reused).
    pub fn release(self) {
        let _ = std::fs::remove_file(format!("/dev/shm/{}.lock", self.prefix));
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_peer_is_in_a_group_by_its_primary_or_listed_groups_and_only_while_its_uid_holds() {
        let pid = std::process::id();
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        assert!(peer_in_group(pid, uid, gid, gid), "the primary group");
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let listed: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let other_primary = gid.wrapping_add(1);
        if let Some(&g) = listed.iter().find(|&&g| g != other_primary) {
            assert!(peer_in_group(pid, uid, other_primary, g), "a listed group");
            // A pid now held by another uid's process is not believed.
            assert!(!peer_in_group(pid, uid.wrapping_add(1), other_primary, g));
        }
        let absent = (1..u32::MAX)
            .find(|g| !listed.contains(g) && *g != gid && *g != other_primary)
            .unwrap();
        assert!(!peer_in_group(pid, uid, other_primary, absent));
        assert!(
            !peer_in_group(u32::MAX - 1, uid, other_primary, absent),
            "no such process"
        );
    }
    use super::*;

    #[test]
    fn a_lock_file_is_exclusive_and_names_its_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.lock");
        let a = lock_file(&p).unwrap().unwrap();
        stamp(&a, Path::new("/run/a.sock"));
        let b = lock_file(&p).unwrap();
        let holder = b.expect_err("second lock refused");
        assert!(holder.starts_with("/run/a.sock"), "{holder}");
        drop(a);
        assert!(lock_file(&p).unwrap().is_ok());
        let mode = std::fs::metadata(&p).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn private_dir_is_0700_and_refuses_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b");
        private_dir(&p, "test dir", false).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&p, "test dir", false).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o700);
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        let e = private_dir(&l, "test dir", false).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
    }
}
