//! Starting, finding and stopping the daemon from the CLI.

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use strata_config::Config;
use strata_proto::control::{ControlReply, ControlRequest, StopReport};

/// How long a starting daemon may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Generous: a stopping daemon first drains dirty DEFAULT-mode files.
const STOP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long to wait for the winner when our daemon lost the instance lock.
const LOST_RACE_WAIT: Duration = Duration::from_secs(10);

pub fn init_logging(cfg: &Config) {
    let filter = std::env::var("STRATA_LOG").unwrap_or_else(|_| cfg.daemon.log.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        // daemon.log is a file: colour codes only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

pub fn ping(socket: &Path) -> bool {
    matches!(
        strata_client::control_request(socket, &ControlRequest::Ping),
        Ok(ControlReply::Ok)
    )
}

/// Starts a detached daemon and waits until it answers.
pub fn start_detached(config: Option<&Path>, cfg: &Config) -> Result<PathBuf> {
    start_detached_pid(config, cfg).map(|(s, _)| s)
}

/// Like [`start_detached`]; also returns the pid of the daemon we started, or
/// `None` if ours lost the start race (the instance lock) to another daemon
/// that now answers on the socket.
pub fn start_detached_pid(config: Option<&Path>, cfg: &Config) -> Result<(PathBuf, Option<u32>)> {
    start_detached_pid_with(config, cfg, &[])
}

/// [`start_detached`] with more arguments for `daemon start --foreground`
/// (a cluster member's).
pub fn start_detached_with(
    config: Option<&Path>,
    cfg: &Config,
    extra: &[std::ffi::OsString],
) -> Result<PathBuf> {
    start_detached_pid_with(config, cfg, extra).map(|(s, _)| s)
}

fn start_detached_pid_with(
    config: Option<&Path>,
    cfg: &Config,
    extra: &[std::ffi::OsString],
) -> Result<(PathBuf, Option<u32>)> {
    let socket = cfg.resolved_socket_path();
    if ping(&socket) {
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
    let exe = std::env::current_exe().context("cannot find the strata executable")?;
    let mut cmd = Command::new(exe);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(["daemon", "start", "--foreground"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches from our terminal and process group.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot spawn the daemon")?;
    let started = Instant::now();
    while started.elapsed() < START_TIMEOUT {
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
    bail!(
        "the daemon did not answer within {:?}; see {}",
        START_TIMEOUT,
        log_path.display()
    )
}

/// Stops the daemon and returns what happened to data it could not write
/// to the destination (an error when the daemon refused to stop).
pub fn stop(cfg: &Config) -> Result<StopReport> {
    stop_with(cfg, false, false)
}

/// `discard`: drop what cannot be persisted; `progress`: show the drain on
/// stderr while waiting.
pub fn stop_with(cfg: &Config, discard: bool, progress: bool) -> Result<StopReport> {
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
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        b.enable_steady_tick(Duration::from_millis(200));
        b.set_message("stopping the daemon");
        b
    });
    let read_report = || -> Option<StopReport> {
        std::fs::read(&report_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    };
    let started = Instant::now();
    let mut last_poll = Instant::now() - Duration::from_secs(1);
    // The daemon removes its socket when it has finished, or writes a
    // "refused" report and serves on.
    while started.elapsed() < STOP_TIMEOUT {
        if !socket.exists() {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            return Ok(read_report().unwrap_or_else(|| StopReport {
                outcome: "stopped".into(),
                files: vec![],
            }));
        }
        if let Some(r) = read_report().filter(|r| r.outcome == "refused") {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
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
        if let Some(b) = &bar {
            if last_poll.elapsed() >= Duration::from_millis(500) {
                last_poll = Instant::now();
                if let Ok(ControlReply::Drain(d)) = strata_client::control_request(
                    &socket,
                    &ControlRequest::DrainStatus { paths: vec![] },
                ) {
                    b.set_message(format!(
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
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("daemon did not stop within {STOP_TIMEOUT:?}")
}

/// A daemon this process started; stopped on drop.
pub struct DaemonGuard {
    cfg: Option<Config>,
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Some(cfg) = self.cfg.take() {
            if let Err(e) = stop(&cfg) {
                eprintln!("strata: warning: stopping the private daemon: {e:#}");
            }
        }
    }
}

/// Uses the running daemon, or starts a private one stopped when the guard drops.
pub fn ensure_daemon(config: Option<&Path>, cfg: &Config) -> Result<DaemonGuard> {
    if ping(&cfg.resolved_socket_path()) {
        return Ok(DaemonGuard { cfg: None });
    }
    start_detached(config, cfg)?;
    Ok(DaemonGuard {
        cfg: Some(cfg.clone()),
    })
}

/// The quick-start demo: zero-config daemon, put/get, status.
pub fn demo(config: Option<&Path>) -> Result<()> {
    let cfg = Config::load_effective(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("strata demo: configuration derived from this machine:");
    for d in &cfg.devices {
        println!(
            "  tier {:<8} {:<4} {:>10}  {}",
            d.name,
            d.kind,
            crate::table::format_size(d.capacity_bytes),
            d.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "(shared memory)".into())
        );
    }
    let guard = ensure_daemon(config, &cfg)?;
    let socket = cfg.resolved_socket_path();
    println!(
        "daemon: {} ({})",
        socket.display(),
        if guard.cfg.is_some() {
            "started privately for this demo"
        } else {
            "already running"
        }
    );
    let client = strata_client::Client::connect_to(&socket).map_err(|e| anyhow::anyhow!("{e}"))?;
    let bucket = client.bucket("demo").map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut total = 0u64;
    let t0 = Instant::now();
    for (i, size) in [1usize << 10, 4 << 10, 64 << 10, 1 << 20, 16 << 20]
        .iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..*size)
            .map(|k| (k as u32).wrapping_mul(2654435761).wrapping_add(i as u32) as u8)
            .collect();
        let name = format!("blob-{size}");
        bucket
            .put(&name, &data)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let back = bucket.get(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
        if back != data {
            bail!("blob {name} came back different");
        }
        let info = bucket.stat(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
        let tiers: Vec<&str> = client
            .hello()
            .tiers
            .iter()
            .enumerate()
            .filter(|(k, _)| info.tier_mask & (1 << k) != 0)
            .map(|(_, t)| t.name.as_str())
            .collect();
        println!(
            "  put + get {:>10}: identical, stored on {}",
            name,
            tiers.join("+")
        );
        total += *size as u64;
    }
    bucket
        .append("log", b"first line\n")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    bucket
        .append("log", b"second line\n")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "  append x2 -> log = {:?}",
        String::from_utf8_lossy(&bucket.get("log").map_err(|e| anyhow::anyhow!("{e}"))?)
    );
    println!(
        "  blobs in bucket demo: {:?}",
        bucket.list().map_err(|e| anyhow::anyhow!("{e}"))?
    );
    println!(
        "moved {} in {:.1} ms",
        crate::table::format_size(total * 2),
        t0.elapsed().as_secs_f64() * 1e3
    );
    let st = strata_client::status(&socket).map_err(|e| anyhow::anyhow!("{e}"))?;
    print!("\n{}", crate::table::status_table(&st));
    bucket.destroy().map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(client);
    drop(guard);
    Ok(())
}
