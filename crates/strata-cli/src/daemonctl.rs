//! Starting, finding and stopping the daemon from the CLI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use strata_config::Config;
use strata_proto::control::StopReport;

pub use strata_launch::{init_logging, ping};

/// The command that runs a daemon of `config` in the foreground: this
/// executable's `daemon start --foreground` plus `extra` arguments.
pub fn daemon_command(config: Option<&Path>, extra: &[std::ffi::OsString]) -> Result<Command> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the strata executable: {e}"))?;
    let mut cmd = Command::new(exe);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(["daemon", "start", "--foreground"]).args(extra);
    Ok(cmd)
}

/// Starts a detached daemon and waits until it answers.
pub fn start_detached(config: Option<&Path>, cfg: &Config) -> Result<PathBuf> {
    start_detached_with(config, cfg, &[])
}

/// [`start_detached`] with more arguments for `daemon start --foreground`
/// (a cluster member's).
pub fn start_detached_with(
    config: Option<&Path>,
    cfg: &Config,
    extra: &[std::ffi::OsString],
) -> Result<PathBuf> {
    strata_launch::start_detached(daemon_command(config, extra)?, cfg).map(|(s, _)| s)
}

/// Stops the daemon and returns what happened to data it could not write
/// to the destination (an error when the daemon refused to stop).
pub fn stop(cfg: &Config) -> Result<StopReport> {
    strata_launch::stop(cfg)
}

/// `discard`: drop what cannot be persisted; `progress`: show the drain on
/// stderr while waiting.
pub fn stop_with(cfg: &Config, discard: bool, progress: bool) -> Result<StopReport> {
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        b.enable_steady_tick(Duration::from_millis(200));
        b.set_message("stopping the daemon");
        b
    });
    let r = strata_launch::stop_with(cfg, discard, &mut |msg| {
        if let Some(b) = &bar {
            b.set_message(msg.to_string());
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    r
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
