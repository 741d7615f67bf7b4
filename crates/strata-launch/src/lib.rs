//! Finding, starting, sharing and stopping a daemon: the one way the CLI
//! (`strata daemon start|stop`, `strata run`, `strata demo`) and the Python
//! package (`strata.connect()` with no daemon running) do it.
//!
//! **Architecture Invariant.** A daemon is started detached (its own
//! session, stdin closed, output appended to `<socket>.log`, mode 0600) and
//! waited for by pinging its socket, with a deadline; a daemon someone else
//! started is never stopped by a [`SharedUse`]; every wait has a deadline.
//!
//! **API Boundary.** The control socket (`Ping`, `Stop`, `DrainStatus`) and
//! lock files next to the socket. How the daemon process is spelled (the
//! `strata` executable, or a Python interpreter hosting it) is the caller's
//! [`Command`].

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::fs::{flock, FlockOperation};
use strata_config::Config;
use strata_proto::control::{ControlReply, ControlRequest, StopReport};

/// How long a starting daemon may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Generous: a stopping daemon first drains dirty DEFAULT-mode files.
const STOP_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest a start may take while the daemon says it is starting (a large
/// journal to replay).
const REPLAY_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long to wait for the winner when our daemon lost the instance lock.
const LOST_RACE_WAIT: Duration = Duration::from_secs(10);
/// How often `stop_with` reports the drain to its caller.
const STOP_REPORT_INTERVAL: Duration = Duration::from_millis(500);

/// Logging of a daemon running in this process: `$STRATA_LOG`, else the
/// configuration's level, as text or JSON lines (`daemon.log_format`), to
/// stderr (colours only on a terminal). When stderr is the detached
/// daemon's log file (`<socket>.log`), the file is rotated past
/// `daemon.log_size_max`, keeping `daemon.log_keep` old ones.
pub fn init_logging(cfg: &Config) {
    use strata_daemon::logging::{RotatingStderr, RotatingStderrMaker};
    let filter = std::env::var("STRATA_LOG").unwrap_or_else(|_| cfg.daemon.log.to_string());
    let file = cfg.resolved_socket_path().with_extension("log");
    let rot = RotatingStderr::attach(&file, cfg.daemon.log_size_max_bytes, cfg.daemon.log_keep);
    let ansi = rot.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(ansi);
    let json = cfg.daemon.log_format == strata_config::LogFormat::Json;
    let _ = match (json, rot) {
        (true, Some(r)) => b.json().with_writer(RotatingStderrMaker(r)).try_init(),
        (true, None) => b.json().with_writer(std::io::stderr).try_init(),
        (false, Some(r)) => b.with_writer(RotatingStderrMaker(r)).try_init(),
        (false, None) => b.with_writer(std::io::stderr).try_init(),
    };
}

/// Whether a daemon on `socket` answers that it is still starting.
pub fn starting(socket: &Path) -> bool {
    matches!(
        strata_client::control_request(socket, &ControlRequest::Ping),
        Ok(ControlReply::Error { code, .. }) if code == strata_proto::Errno::Busy.code()
    )
}

/// Waits (up to [`REPLAY_TIMEOUT`]) while a daemon on `socket` says it is
/// starting; then whether it answers.
pub fn ready_after_start(socket: &Path) -> bool {
    let t = Instant::now();
    while starting(socket) && t.elapsed() < REPLAY_TIMEOUT {
        std::thread::sleep(Duration::from_millis(20));
    }
    ping(socket)
}

/// Whether a daemon answers on `socket` (and has finished starting).
pub fn ping(socket: &Path) -> bool {
    matches!(
        strata_client::control_request(socket, &ControlRequest::Ping),
        Ok(ControlReply::Ok)
    )
}

/// Starts `daemon` — a command that runs a daemon of `cfg` in the
/// foreground — detached, and waits until it answers on the configured
/// socket. Returns the socket and the pid of the daemon we started, or
/// `None` if ours lost the start race (the instance lock) to another
/// daemon that now answers.
pub fn start_detached(mut daemon: Command, cfg: &Config) -> Result<(PathBuf, Option<u32>)> {
    let socket = cfg.resolved_socket_path();
    if ping(&socket) || starting(&socket) {
        bail!(
            "a strata daemon is already running (socket {}); stop it with `strata daemon stop`",
            socket.display()
        );
    }
    let dir = socket.parent().context("socket has no parent directory")?;
    strata_daemon::identity::private_dir(dir, "runtime directory", false)?;
    let log_path = socket.with_extension("log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    daemon
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches from our terminal and process group.
    unsafe {
        daemon.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = daemon.spawn().context("cannot spawn the daemon")?;
    let started = Instant::now();
    let mut deadline = started + START_TIMEOUT;
    while Instant::now() < deadline {
        // A daemon replaying a large journal answers "starting": it gets
        // more time while it does (bounded).
        if starting(&socket) {
            deadline = deadline.max((Instant::now() + START_TIMEOUT).min(started + REPLAY_TIMEOUT));
        }
        if ping(&socket) {
            let pid = child.id();
            return Ok((socket, child.try_wait()?.is_none().then_some(pid)));
        }
        if let Some(status) = child.try_wait()? {
            // Another daemon may hold the instance lock and still be starting.
            let lost = Instant::now();
            while lost.elapsed() < LOST_RACE_WAIT {
                if ping(&socket) {
                    return Ok((socket, None));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            bail!(
                "the daemon exited at start ({status}); last log lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Not ours to leave running half-started.
    let _ = child.kill();
    let _ = child.wait();
    bail!(
        "the daemon did not answer within {:?}; see {}",
        START_TIMEOUT,
        log_path.display()
    )
}

/// Stops the daemon of `cfg` and returns what happened to data it could
/// not write to the destination (an error when the daemon refused to
/// stop). `discard`: drop what cannot be persisted. `on_wait` is told, every
/// half second while the daemon drains, what is left ("draining N file(s), X
/// to write").
pub fn stop_with(cfg: &Config, discard: bool, on_wait: &mut dyn FnMut(&str)) -> Result<StopReport> {
    let socket = cfg.resolved_socket_path();
    let report_path = strata_proto::control::stop_report_path(&socket);
    let _ = std::fs::remove_file(&report_path);
    let req = if discard {
        ControlRequest::StopDiscard
    } else {
        ControlRequest::Stop
    };
    let reply = strata_client::control_request(&socket, &req)
        .map_err(|e| anyhow::anyhow!("no daemon to stop at {} ({e})", socket.display()))?;
    if !matches!(reply, ControlReply::Ok) {
        bail!("daemon refused to stop: {reply:?}");
    }
    let read_report = || -> Option<StopReport> {
        std::fs::read(&report_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    };
    let started = Instant::now();
    let mut last_poll = Instant::now() - STOP_REPORT_INTERVAL;
    // The daemon removes its socket when it has finished, or writes a
    // "refused" report and serves on.
    while started.elapsed() < STOP_TIMEOUT {
        if !socket.exists() {
            return Ok(read_report().unwrap_or_else(|| StopReport {
                outcome: "stopped".into(),
                files: vec![],
            }));
        }
        if let Some(r) = read_report().filter(|r| r.outcome == "refused") {
            let _ = std::fs::remove_file(&report_path);
            let mut msg = format!("the daemon did not stop: {} file(s) cannot be written to the destination and no non-volatile tier can keep them:\n", r.files.len());
            for f in r.files.iter().filter(|f| !f.kept) {
                msg.push_str(&format!(
                    "  {} ({} not persisted): {}\n",
                    f.path,
                    strata_config::format_size(f.bytes),
                    f.error
                ));
            }
            msg.push_str("it keeps running and retrying; fix the destination (see `strata drain status`), or stop with `strata daemon stop --discard` to drop this data");
            bail!("{msg}");
        }
        if last_poll.elapsed() >= STOP_REPORT_INTERVAL {
            last_poll = Instant::now();
            if let Ok(ControlReply::Drain(d)) = strata_client::control_request(
                &socket,
                &ControlRequest::DrainStatus { paths: vec![] },
            ) {
                on_wait(&format!(
                    "stopping: draining {} file(s), {} to write{}",
                    d.dirty_files,
                    strata_config::format_size(d.dirty_bytes),
                    if d.failed_files > 0 {
                        format!(", {} failing", d.failed_files)
                    } else {
                        String::new()
                    }
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("daemon did not stop within {STOP_TIMEOUT:?}")
}

/// Stops the daemon of `cfg`, draining first, without progress reports.
pub fn stop(cfg: &Config) -> Result<StopReport> {
    stop_with(cfg, false, &mut |_| {})
}

fn lock_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))
}

/// One user's hold on a daemon shared by several processes of a node
/// (`strata run` of every MPI rank, Python processes calling
/// `strata.connect()`): starting is serialised by `<socket>.start-lock`,
/// every user holds a shared lock on `<socket>.users` while it uses the
/// daemon, and a daemon started this way (its pid in `<socket>.run-owned`)
/// is stopped by the last user to leave — the one whose upgrade to an
/// exclusive lock succeeds. A daemon the user started (`strata daemon
/// start`) is never stopped.
pub struct SharedUse {
    pub socket: PathBuf,
    cfg: Config,
    users: File,
    marker: PathBuf,
    /// This user started the daemon.
    pub started: bool,
}

fn marker_pid(marker: &Path) -> Option<u32> {
    std::fs::read_to_string(marker).ok()?.trim().parse().ok()
}

impl SharedUse {
    /// Uses the daemon answering on `cfg`'s socket, or starts one with
    /// `daemon` (see [`start_detached`]); race-free against other users.
    pub fn acquire(cfg: &Config, daemon: impl FnOnce() -> Command) -> Result<SharedUse> {
        let socket = cfg.resolved_socket_path();
        let dir = socket.parent().context("socket has no parent directory")?;
        strata_daemon::identity::private_dir(dir, "runtime directory", false)?;
        let start_lock = lock_file(&socket.with_extension("start-lock"))?;
        flock(start_lock.as_fd(), FlockOperation::LockExclusive)
            .context("cannot lock the start lock")?;
        let users = lock_file(&socket.with_extension("users"))?;
        // Blocks while the last user of a shared daemon is stopping it.
        flock(users.as_fd(), FlockOperation::LockShared).context("cannot lock the users lock")?;
        let marker = socket.with_extension("run-owned");
        let mut started = false;
        // A daemon still starting (replaying its journal) is waited for,
        // not raced by a second one.
        if !ping(&socket) && !ready_after_start(&socket) {
            let (_, ours) =
                start_detached(daemon(), cfg).context("cannot start a private strata daemon")?;
            // `ours` is None when a daemon started by someone else won the race.
            if let Some(pid) = ours {
                std::fs::write(&marker, format!("{pid}\n"))
                    .with_context(|| format!("cannot write {}", marker.display()))?;
                started = true;
            }
        }
        drop(start_lock);
        Ok(SharedUse {
            socket,
            cfg: cfg.clone(),
            users,
            marker,
            started,
        })
    }

    /// Leaves: stops the daemon (draining it) if it was started by a shared
    /// user and this is its last user. Returns whether it stopped it.
    pub fn release(self) -> Result<bool> {
        // Converting shared → exclusive without blocking succeeds only for
        // the last user (a failed conversion drops our shared lock, which is
        // what leaving means anyway).
        if flock(self.users.as_fd(), FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(false);
        }
        let daemon_pid = strata_client::status(&self.socket).ok().map(|s| s.pid);
        let owned = match (marker_pid(&self.marker), daemon_pid) {
            (Some(m), Some(d)) => m == d,
            _ => false,
        };
        if !owned {
            return Ok(false);
        }
        stop(&self.cfg)?;
        let _ = std::fs::remove_file(&self.marker);
        Ok(true)
    }
}
