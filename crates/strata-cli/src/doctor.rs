//! `strata doctor`: checks the machine and the configuration a daemon runs
//! with, and says what to do about each finding.
//!
//! Every check is bounded (a few small writes and syncs per tier
//! directory, one control request with the client's deadline) and none
//! changes anything but its own probe files, which it removes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use strata_config::{Config, DeviceKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Info => "info",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: String,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do (empty when nothing).
    pub todo: String,
}

fn finding(check: &str, verdict: Verdict, detail: String, todo: &str) -> Finding {
    Finding {
        check: check.into(),
        verdict,
        detail,
        todo: todo.into(),
    }
}

/// Syncs timed per tier directory.
const SYNC_PROBES: usize = 5;
/// A sync faster than this on a disk file system was probably not done.
const SYNC_SUSPECT: Duration = Duration::from_micros(20);
/// Files a daemon and its clients may keep open at once, roughly.
const NOFILE_WANTED: u64 = 4096;

/// Runs every check. `cfg` is `Err` when the configuration does not load:
/// that is the first finding and the checks that need it are skipped.
pub fn run(cfg: Result<Config, String>) -> Vec<Finding> {
    let mut out = Vec::new();
    let cfg = match cfg {
        Ok(c) => {
            out.push(finding(
                "config",
                Verdict::Ok,
                format!(
                    "{} tier(s), socket {}",
                    c.devices.len(),
                    c.resolved_socket_path().display()
                ),
                "",
            ));
            Some(c)
        }
        Err(e) => {
            out.push(finding(
                "config",
                Verdict::Fail,
                e,
                "fix the key named above (`strata config check FILE`)",
            ));
            None
        }
    };
    if let Some(c) = &cfg {
        out.push(shm(c));
    }
    out.extend(limits());
    if let Some(c) = &cfg {
        for d in c.devices.iter().filter(|d| d.kind == DeviceKind::Dir) {
            if let Some(p) = &d.path {
                out.extend(tier_dir(&d.name, p, d.capacity_bytes, d.volatile));
            }
        }
    }
    if let Some(c) = &cfg {
        for p in &c.adapter.include {
            out.push(destination(p));
        }
    }
    out.push(io_uring());
    out.push(clock());
    if let Some(c) = &cfg {
        out.push(daemon(c));
        if c.cluster.tls {
            out.push(cluster_tls(c));
        }
        if let Some(m) = c.daemon.metrics {
            out.push(if m.ip().is_loopback() {
                finding("metrics", Verdict::Ok, format!("endpoint on {m}"), "")
            } else {
                finding(
                    "metrics",
                    Verdict::Warn,
                    format!("endpoint on {m}, reachable from other hosts"),
                    "bind daemon.metrics to 127.0.0.1 and scrape through a tunnel or a local agent",
                )
            });
        }
    }
    out
}

fn statvfs(p: &Path) -> std::io::Result<(u64, u64)> {
    let s = rustix::fs::statvfs(p)?;
    Ok((s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
}

fn shm(c: &Config) -> Finding {
    let want = c.ram_device().map_or(0, |d| d.capacity_bytes);
    match statvfs(Path::new("/dev/shm")) {
        Err(e) => finding(
            "/dev/shm",
            Verdict::Fail,
            format!("cannot look at /dev/shm: {e}"),
            "strata needs a tmpfs at /dev/shm (mount -t tmpfs tmpfs /dev/shm)",
        ),
        Ok((size, free)) if free < want => finding(
            "/dev/shm",
            Verdict::Warn,
            format!(
                "{} free of {}, the RAM tier wants {}",
                human(free),
                human(size),
                human(want)
            ),
            "lower the ram device's capacity, free /dev/shm, or remount it larger (mount -o remount,size=...)",
        ),
        Ok((size, free)) => finding(
            "/dev/shm",
            Verdict::Ok,
            format!(
                "{} free of {}; the RAM tier wants {}",
                human(free),
                human(size),
                human(want)
            ),
            "",
        ),
    }
}

fn limits() -> Vec<Finding> {
    use rustix::process::{getrlimit, Resource};
    let mut out = Vec::new();
    let nofile = getrlimit(Resource::Nofile);
    let cur = nofile.current.unwrap_or(u64::MAX);
    out.push(if cur < NOFILE_WANTED {
        finding(
            "open files",
            Verdict::Warn,
            format!(
                "ulimit -n is {cur} (hard {})",
                nofile.maximum.map_or("unlimited".into(), |m| m.to_string())
            ),
            "raise it (ulimit -n 65536, or nofile in /etc/security/limits.conf): each client holds descriptors in the daemon",
        )
    } else {
        finding("open files", Verdict::Ok, format!("ulimit -n is {cur}"), "")
    });
    let memlock = getrlimit(Resource::Memlock);
    out.push(finding(
        "memlock",
        Verdict::Info,
        format!(
            "ulimit -l is {}",
            memlock.current.map_or("unlimited".into(), human)
        ),
        "",
    ));
    out
}

/// The file system type of `p` by its magic number.
fn fs_type(p: &Path) -> std::io::Result<(&'static str, bool)> {
    let s = rustix::fs::statfs(p)?;
    // (name, network or volatile: not a place for a durable local tier)
    Ok(match s.f_type as u64 {
        0xEF53 => ("ext2/3/4", false),
        0x5846_5342 => ("xfs", false),
        0x9123_683E => ("btrfs", false),
        0x2FC1_2FC1 => ("zfs", false),
        0x0102_1994 => ("tmpfs", true),
        0x8584_58F6 => ("ramfs", true),
        0x6969 => ("nfs", true),
        0x6573_5546 => ("fuse", true),
        0x794C_7630 => ("overlayfs", false),
        0x0BD0_0BD0 => ("lustre", true),
        0x4750_4653 => ("gpfs", true),
        0x00C3_6400 => ("ceph", true),
        0x1983_0326 => ("beegfs", true),
        _ => ("other", false),
    })
}

fn tier_dir(name: &str, p: &Path, capacity: u64, volatile: bool) -> Vec<Finding> {
    let check = format!("tier {name}");
    let mut out = Vec::new();
    // The directory, or the nearest existing parent (the daemon creates it).
    let mut at: PathBuf = p.to_path_buf();
    let mut steps = 0;
    while !at.exists() && steps < 64 {
        match at.parent() {
            Some(q) => at = q.to_path_buf(),
            None => break,
        }
        steps += 1;
    }
    match statvfs(&at) {
        Err(e) => {
            out.push(finding(
                &check,
                Verdict::Fail,
                format!("{}: {e}", p.display()),
                "create the directory or fix the device's path",
            ));
            return out;
        }
        Ok((_, free)) if free < capacity => out.push(finding(
            &check,
            Verdict::Warn,
            format!(
                "{}: {} free, capacity {} (the tier grows its file as it fills)",
                p.display(),
                human(free),
                human(capacity)
            ),
            "lower the device's capacity or free space: a full file system turns writes into write-through",
        )),
        Ok((_, free)) => out.push(finding(
            &check,
            Verdict::Ok,
            format!(
                "{}: {} free, capacity {}",
                p.display(),
                human(free),
                human(capacity)
            ),
            "",
        )),
    }
    match fs_type(&at) {
        Ok((t, true)) if !volatile => out.push(finding(
            &check,
            Verdict::Warn,
            format!("on {t}: memory or a network file system, not a local non-volatile device"),
            "put dir tiers on a local disk, or mark the device `volatile: true` (fsync then goes to the destination)",
        )),
        Ok((t, _)) => out.push(finding(&check, Verdict::Ok, format!("file system {t}"), "")),
        Err(e) => out.push(finding(&check, Verdict::Warn, format!("statfs: {e}"), "")),
    }
    if at == p {
        out.push(sync_probe(&check, p));
    }
    out
}

/// Times `SYNC_PROBES` 4 KiB write + fdatasync pairs in `dir`.
fn sync_probe(check: &str, dir: &Path) -> Finding {
    use std::io::Write;
    let path = dir.join(format!(".strata-doctor-{}", std::process::id()));
    let r = (|| -> std::io::Result<Duration> {
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)?;
        let buf = vec![0x5au8; 4096];
        let mut times = Vec::with_capacity(SYNC_PROBES);
        for _ in 0..SYNC_PROBES {
            f.write_all(&buf)?;
            let t = Instant::now();
            f.sync_data()?;
            times.push(t.elapsed());
        }
        times.sort();
        Ok(times[times.len() / 2])
    })();
    let _ = std::fs::remove_file(&path);
    match r {
        Err(e) => finding(
            check,
            Verdict::Fail,
            format!("cannot write and sync a file in {}: {e}", dir.display()),
            "the daemon's user must be able to write there",
        ),
        Ok(d) if d < SYNC_SUSPECT => finding(
            check,
            Verdict::Warn,
            format!("fdatasync took {:.1} µs (median of {SYNC_PROBES}): too fast to have reached a device", d.as_secs_f64() * 1e6),
            "fsync through strata is only as durable as this device: check for eatmydata, nobarrier or a volatile write cache",
        ),
        Ok(d) => finding(
            check,
            Verdict::Ok,
            format!(
                "fdatasync {:.0} µs (median of {SYNC_PROBES})",
                d.as_secs_f64() * 1e6
            ),
            "",
        ),
    }
}

/// A destination directory of `adapter.include`: present and writable
/// (where DEFAULT files drain to).
fn destination(p: &Path) -> Finding {
    let check = "destination";
    match std::fs::metadata(p) {
        Err(e) => finding(
            check,
            Verdict::Warn,
            format!("{}: {e}", p.display()),
            "create it, or fix adapter.include: files there cannot drain",
        ),
        Ok(m) if !m.is_dir() => finding(
            check,
            Verdict::Fail,
            format!("{} is not a directory", p.display()),
            "adapter.include names directories",
        ),
        Ok(_) => {
            let access = rustix::fs::access(
                p,
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            );
            let kind = fs_type(p).map(|(t, _)| t).unwrap_or("unknown");
            match access {
                Ok(()) => finding(
                    check,
                    Verdict::Ok,
                    format!("{} writable ({kind})", p.display()),
                    "",
                ),
                Err(e) => finding(
                    check,
                    Verdict::Fail,
                    format!("{}: not writable ({e})", p.display()),
                    "DEFAULT files under it cannot drain: fix its permissions or adapter.include",
                ),
            }
        }
    }
}

fn io_uring() -> Finding {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let mut params = [0u32; 30]; // struct io_uring_params is 120 bytes
                                 // SAFETY: io_uring_setup reads and writes only `params`, which is large
                                 // enough; a returned descriptor is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: fd is ours and open.
        unsafe { libc::close(fd as i32) };
        return finding("io_uring", Verdict::Ok, "available".into(), "");
    }
    let e = std::io::Error::last_os_error();
    finding(
        "io_uring",
        Verdict::Info,
        format!(
            "not available ({e}{})",
            disabled.map_or(String::new(), |d| format!(", kernel.io_uring_disabled={d}"))
        ),
        "nothing needed: strata's tiers use pread/pwrite and direct I/O",
    )
}

fn clock() -> Finding {
    let src =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
    // adjtimex with modes 0 only reads; TIME_ERROR (5): not synchronised.
    // SAFETY: a zeroed timex is a valid argument; the kernel fills it.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let state = unsafe { libc::adjtimex(&mut tx) };
    let synced = state >= 0 && state != libc::TIME_ERROR;
    let fast = matches!(src.as_str(), "tsc" | "kvm-clock" | "arch_sys_counter");
    match (fast, synced) {
        (true, true) => finding(
            "clock",
            Verdict::Ok,
            format!("clocksource {src}, synchronised"),
            "",
        ),
        (_, false) => finding(
            "clock",
            Verdict::Warn,
            format!("clocksource {src}, not synchronised (adjtimex)"),
            "run NTP/chrony: strata compares destination mtimes to notice outside changes, and nodes must agree",
        ),
        (false, true) => finding(
            "clock",
            Verdict::Warn,
            format!("clocksource {src}: reading the clock is slow"),
            "use tsc if the hardware allows (clocksource= kernel parameter); strata reads the clock per request",
        ),
    }
}

/// `cluster.tls`: the files load (chain, key 0600, CA) as a daemon would.
fn cluster_tls(c: &Config) -> Finding {
    let files = strata_daemon::cluster::tls_files(c);
    match strata_net::tls::Tls::load(&files) {
        Ok(_) => finding(
            "cluster tls",
            Verdict::Ok,
            format!("certificate {}, CA {}", files.cert.display(), files.ca.display()),
            "",
        ),
        Err(e) => finding(
            "cluster tls",
            Verdict::Fail,
            e.to_string(),
            "run `strata cluster start` once with the tls_* keys on auto (it makes them), or point cluster.tls_cert, tls_key and tls_ca at your CA's files",
        ),
    }
}

fn daemon(c: &Config) -> Finding {
    let socket = c.resolved_socket_path();
    match strata_client::status(&socket) {
        Ok(st) => finding(
            "daemon",
            Verdict::Ok,
            format!(
                "pid {} answers on {} (up {:.0}s, {} client(s))",
                st.pid,
                socket.display(),
                st.uptime_s,
                st.clients
            ),
            "",
        ),
        Err(_) if !socket.exists() => finding(
            "daemon",
            Verdict::Info,
            format!("none running at {}", socket.display()),
            "`strata daemon start`, or let `strata run` start a private one",
        ),
        Err(e) => finding(
            "daemon",
            Verdict::Fail,
            format!("{} exists but does not answer: {e}", socket.display()),
            "a daemon may be stuck or gone: `strata daemon stop`, then start it again (its journal keeps durable data)",
        ),
    }
}

pub fn table(findings: &[Finding]) -> String {
    let mut t = crate::table::Table::new(&["CHECK", "RESULT", "DETAIL"]);
    let mut todo = String::new();
    for f in findings {
        let mut detail = f.detail.clone();
        if !f.todo.is_empty() && f.verdict != Verdict::Ok {
            let n = todo.lines().count() + 1;
            todo.push_str(&format!("  [{n}] {}: {}\n", f.check, f.todo));
            detail.push_str(&format!(" [{n}]"));
        }
        t.row(vec![f.check.clone(), f.verdict.as_str().into(), detail]);
    }
    let fails = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .count();
    let warns = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Warn)
        .count();
    let mut out = t.render();
    if !todo.is_empty() {
        out.push_str("\nwhat to do:\n");
        out.push_str(&todo);
    }
    out.push_str(&format!(
        "\n{} check(s): {} failed, {} warning(s)\n",
        findings.len(),
        fails,
        warns
    ));
    out
}

/// `21.5GiB`: sizes rounded for reading (format_size is exact).
fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}
