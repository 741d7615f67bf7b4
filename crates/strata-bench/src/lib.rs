//! strata-bench: the benchmarks behind `strata bench`.
//!
//! * `kv` ([`kv`]): put/get latency (p50/p99/max) and throughput per blob
//!   size × threads × processes, against a memcpy reference at the same
//!   concurrency (`ratio_vs_memcpy`).
//! * `ycsb` ([`ycsb`]): YCSB core workloads A, B, C, D, F on 1 KiB records,
//!   optionally side by side with a private `redis-server` (`--vs-redis`).
//! * `ior` ([`ior`]), `md` ([`md`]): IOR-like checkpoint/restart and
//!   mdtest-like metadata benchmarks of plain POSIX worker processes, directly
//!   on a directory or through the adapter (`--via-strata MODE`).
//! * `adapters` ([`adapters`]): the issue-3 table — ior and md on tmpfs, on the
//!   slow-pfs mount and through strata (private daemons), with ratios.
//! * `cluster` ([`cluster`], beds in [`bed`]): the native API across 1, 2,
//!   4 nodes (network namespaces) against iperf3 and a raw TCP ping-pong
//!   between the same nodes.
//! * `tiers` ([`tiers`], workers in [`vpic`]): the issue-5 experiments —
//!   VPIC/BD-CATS-like I/O on 1, 2 and 3 tiers, the placement engines, the
//!   organizer and prefetcher on a working set larger than RAM ([`tiers_org`]).
//!
//! Generators ([`zipf`]) are ports of YCSB's; latencies go to HDR histograms
//! ([`hist`]). Entry point: [`run`], called by the `strata-bench` binary
//! (`src/main.rs`) once a daemon runs. `strata bench ARGS` execs that binary
//! (found beside `strata`), so the benchmarks, their Redis client and their
//! histograms are not linked into the shipped `strata`.
//!
//! ## The benchmarks
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! A binary of its own (`strata-bench`, `src/main.rs`), so the benchmarks, their Redis client
//! and histograms are not linked into `strata`: `strata bench ARGS` execs the `strata-bench`
//! beside it (as `git`/`cargo` run external subcommands) with `STRATA_BIN` set to itself; the
//! benchmarks start daemons with that `strata` (`strata_exe`) and their worker processes with
//! `strata-bench` itself. A benchmark that needs the configured daemon uses the running one or
//! starts it with `strata daemon start` and stops it at the end.
//! `strata bench kv` (put/get latency percentiles and throughput vs an in-run memcpy
//! reference, threads × processes), `strata bench ycsb [--vs-redis]` (YCSB A, B, C, D, F
//! with zipfian/latest generators against strata and a real `redis-server` it starts on
//! loopback, same run, ratios with spread), `strata bench ior` (IOR-like checkpoint/restart,
//! file per process, optional fsync per write, read phase by the neighbour process),
//! `strata bench md` (mdtest-like create/stat/read/remove) — both directly on a directory or
//! `--via-strata MODE` through the adapter — and `strata bench adapters` (the issue-3 table:
//! tmpfs, slow-pfs and strata setups in one run, ratios with spread). `bench/fio/*.fio` +
//! `scripts/bench-fio.sh` compare fio with and without the adapter. `strata bench drain`
//! measures the destination's raw bandwidth (N writer threads + fdatasync) and strata's drain
//! of the same bytes (buffered with flushing off, then one `flush`) in the same run.
//! `strata bench tiers` runs the issue-5 experiments with private daemons: VPIC-like writes
//! (shared file per timestep, 8 particle variables, one slice per process) and BD-CATS-like
//! strided reads (`vpic.rs`, worker processes) directly on tmpfs, the disk and the destination
//! and through strata with 2 tiers (RAM + destination) and 3 tiers (RAM + dir tier +
//! destination), speedups against 1 tier and a back-of-the-envelope from the bandwidths of the
//! same run; the three placement engines on a put-heavy native-API workload with the data
//! twice the RAM tier and fitting in it (time, latency, bytes per tier, gets); sequential
//! readers of destination files 4 × the RAM tier with read-ahead off or on, compute-bound and
//! I/O-bound (buffer hit rate, run time); and a native read working set larger than RAM with
//! organizer/prefetcher on or off (`tiers_org.rs`: RAM hit rate per pass, throughput). Reads
//! of the disk tier and the destination come after `fdatasync` + `POSIX_FADV_DONTNEED`, so
//! they read the device, not the page cache. `--save` JSON feeds `scripts/plot-tiers.py`
//! (PNGs under `bench/results/`); `scripts/bench-tiers.sh` runs it all.

pub mod adapters;
pub mod bed;
pub mod checkpoint;
pub mod cluster;
pub mod drain;
pub mod hdf5;
pub mod hist;
pub mod ior;
pub mod kv;
pub mod md;
pub mod python;
pub mod redis_peer;
pub mod team;
pub mod tiers;
pub mod tiers_org;
pub mod vpic;
pub mod ycsb;
pub mod zipf;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// Put/get latency and throughput per blob size, threads and processes, vs memcpy.
    Kv(kv::KvArgs),
    /// YCSB core workloads (A, B, C, D, F) on 1 KiB records, optionally vs redis-server.
    Ycsb(ycsb::YcsbArgs),
    /// IOR-like checkpoint/restart: N processes, file per process, write then read another's file.
    Ior(ior::IorArgs),
    /// mdtest-like: N processes create, stat, read and remove files in their own directories.
    Md(md::MdArgs),
    /// The adapter table: ior and md on tmpfs, on slow-pfs and through strata, with ratios.
    Adapters(adapters::AdaptersArgs),
    /// Drain throughput of strata vs the destination's raw bandwidth, same run.
    Drain(drain::DrainArgs),
    /// The tiering experiments: VPIC/BD-CATS-like I/O on 1, 2, 3 tiers; placement engines compared.
    Tiers(tiers::TiersArgs),
    /// The native API across nodes (1, 2, 4 by default) vs raw TCP between the same nodes.
    Cluster(cluster::ClusterArgs),
    /// N-N and N-1 checkpoint/restart under mpirun across nodes (1, 2, 4) vs tmpfs, the destination and the network.
    Checkpoint(checkpoint::CheckpointArgs),
    /// HDF5 write/read (C with the linked driver, h5py with the plugin) through strata vs sec2 on tmpfs and the destination.
    Hdf5(hdf5::Hdf5Args),
    /// The Python package: put/get vs redis-py and file I/O on tmpfs (1 and 4 processes), strata.open vs open, Python vs the Rust client.
    Python(python::PythonArgs),
    /// Internal: the raw TCP peer of `bench cluster` (ping-pong, stream).
    #[command(hide = true)]
    TcpPeer(cluster::TcpPeerArgs),
    /// Internal: one worker process of `bench kv --procs N`.
    #[command(hide = true)]
    KvWorker(kv::KvWorkerArgs),
    /// Internal: one worker process of `bench ior` (plain POSIX I/O).
    #[command(hide = true)]
    IorWorker(ior::IorWorkerArgs),
    /// Internal: one worker process of `bench md` (plain POSIX I/O).
    #[command(hide = true)]
    MdWorker(md::MdWorkerArgs),
    /// Internal: one VPIC/BD-CATS worker process of `bench tiers`.
    #[command(hide = true)]
    VpicWorker(vpic::VpicWorkerArgs),
}

impl BenchCmd {
    /// Does this command talk to the daemon of the effective configuration?
    /// (`adapters` starts private daemons; the file benchmarks without
    /// `--via-strata` and the file workers need none.)
    pub fn needs_daemon(&self) -> bool {
        match self {
            BenchCmd::Kv(_) | BenchCmd::Ycsb(_) | BenchCmd::KvWorker(_) => true,
            BenchCmd::Ior(a) => a.via_strata.is_some(),
            BenchCmd::Md(a) => a.via_strata.is_some(),
            BenchCmd::Adapters(_)
            | BenchCmd::Cluster(_)
            | BenchCmd::Checkpoint(_)
            | BenchCmd::Hdf5(_)
            | BenchCmd::Python(_)
            | BenchCmd::TcpPeer(_)
            | BenchCmd::Drain(_)
            | BenchCmd::Tiers(_)
            | BenchCmd::VpicWorker(_)
            | BenchCmd::IorWorker(_)
            | BenchCmd::MdWorker(_) => false,
        }
    }
}

/// Runs benchmark `cmd` against the daemon listening on `socket`.
pub fn run(cmd: BenchCmd, socket: &Path) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Kv(a) => kv::run(a, socket),
        BenchCmd::Ycsb(a) => ycsb::run(a, socket),
        BenchCmd::KvWorker(a) => kv::run_worker(a),
        BenchCmd::Ior(a) => ior::run(a, socket),
        BenchCmd::Md(a) => md::run(a, socket),
        BenchCmd::Adapters(a) => adapters::run(a, socket),
        BenchCmd::Drain(a) => drain::run(a),
        BenchCmd::Cluster(a) => cluster::run(a),
        BenchCmd::Checkpoint(a) => checkpoint::run(a),
        BenchCmd::Hdf5(a) => hdf5::run(a),
        BenchCmd::Python(a) => python::run(a),
        BenchCmd::TcpPeer(a) => cluster::run_tcp_peer(a),
        BenchCmd::IorWorker(a) => ior::run_worker(a),
        BenchCmd::MdWorker(a) => md::run_worker(a),
        BenchCmd::Tiers(a) => tiers::run(a, socket),
        BenchCmd::VpicWorker(a) => vpic::run_worker(a),
    }
}

/// The `strata` executable the benchmarks start daemons with: `$STRATA_BIN`
/// (set by `strata bench`), else the `strata` beside this executable, else
/// the one on `PATH`.
pub fn strata_exe() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("STRATA_BIN").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("STRATA_BIN={} does not exist", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let beside = exe.with_file_name("strata");
    if beside.is_file() {
        return Ok(beside);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join("strata");
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "cannot find the strata executable (not beside {} nor on PATH): build it with \
         `cargo build --release`, or set STRATA_BIN",
        exe.display()
    )
}
