//! `strata run [--config F] [--mode M] [--include P]… -- CMD ARGS…`: run an
//! unmodified program with the POSIX/stdio adapter preloaded.
//!
//! 1. Find `libstrata_posix.so` (`$STRATA_PRELOAD_LIB`, else next to this
//!    executable).
//! 2. Use the daemon at the configured socket, or start a private one. Several
//!    `strata run` on a node (e.g. MPI ranks) share one daemon: starting is
//!    serialised by a lock file next to the socket, every run holds a shared
//!    "users" lock for its lifetime, and a daemon started by `strata run`
//!    (recorded in the `run-owned` marker) is stopped by the last run to
//!    leave — the one whose upgrade to an exclusive lock succeeds. A daemon
//!    the user started (`strata daemon start`) is never stopped.
//! 3. Run CMD with `LD_PRELOAD` (plus the MPI-IO adapter for an MPI
//!    program or launcher: `mpiio_lib`), `STRATA_SOCKET`, `STRATA_CONFIG`,
//!    `STRATA_MODE`, `STRATA_INCLUDE`; forward SIGINT/SIGTERM/SIGHUP sent to
//!    us (not the terminal's, which CMD receives itself).
//! 4. Drain DEFAULT-mode files under the included prefixes, stop a private
//!    daemon if we are the last user, print a summary, exit with CMD's code.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use strata_config::{Config, Mode};
use strata_launch::SharedUse;
use strata_proto::control::{FileCounters, StatusReply};

use crate::flush;
use crate::table::format_size;

pub const PRELOAD_LIB_NAME: &str = "libstrata_posix.so";

pub struct RunArgs {
    pub config: Option<PathBuf>,
    pub mode: Option<Mode>,
    pub include: Vec<PathBuf>,
    pub quiet: bool,
    pub cmd: Vec<OsString>,
}

/// The adapter library: `$STRATA_PRELOAD_LIB`, else next to the `strata`
/// executable (cargo builds both into target/<profile>/).
pub fn find_preload_lib() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("STRATA_PRELOAD_LIB").filter(|v| !v.is_empty()) {
        let p = flush::absolute(Path::new(&p))?;
        if !p.is_file() {
            bail!("STRATA_PRELOAD_LIB={} does not exist", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot find the strata executable")?;
    let dir = exe
        .parent()
        .context("the strata executable has no directory")?;
    let lib = dir.join(PRELOAD_LIB_NAME);
    if !lib.is_file() {
        bail!(
            "{} not found next to {} — build it with `cargo build -p strata-posix` (same profile as strata), or set STRATA_PRELOAD_LIB to its path",
            PRELOAD_LIB_NAME,
            exe.display()
        );
    }
    Ok(lib)
}

/// The MPI-IO adapter matching CMD's MPI, written next to the socket:
/// `$STRATA_MPI` (`openmpi`, `mpich`, `none`) or what CMD is — an MPI
/// launcher or a program linking an MPI library (`strata_mpiio::detect`).
/// None for a command without MPI. It is preloaded after the POSIX adapter,
/// which buffers the POSIX calls it makes.
fn mpiio_lib(cmd0: &std::ffi::OsStr, dir: Option<&Path>) -> Result<Option<PathBuf>> {
    use strata_mpiio::Mpi;
    let forced = std::env::var("STRATA_MPI").ok().filter(|v| !v.is_empty());
    let mpi = match forced.as_deref() {
        Some("none") => return Ok(None),
        Some(name) => Some(
            Mpi::from_name(name)
                .with_context(|| format!("STRATA_MPI={name}: use openmpi, mpich or none"))?,
        ),
        None => strata_mpiio::which(Path::new(cmd0)).and_then(|p| strata_mpiio::detect(&p)),
    };
    let (Some(mpi), Some(dir)) = (mpi, dir) else {
        return Ok(None);
    };
    match strata_mpiio::install(mpi, dir) {
        Ok(p) => Ok(Some(p)),
        Err(e) => {
            eprintln!(
                "strata: warning: {e}; MPI-IO calls go through the MPI library's own I/O (its POSIX calls are still buffered)"
            );
            Ok(None)
        }
    }
}

// ---------------------------------------------------------------------------
// Sharing one daemon between concurrent runs

/// Connects to the running daemon, or starts one; race-free against other
/// `strata run` processes (and Python `strata.connect()` users) of this user.
fn acquire_daemon(config: Option<&Path>, cfg: &Config) -> Result<SharedUse> {
    let cmd = crate::daemonctl::daemon_command(config, &[])?;
    SharedUse::acquire(cfg, move || cmd).context("cannot start a daemon for `strata run`")
}

// ---------------------------------------------------------------------------
// Signals

static CHILD_PID: AtomicI32 = AtomicI32::new(0);
/// A signal to forward that came before the child's pid was known (0:
/// none): between `spawn` returning and the pid's store, the command may
/// already run and be signalled through us (seen in CI: a SIGTERM lost, the
/// command never ended).
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // Signals from the terminal (si_code SI_KERNEL > 0) already reach CMD,
    // which shares our process group; forward only those sent to us.
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = unsafe { (*info).si_code };
    if code > 0 {
        return;
    }
    let pid = CHILD_PID.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
        return;
    }
    // Atomics only: forwarded by `child_started`, or here if the pid was
    // stored meanwhile (whoever swaps the signal out forwards it, once).
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
    let pid = CHILD_PID.load(Ordering::SeqCst);
    if pid > 0 {
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if sig > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Stores the child's pid, then forwards a signal that came before it.
fn child_started(pid: i32) {
    CHILD_PID.store(pid, Ordering::SeqCst);
    let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
    if sig > 0 {
        // SAFETY: kill takes plain integers; our own child's pid.
        unsafe { libc::kill(pid, sig) };
    }
}

fn install_forwarding() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a plain sigaction with a handler that only does atomics and kill().
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn restore_default_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: resetting to the default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

// ---------------------------------------------------------------------------

/// The daemon's file counters and, in a cluster, this node's name; None
/// when it cannot be asked (gone).
fn counters(socket: &Path) -> Option<(FileCounters, Option<String>)> {
    strata_client::status(socket)
        .map(|s: StatusReply| (s.files, s.cluster.map(|c| c.name)))
        .ok()
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let RunArgs {
        config,
        mode,
        include,
        quiet,
        cmd,
    } = args;
    if cmd.is_empty() {
        bail!("no command given: strata run [--mode M] [--include P]… -- CMD ARGS…");
    }
    let config = match config {
        Some(c) => Some(flush::absolute(&c)?),
        None => None,
    };
    if let Some(c) = &config {
        if !c.is_file() {
            bail!("configuration file {} does not exist", c.display());
        }
    }
    let mut cfg = crate::load_config(config.as_deref())?;
    if let Some(m) = mode {
        cfg.adapter.mode = m;
    }
    let include: Vec<PathBuf> = include
        .iter()
        .map(|p| flush::absolute(p))
        .collect::<Result<_>>()?;
    let set_include = !include.is_empty() || cfg.adapter.include.is_empty();
    if !include.is_empty() {
        cfg.adapter.include = include;
    } else if cfg.adapter.include.is_empty() {
        cfg.adapter.include = vec![flush::absolute(Path::new("."))?];
    }
    let lib = find_preload_lib()?;

    let daemon = acquire_daemon(config.as_deref(), &cfg)?;
    let socket = daemon.socket.clone();
    warn_never_buffered(&cfg, &socket);
    let before = counters(&socket).map(|c| c.0).unwrap_or_default();
    let t0 = Instant::now();

    let mut preload = lib.as_os_str().to_owned();
    if let Some(mpiio) = mpiio_lib(&cmd[0], socket.parent())? {
        preload.push(":");
        preload.push(mpiio);
    }
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut child_cmd = Command::new(&cmd[0]);
    child_cmd
        .args(&cmd[1..])
        .env("LD_PRELOAD", &preload)
        .env("STRATA_SOCKET", &socket);
    if let Some(c) = &config {
        child_cmd.env("STRATA_CONFIG", c);
    }
    if let Some(m) = mode {
        child_cmd.env("STRATA_MODE", m.as_str());
    }
    if set_include {
        let joined: Vec<String> = cfg
            .adapter
            .include
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        child_cmd.env("STRATA_INCLUDE", joined.join(":"));
    }

    // Which paths the run's processes write through the buffer: after a
    // daemon loss, a process started later refuses those (EIO) instead of
    // reading their stale destination bytes. Next to the socket (a private
    // directory); gone with the run.
    let written_log = socket
        .parent()
        .map(|d| d.join(format!("run-{}.written", std::process::id())));
    let written_log = written_log.filter(|p| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(p)
            .is_ok()
    });
    if let Some(p) = &written_log {
        child_cmd.env("STRATA_INTERNAL_WRITTEN_LOG", p);
    }
    struct RemoveOnDrop(Option<PathBuf>);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            if let Some(p) = &self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let _written_log = RemoveOnDrop(written_log);

    install_forwarding();
    let status = match child_cmd.spawn() {
        Ok(mut child) => {
            #[cfg(debug_assertions)]
            if let Some(ms) = std::env::var("STRATA_INTERNAL_FAULT_RUN_PID_DELAY_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
            {
                // tests: the window in which a signal came before the pid
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            child_started(child.id() as i32);
            let st = child.wait();
            CHILD_PID.store(0, Ordering::SeqCst);
            Some(st.context("waiting for the command")?)
        }
        Err(e) => {
            eprintln!("strata: cannot run {}: {e}", Path::new(&cmd[0]).display());
            None
        }
    };
    let code: u8 = match &status {
        None => 127,
        Some(st) => match (st.code(), st.signal()) {
            (Some(c), _) => c as u8,
            (None, Some(sig)) => (128 + sig) as u8,
            _ => 1,
        },
    };
    let run_time = t0.elapsed();

    // Drain DEFAULT-mode data written under the included prefixes.
    let drains = cfg.adapter.mode == Mode::Default
        || cfg
            .adapter
            .prefixes
            .iter()
            .any(|p| p.mode == Some(Mode::Default));
    let mut persist_failed = false;
    if drains {
        match flush::drain(&socket, &cfg.adapter.include, !quiet) {
            Ok(r) => {
                if r.dirty_files > 0 {
                    flush::print_errors(&r);
                    eprintln!(
                        "strata: {} file{} could not be persisted",
                        r.dirty_files,
                        plural(r.dirty_files)
                    );
                    persist_failed = true;
                }
            }
            Err(e) => {
                eprintln!("strata: warning: draining buffered data: {e:#}");
                persist_failed = true;
            }
        }
    }
    let after = counters(&socket);
    let total = t0.elapsed();
    let started = daemon.started;
    restore_default_signals();
    let stopped = match daemon.release() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("strata: warning: stopping the private daemon: {e:#}");
            false
        }
    };
    let Some((after, node)) = after else {
        // Not "0B written": the daemon that counted is gone.
        eprintln!(
            "strata: the daemon went away during the run: no summary; data it buffered and had \
             not persisted is not at the destination (restart it with `strata daemon start`: \
             it recovers what its journal holds, then `strata flush`)"
        );
        return Ok(ExitCode::from(if code == 0 { 1 } else { code }));
    };
    if !quiet {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        eprintln!(
            "strata: {} written to the buffer, {}{} read from the buffer, {} read from the destination, {} flushed ({} flush{}); run {:.2}s, total {:.2}s{}",
            format_size(d(after.write_bytes_total, before.write_bytes_total)),
            // Capacity pressure (buffer full): clean pages evicted, writes sent to the destination.
            match (d(after.write_through_bytes_total, before.write_through_bytes_total), d(after.evicted_bytes_total, before.evicted_bytes_total)) {
                (0, 0) => String::new(),
                (w, e) => format!("{} written through to the destination (buffer full), {} of clean pages evicted, ", format_size(w), format_size(e)),
            },
            format_size(d(after.read_hit_bytes_total, before.read_hit_bytes_total)),
            format_size(d(after.read_dest_bytes_total, before.read_dest_bytes_total)),
            format_size(d(after.flushed_bytes_total, before.flushed_bytes_total)),
            d(after.flushed_files_total, before.flushed_files_total),
            if d(after.flushed_files_total, before.flushed_files_total) == 1 { "" } else { "es" },
            run_time.as_secs_f64(),
            total.as_secs_f64(),
            match (started, stopped) {
                (_, true) => "; private daemon stopped",
                (true, false) => "; daemon left running for other users",
                _ => "",
            }
        );
        if let Some(node) = node {
            // files live at the owner of their path: most bytes are counted there
            eprintln!(
                "strata: (counted by node {node}'s daemon; files owned by other nodes are counted at their owners: `strata cluster status`)"
            );
        }
    }
    if persist_failed && code == 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::from(code))
}

/// The adapter never buffers the daemon's runtime directory nor a tier's
/// directory: an included prefix inside one buffers nothing, said once.
fn warn_never_buffered(cfg: &strata_config::Config, socket: &Path) {
    let mut never: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(d) = socket.parent() {
        never.push((d.to_path_buf(), "the daemon's runtime directory"));
    }
    for dev in &cfg.devices {
        if let Some(p) = &dev.path {
            never.push((p.clone(), "a tier's directory"));
        }
    }
    for inc in &cfg.adapter.include {
        let inc_c = std::fs::canonicalize(inc).unwrap_or_else(|_| inc.clone());
        for (dir, what) in &never {
            let dir_c = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            if inc_c.starts_with(&dir_c) {
                eprintln!(
                    "strata: {} is inside {} ({}), which is never buffered: files there go straight to the file system; run from, or --include, another directory",
                    inc.display(),
                    dir.display(),
                    what
                );
            }
        }
    }
}
