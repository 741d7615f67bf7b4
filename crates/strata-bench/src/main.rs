//! `strata-bench`: the benchmarks, a binary of their own so that `strata`
//! stays thin. `strata bench ARGS` execs this binary with the same ARGS (and
//! `--config`), so every command in BENCHMARKS.md runs either way.
//!
//! Benchmarks that talk to the daemon of the effective configuration (`kv`,
//! `ycsb`, `ior`/`md --via-strata`) use the running one, or start one with
//! `strata daemon start` and stop it (draining) when they end.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::Parser;
use strata_bench::BenchCmd;
use strata_config::Config;
use strata_proto::control::{ControlReply, ControlRequest};

#[derive(Parser)]
#[command(
    name = "strata-bench",
    version,
    about = "strata's benchmarks (also run as `strata bench …`)"
)]
struct Cli {
    /// Configuration file (default: $STRATA_CONFIG, else derived from this machine).
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: BenchCmd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let cfg = Config::load_effective(cli.config.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let socket = cfg.resolved_socket_path();
    // Benches that start their own daemons (or run directly on a directory)
    // do not need one here.
    let started = if cli.cmd.needs_daemon() && !ping(&socket) {
        Some(PrivateDaemon::start(cli.config.as_deref(), &socket)?)
    } else {
        None
    };
    let res = strata_bench::run(cli.cmd, &socket);
    if let Some(d) = started {
        d.stop()?;
    }
    res
}

fn ping(socket: &Path) -> bool {
    matches!(
        strata_client::control_request(socket, &ControlRequest::Ping),
        Ok(ControlReply::Ok)
    )
}

/// A daemon this run started with `strata daemon start`; stopped (drained)
/// with `strata daemon stop`.
struct PrivateDaemon {
    config: Option<PathBuf>,
}

impl PrivateDaemon {
    fn start(config: Option<&Path>, socket: &Path) -> Result<PrivateDaemon> {
        let d = PrivateDaemon {
            config: config.map(Path::to_path_buf),
        };
        d.strata(&["daemon", "start"])?;
        if !ping(socket) {
            bail!(
                "`strata daemon start` returned but no daemon answers on {}",
                socket.display()
            );
        }
        Ok(d)
    }

    fn stop(self) -> Result<()> {
        self.strata(&["daemon", "stop"])
    }

    fn strata(&self, args: &[&str]) -> Result<()> {
        let exe = strata_bench::strata_exe()?;
        let mut cmd = Command::new(&exe);
        if let Some(c) = &self.config {
            cmd.arg("--config").arg(c);
        }
        // Its messages go to stderr: stdout carries the results (--json).
        let status = cmd
            .args(args)
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        if !status.success() {
            bail!("`{} {}` failed ({status})", exe.display(), args.join(" "));
        }
        Ok(())
    }
}
