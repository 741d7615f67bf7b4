//! Defaults derived from the machine: tier sizes from `statvfs`, paths from
//! the XDG variables, `$HOME`, `$TMPDIR` and the uid. Nothing is created.

use crate::{DeviceConfig, DeviceKind};
use rustix::fs::Access;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

pub(crate) fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `path` itself or its deepest existing ancestor.
fn existing_ancestor(path: &Path) -> Option<&Path> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.exists())
}

/// Free bytes available to unprivileged users on the file system that holds
/// `path` (or would hold it, once created).
fn free_bytes(path: &Path) -> Option<u64> {
    let p = existing_ancestor(path)?;
    let s = rustix::fs::statvfs(p).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Whether `path` (or, if it does not exist yet, its deepest existing
/// ancestor) is writable by this process.
fn writable(path: &Path) -> bool {
    existing_ancestor(path).is_some_and(|p| rustix::fs::access(p, Access::WRITE_OK).is_ok())
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

fn share(free: u64, divisor: u64, min: u64, max: u64) -> u64 {
    (free / divisor / MIB * MIB).clamp(min, max)
}

/// Capacity of the default RAM tier: 50% of the free space of `/dev/shm`,
/// rounded down to a MiB, clamped to 64MiB..=64GiB.
pub fn machine_ram_capacity() -> u64 {
    share(
        free_bytes(Path::new("/dev/shm")).unwrap_or(0),
        2,
        64 * MIB,
        64 * GIB,
    )
}

/// Default capacity of a directory tier at `path`: 25% of the free space of
/// its file system, rounded down to a MiB, clamped to 256MiB..=64GiB.
pub fn dir_capacity_for(path: &Path) -> u64 {
    share(free_bytes(path).unwrap_or(0), 4, 256 * MIB, 64 * GIB)
}

/// Directory of the default disk tier: `$XDG_CACHE_HOME/strata/tiers/disk0`,
/// else `~/.cache/strata/tiers/disk0`, else (no usable writable home)
/// `${TMPDIR:-/tmp}/strata-<uid>/tiers/disk0`.
pub fn machine_dir_path() -> PathBuf {
    let tail = Path::new("strata/tiers/disk0");
    if let Some(cache) = env_dir("XDG_CACHE_HOME") {
        if writable(&cache) {
            return cache.join(tail);
        }
    }
    if let Some(home) = env_dir("HOME") {
        let cache = home.join(".cache");
        if writable(&cache) {
            return cache.join(tail);
        }
    }
    let tmp = env_dir("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
    tmp.join(format!("strata-{}", uid())).join("tiers/disk0")
}

/// The machine-derived tiers: `ram` (see [`machine_ram_capacity`]) and
/// `disk0` (see [`machine_dir_path`] and [`dir_capacity_for`]).
pub fn machine_devices() -> Vec<DeviceConfig> {
    let dir = machine_dir_path();
    let dir_capacity = dir_capacity_for(&dir);
    vec![
        DeviceConfig::new("ram", DeviceKind::Ram, None, machine_ram_capacity()),
        DeviceConfig::new("disk0", DeviceKind::Dir, Some(dir), dir_capacity),
    ]
}

/// `auto` socket: `$XDG_RUNTIME_DIR/strata/daemon.sock` if that directory is
/// set, absolute, writable and the result fits in a Unix socket address;
/// else `/tmp/strata-<uid>/daemon.sock`.
pub(crate) fn auto_socket_path() -> PathBuf {
    if let Some(run) = env_dir("XDG_RUNTIME_DIR") {
        let p = run.join("strata/daemon.sock");
        if run.is_dir() && writable(&run) && p.as_os_str().len() <= crate::validate::SOCKET_PATH_MAX
        {
            return p;
        }
    }
    PathBuf::from(format!("/tmp/strata-{}/daemon.sock", uid()))
}
