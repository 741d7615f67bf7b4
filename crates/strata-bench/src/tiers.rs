//! `strata bench tiers`: the tiering experiments of issue 5 (after the Hermes
//! slides "Impact of tiering" and "Pros and cons of DPE choice") in one run.
//!
//! **tiering** — a VPIC-like write workload and a BD-CATS-like read workload
//! ([`crate::vpic`]: N processes, shared file per timestep, 8 particle
//! variables, large sequential writes; strided reads in another
//! decomposition) on:
//!
//! | setup | what |
//! |---|---|
//! | `tmpfs` | directly on /dev/shm: the RAM tier's device (reference) |
//! | `disk` | directly on the dir tier's directory: the disk tier's device (reference) |
//! | `1-tier` | directly on the destination (the slow-pfs mount): no buffering |
//! | `2-tiers` | strata DEFAULT, RAM tier + destination |
//! | `3-tiers` | strata DEFAULT, RAM tier + dir tier on disk + destination |
//!
//! The RAM tier is smaller than the data (default half), so with 2 tiers
//! the rest goes to the destination (eviction of flushed pages, then
//! write-through) and with 3 tiers to the disk tier. Per strata setup and
//! repeat: a private daemon; VPIC write (what the application waits for), the
//! drain to the destination (timed apart), the destination's page cache
//! dropped, BD-CATS read (from whatever tier holds each page; read-through
//! from the destination otherwise). Speedups are ratios against `1-tier`.
//!
//! **placement** — the three placement engines on a put-heavy native-API
//! workload (T threads put 1 MiB blobs, more than the RAM tier holds, into a
//! RAM + dir tier daemon whose `placement.policy` is the engine), then get
//! them all back: put/get throughput, put latency, bytes per tier.
//!
//! **organizer** ([`crate::tiers_org`]) — a read workload whose working set
//! is larger than the RAM tier, organizer and prefetcher on/off: RAM hit rate
//! and read throughput.
//!
//! Reads of the `disk` reference and of the dir tier happen after the files were
//! written back and dropped from the page cache, so they read the disk.
//! Repeats interleave the setups; everything is reported as median
//! [min–max] over repeats, ratios as ratio of medians [per-repeat min–max].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::adapters::{default_tier_base, loadavg, num, slow_pfs_mount};
use crate::hist::Hist;
use crate::kv::{format_size, parse_size};
use crate::team::{
    self, median_min_max, worker_cmds, DaemonSpec, PrivateDaemon, Team, ViaMode, WorkerEnv, MIB,
};
use crate::tiers_org::{self, ORG_SETUPS, RA_SETUPS};
use crate::vpic::{self, Geometry};
use crate::zipf::Rng;

#[derive(clap::Args, Debug, Clone)]
pub struct TiersArgs {
    /// Experiments to run (default: all): tiering, placement (data twice the RAM tier),
    /// placement-fit (the same puts with a RAM tier 1.25 × the data), readahead (compute-bound
    /// readers), readahead-io (I/O-bound readers), organizer.
    #[arg(long, value_delimiter = ',')]
    pub experiments: Vec<String>,
    /// Repeats of everything (median [min–max] reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    // ------------------------------------------------ tiering
    /// tiering: VPIC/BD-CATS processes.
    #[arg(long, short = 'n', default_value_t = 4)]
    pub procs: usize,
    /// tiering: timesteps (one shared file each).
    #[arg(long, default_value_t = 4)]
    pub timesteps: u64,
    /// tiering: bytes written by VPIC over all processes and timesteps.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub data: u64,
    /// tiering: BD-CATS read size (strided blocks).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub read_size: u64,
    /// tiering: RAM tier (default: half of --data, so the data does not fit in RAM).
    #[arg(long, value_parser = parse_size)]
    pub ram: Option<u64>,
    /// tiering: dir tier of the 3-tier setup (default: 2 × --data).
    #[arg(long, value_parser = parse_size)]
    pub disk: Option<u64>,
    /// tiering setups (default all): tmpfs, disk, 1-tier, 2-tiers, 3-tiers.
    #[arg(long, value_delimiter = ',')]
    pub setups: Vec<String>,
    // ------------------------------------------------ placement
    /// placement: bytes put over all threads.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub put_data: u64,
    /// placement: blob size.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub put_size: u64,
    /// placement: client threads.
    #[arg(long, default_value_t = 4)]
    pub put_threads: usize,
    /// placement: RAM tier (default: half of --put-data).
    #[arg(long, value_parser = parse_size)]
    pub put_ram: Option<u64>,
    /// placement engines (default all): minimize_io_time, round_robin, random.
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<String>,
    // ------------------------------------------------ organizer
    /// organizer: bytes of blobs loaded (the working set is larger than RAM).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub org_data: u64,
    /// organizer: blob size.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub org_size: u64,
    /// organizer: RAM tier (default: a quarter of --org-data).
    #[arg(long, value_parser = parse_size)]
    pub org_ram: Option<u64>,
    /// organizer: bytes of the hot set read every pass (blobs the load left on disk).
    #[arg(long, default_value = "128MiB", value_parser = parse_size)]
    pub org_hot: u64,
    /// organizer: passes over the hot set (the first one is reported apart).
    #[arg(long, default_value_t = 8)]
    pub org_passes: usize,
    /// organizer and readahead: "compute" between two reads, µs (time the organizer and prefetcher get to act).
    #[arg(long, default_value_t = 2000)]
    pub org_think_us: u64,
    /// organizer setups (default all): off, organizer, prefetch, both.
    #[arg(long, value_delimiter = ',')]
    pub org_setups: Vec<String>,
    // ------------------------------------------------ readahead
    /// readahead: bytes of destination files read sequentially (one reader thread per file).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub ra_data: u64,
    /// readahead: files (= readers).
    #[arg(long, default_value_t = 2)]
    pub ra_files: usize,
    /// readahead: RAM tier (default: a quarter of --ra-data).
    #[arg(long, value_parser = parse_size)]
    pub ra_ram: Option<u64>,
    /// readahead: "compute" between two 1 MiB reads, µs (10 ms: 100 MiB/s per reader, below
    /// what the destination delivers).
    #[arg(long, default_value_t = 10_000)]
    pub ra_think_us: u64,
    /// readahead-io: the same with this compute time (1 ms: the readers want more than the destination delivers).
    #[arg(long, default_value_t = 1_000)]
    pub ra_io_think_us: u64,
    /// readahead: prefetch.readahead_pages of the `readahead` setup.
    #[arg(long, default_value_t = 8)]
    pub ra_pages: u32,
    // ------------------------------------------------ where
    /// The slow-pfs mount (default: $SLOW_PFS_ROOT/mnt, else /tmp/slow-pfs/mnt).
    #[arg(long)]
    pub slow_pfs: Option<PathBuf>,
    /// Destination (default: the slow-pfs mount if mounted, else a directory under $TMPDIR or /tmp).
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// tmpfs directory of the `tmpfs` reference.
    #[arg(long, default_value = "/dev/shm")]
    pub tmpfs: PathBuf,
    /// Where dir tiers (and the `disk` reference) live; must not be tmpfs (default: $TMPDIR if not tmpfs, else the cargo target directory, else /var/tmp).
    #[arg(long)]
    pub tier_dir: Option<PathBuf>,
    /// Time limit of one phase, seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// One JSON document on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Markdown tables (for BENCHMARKS.md).
    #[arg(long)]
    pub markdown: bool,
    /// Also write the JSON document to FILE (input of scripts/plot-tiers.py).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Measure nothing: print the tables of a run saved with --save.
    #[arg(long)]
    pub from: Option<PathBuf>,
}

pub const EXPERIMENTS: [&str; 6] = [
    "tiering",
    "placement",
    "placement-fit",
    "readahead",
    "readahead-io",
    "organizer",
];
pub const TIER_SETUPS: [&str; 5] = ["tmpfs", "disk", "1-tier", "2-tiers", "3-tiers"];
pub const POLICIES: [&str; 3] = ["minimize_io_time", "round_robin", "random"];

/// One measured value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    pub exp: String,
    pub setup: String,
    pub metric: String,
    pub rep: usize,
    pub value: f64,
}

/// A metric of the tables: experiment, name, unit, baseline (setup, metric) of its ratio column.
struct Metric {
    exp: &'static str,
    name: &'static str,
    unit: &'static str,
    baseline: Option<(&'static str, &'static str)>,
}

const METRICS: &[Metric] = &[
    Metric {
        exp: "tiering",
        name: "write",
        unit: "MiB/s",
        baseline: Some(("1-tier", "write")),
    },
    Metric {
        exp: "tiering",
        name: "read",
        unit: "MiB/s",
        baseline: Some(("1-tier", "read")),
    },
    Metric {
        exp: "tiering",
        name: "drain",
        unit: "s",
        baseline: None,
    },
    Metric {
        exp: "tiering",
        name: "write+drain",
        unit: "MiB/s",
        baseline: Some(("1-tier", "write")),
    },
    Metric {
        exp: "tiering",
        name: "read from buffer",
        unit: "%",
        baseline: None,
    },
    Metric {
        exp: "tiering",
        name: "RAM used",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "tiering",
        name: "disk used",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "placement",
        name: "put",
        unit: "MiB/s",
        baseline: Some(("minimize_io_time", "put")),
    },
    Metric {
        exp: "placement",
        name: "put time",
        unit: "s",
        baseline: Some(("minimize_io_time", "put time")),
    },
    Metric {
        exp: "placement",
        name: "put p50",
        unit: "µs",
        baseline: None,
    },
    Metric {
        exp: "placement",
        name: "put p99",
        unit: "µs",
        baseline: None,
    },
    Metric {
        exp: "placement",
        name: "get",
        unit: "MiB/s",
        baseline: Some(("minimize_io_time", "get")),
    },
    Metric {
        exp: "placement",
        name: "RAM used",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "placement",
        name: "disk used",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "readahead",
        name: "read",
        unit: "MiB/s",
        baseline: Some(("off", "read")),
    },
    Metric {
        exp: "readahead",
        name: "run time",
        unit: "s",
        baseline: Some(("off", "run time")),
    },
    Metric {
        exp: "readahead",
        name: "read from buffer",
        unit: "%",
        baseline: None,
    },
    Metric {
        exp: "readahead",
        name: "read ahead",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "readahead",
        name: "read ahead unused",
        unit: "MiB",
        baseline: None,
    },
    Metric {
        exp: "organizer",
        name: "read",
        unit: "MiB/s",
        baseline: Some(("off", "read")),
    },
    Metric {
        exp: "organizer",
        name: "RAM hit",
        unit: "%",
        baseline: None,
    },
    Metric {
        exp: "organizer",
        name: "read pass 1",
        unit: "MiB/s",
        baseline: Some(("off", "read pass 1")),
    },
    Metric {
        exp: "organizer",
        name: "RAM hit pass 1",
        unit: "%",
        baseline: None,
    },
    Metric {
        exp: "organizer",
        name: "read last pass",
        unit: "MiB/s",
        baseline: Some(("off", "read last pass")),
    },
    Metric {
        exp: "organizer",
        name: "RAM hit last pass",
        unit: "%",
        baseline: None,
    },
];

#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub exp: String,
    pub metric: String,
    pub unit: String,
    pub setup: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
    /// Against the experiment's baseline setup (`1-tier`, `minimize_io_time`).
    pub ratio: Option<Ratio>,
}

fn values(samples: &[Sample], exp: &str, setup: &str, metric: &str) -> Vec<(usize, f64)> {
    samples
        .iter()
        .filter(|s| s.exp == exp && s.setup == setup && s.metric == metric)
        .map(|s| (s.rep, s.value))
        .collect()
}

/// Ratio of medians of (setup, metric) to (base setup, base metric), with the per-repeat range.
pub fn ratio(
    samples: &[Sample],
    exp: &str,
    setup: &str,
    metric: &str,
    base: (&str, &str),
) -> Option<Ratio> {
    let a = values(samples, exp, setup, metric);
    let b = values(samples, exp, base.0, base.1);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (ma, _, _) = median_min_max(&a.iter().map(|x| x.1).collect::<Vec<_>>());
    let (mb, _, _) = median_min_max(&b.iter().map(|x| x.1).collect::<Vec<_>>());
    let per: Vec<f64> = a
        .iter()
        .filter_map(|(r, v)| b.iter().find(|(rb, _)| rb == r).map(|(_, w)| v / w))
        .collect();
    let (_, lo, hi) = median_min_max(&per);
    Some(Ratio {
        median: ma / mb,
        min: lo,
        max: hi,
    })
}

/// Setups of an experiment in table order.
fn setup_order(exp: &str) -> &'static [&'static str] {
    match exp {
        "tiering" => &TIER_SETUPS,
        "organizer" => &ORG_SETUPS,
        "readahead" | "readahead-io" => &RA_SETUPS,
        _ => &POLICIES,
    }
}

/// The metric table of an experiment (placement-fit shares placement's).
fn family(exp: &str) -> &str {
    if exp == "placement-fit" {
        "placement"
    } else if exp == "readahead-io" {
        "readahead"
    } else {
        exp
    }
}

pub fn summarize(samples: &[Sample]) -> Vec<Row> {
    let mut rows = Vec::new();
    for exp in EXPERIMENTS {
        for m in METRICS.iter().filter(|m| m.exp == family(exp)) {
            summarize_metric(samples, exp, m, &mut rows);
        }
    }
    rows
}

fn summarize_metric(samples: &[Sample], exp: &str, m: &Metric, rows: &mut Vec<Row>) {
    {
        for s in setup_order(exp) {
            let v = values(samples, exp, s, m.name);
            if v.is_empty() {
                continue;
            }
            let (med, lo, hi) = median_min_max(&v.iter().map(|x| x.1).collect::<Vec<_>>());
            rows.push(Row {
                exp: exp.into(),
                metric: m.name.into(),
                unit: m.unit.into(),
                setup: (*s).into(),
                median: med,
                min: lo,
                max: hi,
                n: v.len(),
                ratio: m.baseline.and_then(|b| ratio(samples, exp, s, m.name, b)),
            });
        }
    }
}

fn med(samples: &[Sample], exp: &str, setup: &str, metric: &str) -> Option<f64> {
    let v: Vec<f64> = values(samples, exp, setup, metric)
        .into_iter()
        .map(|x| x.1)
        .collect();
    (!v.is_empty()).then(|| median_min_max(&v).0)
}

/// Back-of-the-envelope of the tiering experiment from the bandwidths of the
/// reference setups measured in the same run: the bytes that fit in RAM move
/// at tmpfs speed, the rest at the speed of the next tier (disk for 3 tiers,
/// the destination for 2), one after the other (no overlap).
pub fn model(samples: &[Sample], data: u64, ram: u64) -> Vec<String> {
    let mut out = Vec::new();
    let f = (ram as f64 / data as f64).min(1.0);
    for phase in ["write", "read"] {
        let (Some(r), Some(p)) = (
            med(samples, "tiering", "tmpfs", phase),
            med(samples, "tiering", "1-tier", phase),
        ) else {
            continue;
        };
        let d = med(samples, "tiering", "disk", phase);
        let mut line = format!(
            "model, {phase}: {:.0} % of the data fits in RAM; bandwidths of this run: tmpfs {} MiB/s, {}destination {} MiB/s → ceiling of any speedup = tmpfs / destination = {}×",
            f * 100.0,
            num(r),
            d.map(|d| format!("disk {} MiB/s, ", num(d))).unwrap_or_default(),
            num(p),
            num(r / p)
        );
        for (setup, next) in [("2-tiers", Some(p)), ("3-tiers", d)] {
            let Some(next) = next else { continue };
            let est = 1.0 / (f / r + (1.0 - f) / next);
            let meas = med(samples, "tiering", setup, phase);
            line.push_str(&format!(
                "; {setup}: ≈ {} MiB/s = {}× predicted{}",
                num(est),
                num(est / p),
                meas.map(|m| format!(", {} MiB/s = {}× measured", num(m), num(m / p)))
                    .unwrap_or_default()
            ));
        }
        out.push(line);
    }
    out
}

// ---------------------------------------------------------------- tiering

struct Dirs {
    tmpfs: PathBuf,
    disk: PathBuf,
    dest: PathBuf,
    tier_base: PathBuf,
}

/// Sets up one VPIC/BD-CATS run in `dir` and returns its samples.
#[allow(clippy::too_many_arguments)]
fn tiering_run(
    setup: &str,
    rep: usize,
    g: &Geometry,
    dirs: &Dirs,
    ram: u64,
    disk: u64,
    timeout: Duration,
    pb: &ProgressBar,
    socket: &Path,
    counters: &mut Vec<serde_json::Value>,
) -> Result<Vec<Sample>> {
    let pid = std::process::id();
    let base = match setup {
        "tmpfs" => &dirs.tmpfs,
        "disk" => &dirs.disk,
        _ => &dirs.dest,
    };
    let dir = base.join(format!("{setup}-r{rep}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir)?;
    let strata = setup.ends_with("tiers");
    let tier_dir = dirs
        .tier_base
        .join(format!("strata-bench-tiers-{pid}-{setup}-r{rep}"));
    let daemon = if strata {
        pb.set_message(format!("r{rep} {setup}: starting a private daemon"));
        let spec = DaemonSpec {
            ram_bytes: ram,
            disk: (setup == "3-tiers").then(|| (tier_dir.clone(), disk)),
            extra_yaml: String::new(),
        };
        Some(PrivateDaemon::start(&spec)?)
    } else {
        None
    };
    let env = match &daemon {
        Some(d) => WorkerEnv::Strata {
            preload: team::find_preload_lib()?,
            socket: d.socket.clone(),
            config: Some(d.config.clone()),
            mode: ViaMode::Default,
            include: dir.clone(),
        },
        None => WorkerEnv::Direct {
            socket: Some(socket.to_path_buf()),
        },
    };
    let args: Vec<String> = [
        "--timesteps",
        &g.timesteps.to_string(),
        "--slice",
        &g.slice.to_string(),
        "--read-size",
        &g.read_size.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let cmds = worker_cmds("vpic-worker", &dir, g.procs as usize, &env, &args)?;
    let tag = format!("r{rep} {setup}");
    let mut out = Vec::new();
    let mut push = |metric: &str, value: f64| {
        out.push(Sample {
            exp: "tiering".into(),
            setup: setup.into(),
            metric: metric.into(),
            rep,
            value,
        })
    };
    let res = (|| -> Result<()> {
        let mut team = Team::spawn("vpic", cmds, Duration::from_secs(120))?;
        let before = daemon.as_ref().map(|d| d.status()).transpose()?;
        pb.set_message(format!(
            "{tag}: VPIC write {}",
            format_size(g.total_bytes())
        ));
        let w = team.phase("write", timeout)?;
        push("write", w.mib_per_s());
        if let (Some(d), Some(b)) = (&daemon, &before) {
            let st = d.status()?;
            let wrote = st
                .files
                .write_bytes_total
                .saturating_sub(b.files.write_bytes_total)
                + st.files
                    .write_through_bytes_total
                    .saturating_sub(b.files.write_through_bytes_total);
            if wrote == 0 {
                bail!(
                    "{tag}: nothing went through strata: is {} tracked by the adapter?",
                    dir.display()
                );
            }
            let used = |kind: &str| {
                st.tiers
                    .iter()
                    .filter(|t| t.kind == kind)
                    .map(|t| t.used_bytes)
                    .sum::<u64>() as f64
                    / MIB
            };
            push("RAM used", used("ram"));
            if setup == "3-tiers" {
                push("disk used", used("dir"));
            }
            pb.set_message(format!("{tag}: drain"));
            let paths = vec![dir.to_string_lossy().into_owned()];
            let dr = team::drain(&d.socket, &paths, timeout, |s| {
                pb.set_message(format!(
                    "{tag}: drain, {} dirty",
                    format_size(s.dirty_bytes.max(1))
                ))
            })?;
            push("drain", dr.secs);
            push(
                "write+drain",
                g.total_bytes() as f64 / MIB / (w.secs() + dr.secs),
            );
        }
        // The reads must not be served by pages the writes (or the flusher) left in the page cache of the destination mount.
        // Nor by the page cache of the disk: the disk reference's files and the dir tier's data file are
        // written back and dropped, so a read from the disk tier reads the disk.
        if setup != "tmpfs" {
            vpic::drop_cache(&dir, g);
        }
        if let Some(d) = &daemon {
            for f in tiers_org::dir_tier_files(d)? {
                tiers_org::drop_file_cache(&f);
            }
        }
        let before = daemon.as_ref().map(|d| d.status()).transpose()?;
        pb.set_message(format!("{tag}: BD-CATS read"));
        let r = team.phase("read", timeout)?;
        push("read", r.mib_per_s());
        if let (Some(d), Some(b)) = (&daemon, &before) {
            let st = d.status()?;
            let hit = st
                .files
                .read_hit_bytes_total
                .saturating_sub(b.files.read_hit_bytes_total) as f64;
            let dest = st
                .files
                .read_dest_bytes_total
                .saturating_sub(b.files.read_dest_bytes_total) as f64;
            push(
                "read from buffer",
                if hit + dest > 0.0 {
                    100.0 * hit / (hit + dest)
                } else {
                    0.0
                },
            );
            let stv = serde_json::to_value(&st).unwrap_or_default();
            counters.push(serde_json::json!({"exp": "tiering", "setup": setup, "rep": rep, "files": st.files, "tiers": st.tiers, "organizer": stv["organizer"], "prefetch": stv["prefetch"], "write_s": w.secs(), "read_s": r.secs()}));
        }
        pb.set_message(format!("{tag}: cleanup"));
        team.phase("cleanup", timeout)?;
        Ok(())
    })();
    match daemon {
        Some(mut d) => finish(pb, &tag, &mut d, Some(&tier_dir), res)?,
        None => res?,
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

// ---------------------------------------------------------------- placement

fn blob_data(size: usize, tid: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    Rng::new(0x91ace ^ (tid as u64) << 20).fill(&mut b);
    b
}

fn blob_stamp(buf: &mut [u8], tid: usize, i: u64) {
    let w = (tid as u64) << 40 ^ i ^ 0x5157_7a11;
    buf[..8].copy_from_slice(&w.to_le_bytes());
}

fn se(e: strata_client::Error) -> anyhow::Error {
    anyhow!("{e}")
}

/// One placement engine: a fresh daemon, T threads put their blobs, then get them back.
#[allow(clippy::too_many_arguments)]
fn placement_run(
    exp: &str,
    policy: &str,
    rep: usize,
    a: &TiersArgs,
    ram: u64,
    tier_base: &Path,
    timeout: Duration,
    pb: &ProgressBar,
    counters: &mut Vec<serde_json::Value>,
) -> Result<Vec<Sample>> {
    let pid = std::process::id();
    let tier_dir = tier_base.join(format!("strata-bench-tiers-{pid}-{exp}-{policy}-r{rep}"));
    let spec = DaemonSpec {
        ram_bytes: ram,
        disk: Some((tier_dir.clone(), 2 * a.put_data + (256 << 20))),
        extra_yaml: format!("placement:\n  policy: {policy}\n  seed: {}\n", 7 + rep),
    };
    pb.set_message(format!("r{rep} {policy}: starting a private daemon"));
    let mut d = PrivateDaemon::start(&spec)?;
    let tag = format!("r{rep} {exp}/{policy}");
    let threads = a.put_threads;
    let per_thread = a.put_data / a.put_size / threads as u64;
    let size = a.put_size as usize;
    let res = (|| -> Result<Vec<Sample>> {
        let client = strata_client::Client::connect_to(&d.socket).map_err(se)?;
        let bucket = client.bucket("strata-bench-tiers").map_err(se)?;
        let deadline = Instant::now() + timeout;
        pb.set_message(format!(
            "{tag}: put {}",
            format_size(per_thread * threads as u64 * a.put_size)
        ));
        let t0 = Instant::now();
        let hists = std::thread::scope(|s| -> Result<Vec<Hist>> {
            let hs: Vec<_> = (0..threads)
                .map(|tid| {
                    let bucket = &bucket;
                    s.spawn(move || -> Result<Hist> {
                        let mut data = blob_data(size, tid);
                        let mut h = Hist::new();
                        for i in 0..per_thread {
                            blob_stamp(&mut data, tid, i);
                            let t = team::mono_ns();
                            bucket.put(&format!("t{tid}b{i}"), &data).map_err(se)?;
                            h.record_ns(team::mono_ns() - t);
                            if Instant::now() > deadline {
                                bail!("put phase exceeded its time limit");
                            }
                        }
                        Ok(h)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().map_err(|_| anyhow!("put thread panicked"))?)
                .collect()
        })?;
        let put_secs = t0.elapsed().as_secs_f64();
        let mut hist = Hist::new();
        for h in &hists {
            hist.merge(h);
        }
        let st = d.status()?;
        let used = |kind: &str| {
            st.tiers
                .iter()
                .filter(|t| t.kind == kind)
                .map(|t| t.used_bytes)
                .sum::<u64>() as f64
                / MIB
        };
        let bytes = (per_thread * threads as u64 * a.put_size) as f64;
        // Gets from the disk tier read the disk, not the page cache the puts left.
        for f in tiers_org::dir_tier_files(&d)? {
            tiers_org::drop_file_cache(&f);
        }
        pb.set_message(format!("{tag}: get"));
        let t1 = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let hs: Vec<_> = (0..threads)
                .map(|tid| {
                    let bucket = &bucket;
                    s.spawn(move || -> Result<()> {
                        let mut expect = blob_data(size, tid);
                        let mut buf = vec![0u8; size];
                        for i in 0..per_thread {
                            let n = bucket
                                .get_at(&format!("t{tid}b{i}"), 0, &mut buf)
                                .map_err(se)?;
                            blob_stamp(&mut expect, tid, i);
                            if n != size
                                || buf[..8] != expect[..8]
                                || buf[size - 8..] != expect[size - 8..]
                            {
                                bail!("blob t{tid}b{i} came back different");
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in hs {
                h.join().map_err(|_| anyhow!("get thread panicked"))??;
            }
            Ok(())
        })?;
        let get_secs = t1.elapsed().as_secs_f64();
        counters
            .push(serde_json::json!({"exp": exp, "setup": policy, "rep": rep, "tiers": st.tiers}));
        let mut out = Vec::new();
        let mut push = |metric: &str, value: f64| {
            out.push(Sample {
                exp: exp.into(),
                setup: policy.into(),
                metric: metric.into(),
                rep,
                value,
            })
        };
        push("put", bytes / MIB / put_secs);
        push("put time", put_secs);
        push("put p50", hist.p50_us());
        push("put p99", hist.p99_us());
        push("get", bytes / MIB / get_secs);
        push("RAM used", used("ram"));
        push("disk used", used("dir"));
        Ok(out)
    })();
    finish(pb, &tag, &mut d, Some(&tier_dir), res)
}

/// The end of one setup's run: stops its private daemon and removes its dir
/// tier (if any) whatever the outcome; the run's own error is reported first.
pub(crate) fn finish<T>(
    pb: &ProgressBar,
    tag: &str,
    d: &mut PrivateDaemon,
    tier_dir: Option<&Path>,
    res: Result<T>,
) -> Result<T> {
    pb.set_message(format!("{tag}: stopping the daemon"));
    let stopped = d.stop();
    if let Some(t) = tier_dir {
        let _ = std::fs::remove_dir_all(t);
    }
    let out = res?;
    stopped?;
    Ok(out)
}

// ---------------------------------------------------------------- driver

/// Per-process slice of the VPIC layout for `data` bytes: a multiple of 1 MiB
/// (64 KiB for tiny runs), at least one stamp unit.
pub fn slice_for(data: u64, procs: u64, timesteps: u64) -> u64 {
    let raw = data / (vpic::VARS * procs * timesteps).max(1);
    let unit = if raw >= 1 << 20 {
        1 << 20
    } else {
        vpic::STAMP_UNIT
    };
    (raw / unit * unit).max(vpic::STAMP_UNIT)
}

pub fn run(a: TiersArgs, socket: &Path) -> Result<()> {
    if let Some(f) = &a.from {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", f.display()))?;
        if doc["bench"] != "tiers" {
            bail!(
                "{} is not a document saved by `strata bench tiers --save`",
                f.display()
            );
        }
        let samples: Vec<Sample> =
            serde_json::from_value(doc["samples"].clone()).context("samples")?;
        let strings = |k: &str| -> Vec<String> {
            doc[k]
                .as_array()
                .map(|v| {
                    v.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut header = strings("header");
        if let Some(c) = doc["command"].as_str() {
            header.push(format!("command: {c}"));
        }
        return print(&a, &header, &summarize(&samples), &strings("notes"), &text);
    }
    if a.repeat == 0 || a.repeat > 100 {
        bail!("--repeat must be 1..=100");
    }
    for e in &a.experiments {
        if !EXPERIMENTS.contains(&e.as_str()) {
            bail!("unknown experiment {e:?} ({})", EXPERIMENTS.join(", "));
        }
    }
    for s in &a.setups {
        if !TIER_SETUPS.contains(&s.as_str()) {
            bail!("unknown setup {s:?} ({})", TIER_SETUPS.join(", "));
        }
    }
    for p in &a.policies {
        if !POLICIES.contains(&p.as_str()) {
            bail!("unknown placement policy {p:?} ({})", POLICIES.join(", "));
        }
    }
    for s in &a.org_setups {
        if !ORG_SETUPS.contains(&s.as_str()) {
            bail!("unknown organizer setup {s:?} ({})", ORG_SETUPS.join(", "));
        }
    }
    let want = |e: &str| a.experiments.is_empty() || a.experiments.iter().any(|x| x == e);
    let setups: Vec<&str> = TIER_SETUPS
        .iter()
        .copied()
        .filter(|s| a.setups.is_empty() || a.setups.iter().any(|x| x == s))
        .collect();
    let policies: Vec<&str> = POLICIES
        .iter()
        .copied()
        .filter(|s| a.policies.is_empty() || a.policies.iter().any(|x| x == s))
        .collect();
    let g = Geometry {
        procs: a.procs as u64,
        timesteps: a.timesteps,
        slice: slice_for(a.data, a.procs as u64, a.timesteps),
        read_size: a.read_size,
    };
    g.check()?;
    let data = g.total_bytes();
    let ram = a.ram.unwrap_or((data / 2).max(64 << 20));
    let disk = a.disk.unwrap_or(2 * data + (256 << 20));
    if a.put_size < 16
        || a.put_size > 64 << 20
        || a.put_threads == 0
        || a.put_threads > 64
        || a.put_data / a.put_size < a.put_threads as u64
    {
        bail!("--put-size 16 B..=64 MiB, --put-threads 1..=64, --put-data ≥ threads × size");
    }
    let put_ram = a.put_ram.unwrap_or((a.put_data / 2).max(64 << 20));
    let mut notes: Vec<String> = Vec::new();
    // Directories.
    let pid = std::process::id();
    let (slow_mnt, slow_ok) = slow_pfs_mount(a.slow_pfs.as_deref(), a.dest.is_some())?;
    let (dest_root, dest_kind) = match (&a.dest, slow_ok) {
        (Some(d), _) => (
            d.clone(),
            if team::is_tmpfs(d) {
                "tmpfs, given"
            } else {
                "given"
            },
        ),
        (None, true) => (slow_mnt.clone(), "slow-pfs"),
        (None, false) => {
            let t = std::env::temp_dir();
            notes.push(format!("slow-pfs: {} is not mounted — the destination is a local directory (mount it with ../shared/tools/slow-pfs up, or give --dest)", slow_mnt.display()));
            let kind = if team::is_tmpfs(&t) {
                "tmpfs (slow-pfs absent)"
            } else {
                "local temp dir (slow-pfs absent)"
            };
            (t, kind)
        }
    };
    let tier_base = match &a.tier_dir {
        Some(d) => d.clone(),
        None => default_tier_base()?,
    };
    std::fs::create_dir_all(&tier_base)
        .with_context(|| format!("cannot create {}", tier_base.display()))?;
    let tier_base = std::fs::canonicalize(&tier_base)?;
    if team::is_tmpfs(&tier_base) {
        bail!(
            "--tier-dir {} is on tmpfs; dir tiers must live on a disk",
            tier_base.display()
        );
    }
    let dirs = Dirs {
        tmpfs: a.tmpfs.join(format!("strata-bench-tiers-{pid}")),
        disk: tier_base.join(format!("strata-bench-tiers-{pid}-direct")),
        dest: dest_root.join(format!("strata-bench-tiers-{pid}")),
        tier_base: tier_base.clone(),
    };
    let run_tiering = want("tiering") && !setups.is_empty();
    let place_exps: Vec<(&str, u64)> = [
        ("placement", put_ram),
        ("placement-fit", a.put_data + a.put_data / 4),
    ]
    .into_iter()
    .filter(|(e, _)| want(e) && !policies.is_empty())
    .collect();
    let run_placement = !place_exps.is_empty();
    let org_setups: Vec<&str> = ORG_SETUPS
        .iter()
        .copied()
        .filter(|s| a.org_setups.is_empty() || a.org_setups.iter().any(|x| x == s))
        .collect();
    let run_org = want("organizer") && !org_setups.is_empty();
    let known = tiers_org::Known::probe();
    let prefetch_known = known.prefetch;
    let ra_exps: Vec<(&str, u64)> = [
        ("readahead", a.ra_think_us),
        ("readahead-io", a.ra_io_think_us),
    ]
    .into_iter()
    .filter(|(e, _)| want(e))
    .collect();
    let run_ra = !ra_exps.is_empty();
    if run_ra {
        if !prefetch_known {
            bail!("experiment readahead: this build has no `prefetch:` configuration (leave it out with --experiments)");
        }
        if a.ra_files == 0
            || a.ra_files > 64
            || a.ra_data / (a.ra_files as u64) < 1 << 20
            || a.ra_think_us > 1_000_000
            || a.ra_io_think_us > 1_000_000
        {
            bail!("--ra-files 1..=64 with ≥ 1 MiB each, --ra-think-us and --ra-io-think-us ≤ 1 s");
        }
    }
    if run_org {
        if a.org_size < 16
            || a.org_size > 64 << 20
            || a.org_data / a.org_size < 4
            || a.org_passes == 0
            || a.org_passes > tiers_org::PASSES_MAX
            || a.org_think_us > 1_000_000
        {
            bail!("--org-size 16 B..=64 MiB, --org-data ≥ 4 blobs, --org-passes 1..={}, --org-think-us ≤ 1 s", tiers_org::PASSES_MAX);
        }
        if !prefetch_known {
            notes.push("organizer: this build has no `prefetch:`/`trace:` configuration (the prefetcher has not landed): the prefetch setup equals off and both equals organizer".into());
        }
        if !known.windows {
            notes.push("organizer: this build has no organizer.recency_window/frequency_window (the organizer has not landed?): the organizer runs with its defaults".into());
        }
    }
    let load_before = loadavg();
    let mut header = vec![format!(
        "strata bench tiers: {} repeat(s), median [min–max]; machine: {} cores, load average before {load_before}",
        a.repeat,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    )];
    if run_tiering {
        header.push(format!(
            "tiering: VPIC-like write of {} ({} processes × {} timesteps × {} variables × {} slices, ≤ {} per pwrite) then BD-CATS-like strided read ({} blocks); destination {} ({dest_kind}); RAM tier {}, dir tier {} under {}; strata setups in DEFAULT mode through the adapter with the default organizer and prefetch settings, one private daemon per setup and repeat",
            format_size(data),
            g.procs,
            g.timesteps,
            vpic::VARS,
            format_size(g.slice),
            format_size(vpic::WRITE_MAX),
            format_size(g.read_size),
            dirs.dest.display(),
            format_size(ram),
            format_size(disk),
            tier_base.display()
        ));
    }
    if run_placement {
        header.push(format!(
            "placement: {} threads put {} in {} blobs (native API), then get them all (dir tier dropped from the page cache first); RAM tier {} (placement-fit: {}) + dir tier {} under {}; one private daemon per engine and repeat",
            a.put_threads,
            format_size(a.put_data / a.put_size / a.put_threads as u64 * a.put_threads as u64 * a.put_size),
            format_size(a.put_size),
            format_size(put_ram),
            format_size(a.put_data + a.put_data / 4),
            format_size(2 * a.put_data + (256 << 20)),
            tier_base.display()
        ));
    }
    if run_org {
        header.push(format!(
            "organizer: {} of {} blobs loaded into RAM tier {} + dir tier (MinimizeIoTime); hot set {} of blobs that landed on disk, read in a fixed shuffled order {} times (+1 random cold read per 4), {} µs compute between reads; dir tier written back and dropped from the page cache before every pass; 1 reader thread; organizer on = organizer.interval 100ms{}",
            format_size(a.org_data / a.org_size * a.org_size),
            format_size(a.org_size),
            format_size(a.org_ram.unwrap_or((a.org_data / 4).max(64 << 20))),
            format_size(a.org_hot),
            a.org_passes,
            a.org_think_us,
            if known.windows { ", recency_window 1s, frequency_window 5s" } else { "" }
        ));
    }
    if run_ra {
        header.push(format!(
            "readahead: {} readers each read one {} file at the destination sequentially in 1 MiB reads through the client file API (the adapter's path: read-through + fill), compute between reads {} µs (readahead) / {} µs (readahead-io); RAM tier {} (no disk tier); off = prefetch disabled, readahead = prefetch.readahead_pages {}",
            a.ra_files,
            format_size(a.ra_data / a.ra_files as u64 / (1 << 20) * (1 << 20)),
            a.ra_think_us,
            a.ra_io_think_us,
            format_size(a.ra_ram.unwrap_or((a.ra_data / 4).max(64 << 20))),
            a.ra_pages
        ));
    }
    let steps = a.repeat as u64
        * (ra_exps.len() * RA_SETUPS.len()
            + if run_tiering { setups.len() } else { 0 }
            + place_exps.len() * policies.len()
            + if run_org { org_setups.len() } else { 0 }) as u64;
    if steps == 0 {
        bail!("nothing to run");
    }
    let pb = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:25} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    let timeout = Duration::from_secs(a.timeout);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut counters = Vec::new();
    let result = (|| -> Result<()> {
        for rep in 0..a.repeat {
            if run_tiering {
                for s in &setups {
                    samples.extend(
                        tiering_run(
                            s,
                            rep,
                            &g,
                            &dirs,
                            ram,
                            disk,
                            timeout,
                            &pb,
                            socket,
                            &mut counters,
                        )
                        .with_context(|| format!("tiering r{rep} {s}"))?,
                    );
                    pb.inc(1);
                }
            }
            for (e, ram) in &place_exps {
                for p in &policies {
                    samples.extend(
                        placement_run(e, p, rep, &a, *ram, &tier_base, timeout, &pb, &mut counters)
                            .with_context(|| format!("{e} r{rep} {p}"))?,
                    );
                    pb.inc(1);
                }
            }
            if run_ra {
                if rep == 0 {
                    pb.set_message(format!(
                        "readahead: writing {} of files at the destination",
                        format_size(a.ra_data)
                    ));
                    tiers_org::ra_prepare(
                        &dirs.dest.join("readahead"),
                        a.ra_files,
                        a.ra_data / a.ra_files as u64 / (1 << 20) * (1 << 20),
                    )?;
                }
                for (e, think) in &ra_exps {
                    for s in RA_SETUPS {
                        samples.extend(
                            tiers_org::ra_run(
                                e,
                                s,
                                rep,
                                &a,
                                *think,
                                &dirs.dest.join("readahead"),
                                timeout,
                                &pb,
                                &mut counters,
                            )
                            .with_context(|| format!("{e} r{rep} {s}"))?,
                        );
                        pb.inc(1);
                    }
                }
            }
            if run_org {
                for s in &org_setups {
                    samples.extend(
                        tiers_org::org_run(
                            s,
                            rep,
                            &a,
                            &tier_base,
                            known,
                            timeout,
                            &pb,
                            &mut counters,
                        )
                        .with_context(|| format!("organizer r{rep} {s}"))?,
                    );
                    pb.inc(1);
                }
            }
        }
        Ok(())
    })();
    pb.finish_and_clear();
    for d in [&dirs.tmpfs, &dirs.disk, &dirs.dest] {
        let _ = std::fs::remove_dir_all(d);
    }
    result?;
    if run_tiering {
        notes.extend(model(&samples, data, ram));
    }
    notes.push(format!(
        "load average before {load_before}, after {}; {:.0} s in all",
        loadavg(),
        started.elapsed().as_secs_f64()
    ));
    let summary = summarize(&samples);
    let doc = serde_json::json!({
        "bench": "tiers",
        "settings": {
            "repeat": a.repeat, "procs": g.procs, "timesteps": g.timesteps, "slice": g.slice, "read_size": g.read_size,
            "data": data, "ram": ram, "disk": disk, "destination": dirs.dest, "destination_kind": dest_kind, "tier_dir": tier_base,
            "put_data": a.put_data, "put_size": a.put_size, "put_threads": a.put_threads, "put_ram": put_ram, "put_ram_fit": a.put_data + a.put_data / 4,
            "org_data": a.org_data, "org_size": a.org_size, "org_ram": a.org_ram.unwrap_or((a.org_data / 4).max(64 << 20)), "org_hot": a.org_hot,
            "org_passes": a.org_passes, "org_think_us": a.org_think_us, "prefetch_configurable": prefetch_known, "organizer_windows_configurable": known.windows,
            "ra_data": a.ra_data, "ra_files": a.ra_files, "ra_ram": a.ra_ram.unwrap_or((a.ra_data / 4).max(64 << 20)), "ra_pages": a.ra_pages,
            "ra_think_us": a.ra_think_us, "ra_io_think_us": a.ra_io_think_us,
        },
        "header": header,
        "samples": samples,
        "summary": summary,
        "daemon_counters": counters,
        "notes": notes,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
    });
    let text = serde_json::to_string_pretty(&doc)?;
    if let Some(f) = &a.save {
        std::fs::write(f, &text).with_context(|| format!("cannot write {}", f.display()))?;
    }
    print(&a, &header, &summary, &notes, &text)
}

fn ratio_text(r: &Option<Ratio>) -> String {
    match r {
        Some(r) => format!("{}× [{}–{}]", num(r.median), num(r.min), num(r.max)),
        None => "-".into(),
    }
}

fn baseline_of(exp: &str) -> &'static str {
    match exp {
        "tiering" => "vs 1-tier",
        "organizer" | "readahead" | "readahead-io" => "vs off",
        _ => "vs minimize_io_time",
    }
}

fn print(
    a: &TiersArgs,
    header: &[String],
    rows: &[Row],
    notes: &[String],
    json: &str,
) -> Result<()> {
    if a.json {
        println!("{json}");
        return Ok(());
    }
    let exps: Vec<&str> = EXPERIMENTS
        .iter()
        .copied()
        .filter(|e| rows.iter().any(|r| r.exp == *e))
        .collect();
    for h in header {
        println!("{h}{}", if a.markdown { "  " } else { "" });
    }
    for e in exps {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.exp == e).collect();
        println!();
        if a.markdown {
            println!("| {e} | setup | median [min–max] | {} |", baseline_of(e));
            println!("|---|---|---|---|");
            for r in rs {
                println!(
                    "| {} {} | {} | {} [{}–{}] | {} |",
                    r.metric,
                    r.unit,
                    r.setup,
                    num(r.median),
                    num(r.min),
                    num(r.max),
                    ratio_text(&r.ratio)
                );
            }
        } else {
            let cells: Vec<[String; 4]> = rs
                .iter()
                .map(|r| {
                    [
                        format!("{} {}", r.metric, r.unit),
                        r.setup.clone(),
                        format!("{} [{}–{}]", num(r.median), num(r.min), num(r.max)),
                        ratio_text(&r.ratio),
                    ]
                })
                .collect();
            let head = [
                e.to_uppercase(),
                "SETUP".into(),
                "MEDIAN [MIN–MAX]".into(),
                baseline_of(e).to_uppercase(),
            ];
            let mut w = head.clone().map(|h| h.chars().count());
            for c in &cells {
                for (i, x) in c.iter().enumerate() {
                    w[i] = w[i].max(x.chars().count());
                }
            }
            let line = |c: &[String]| {
                let mut s = String::new();
                for (i, x) in c.iter().enumerate() {
                    let pad = " ".repeat(w[i] - x.chars().count());
                    if i >= 2 {
                        s.push_str(&pad);
                        s.push_str(x);
                    } else {
                        s.push_str(x);
                        s.push_str(&pad);
                    }
                    s.push_str("  ");
                }
                println!("{}", s.trim_end());
            };
            line(&head);
            let mut last = String::new();
            for (r, c) in rs.iter().zip(&cells) {
                if !last.is_empty() && last != r.metric {
                    println!();
                }
                last = r.metric.clone();
                line(c);
            }
        }
    }
    if !notes.is_empty() {
        println!();
        for n in notes {
            println!("- {n}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(setup: &str, metric: &str, rep: usize, value: f64) -> Sample {
        Sample {
            exp: "tiering".into(),
            setup: setup.into(),
            metric: metric.into(),
            rep,
            value,
        }
    }

    #[test]
    fn slices() {
        // 2 GiB over 4 processes × 4 timesteps × 8 variables = 16 MiB slices.
        assert_eq!(slice_for(2 << 30, 4, 4), 16 << 20);
        // Rounded down to whole MiB; tiny runs to 64 KiB.
        assert_eq!(slice_for((2 << 30) + 12345, 4, 4), 16 << 20);
        assert_eq!(slice_for(1 << 20, 2, 2), 64 << 10);
        assert_eq!(slice_for(1, 4, 4), 64 << 10);
    }

    #[test]
    fn speedups_and_model() {
        let v = vec![
            s("1-tier", "write", 0, 100.0),
            s("1-tier", "write", 1, 200.0),
            s("tmpfs", "write", 0, 2000.0),
            s("tmpfs", "write", 1, 2000.0),
            s("3-tiers", "write", 0, 1000.0),
            s("3-tiers", "write", 1, 1000.0),
            s("disk", "write", 0, 1000.0),
            s("disk", "write", 1, 1000.0),
        ];
        let r = ratio(&v, "tiering", "3-tiers", "write", ("1-tier", "write")).unwrap();
        assert!((r.median - 1000.0 / 150.0).abs() < 1e-9);
        assert!((r.min - 5.0).abs() < 1e-9 && (r.max - 10.0).abs() < 1e-9);
        let rows = summarize(&v);
        assert_eq!(
            rows.iter().map(|r| r.setup.as_str()).collect::<Vec<_>>(),
            ["tmpfs", "disk", "1-tier", "3-tiers"]
        );
        assert!(
            rows.iter()
                .find(|r| r.setup == "1-tier")
                .unwrap()
                .ratio
                .as_ref()
                .unwrap()
                .median
                == 1.0
        );
        // Half in RAM at 2000, half on the disk at 1000: 1333 MiB/s; half at the destination (150): 279 MiB/s.
        let m = model(&v, 2 << 30, 1 << 30);
        assert_eq!(m.len(), 1);
        assert!(m[0].contains("3-tiers: ≈ 1 333 MiB/s"), "{}", m[0]);
        assert!(m[0].contains("2-tiers: ≈ 279 MiB/s"), "{}", m[0]);
    }
}
