//! strata-bench: benchmarks (placeholder until the bench helper lands).
use std::path::Path;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// Put/get latency and throughput.
    Kv,
}

pub fn run(_cmd: BenchCmd, _socket: &Path) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
