//! strata-bench: the benchmarks behind `strata bench`.
//!
//! * `kv` ([`kv`]): put/get latency (p50/p99/max) and throughput per blob
//!   size × threads × processes, against a memcpy reference at the same
//!   concurrency (`ratio_vs_memcpy`).
//! * `ycsb` ([`ycsb`]): YCSB core workloads A, B, C, D, F on 1 KiB records,
//!   optionally side by side with a private `redis-server` (`--vs-redis`).
//!
//! Generators ([`zipf`]) are ports of YCSB's; latencies go to HDR histograms
//! ([`hist`]). Entry point: [`run`], called by the CLI once a daemon runs.

pub mod hist;
pub mod kv;
pub mod redis_peer;
pub mod ycsb;
pub mod zipf;

use std::path::Path;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// Put/get latency and throughput per blob size, threads and processes, vs memcpy.
    Kv(kv::KvArgs),
    /// YCSB core workloads (A, B, C, D, F) on 1 KiB records, optionally vs redis-server.
    Ycsb(ycsb::YcsbArgs),
    /// Internal: one worker process of `bench kv --procs N`.
    #[command(hide = true)]
    KvWorker(kv::KvWorkerArgs),
}

/// Runs benchmark `cmd` against the daemon listening on `socket`.
pub fn run(cmd: BenchCmd, socket: &Path) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Kv(a) => kv::run(a, socket),
        BenchCmd::Ycsb(a) => ycsb::run(a, socket),
        BenchCmd::KvWorker(a) => kv::run_worker(a),
    }
}
