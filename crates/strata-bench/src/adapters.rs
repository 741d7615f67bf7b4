//! `strata bench adapters`: the adapter table of issue 3 from one run.
//!
//! Workloads: `ior` (N processes, file per process, write then read another
//! process's file), `ior+fsync` (the same with fsync after each write) and `md`
//! (create / stat / read / remove). Setups:
//!
//! | setup | how |
//! |---|---|
//! | `tmpfs` | directly on a directory under /dev/shm |
//! | `slow-pfs` | directly on the slow-pfs mount (`../shared/tools/slow-pfs up`) |
//! | `scratch-ram` | through strata, SCRATCH, RAM tier |
//! | `default-ram` | through strata, DEFAULT, RAM tier (+ drain time) |
//! | `default-ram+disk` | through strata, DEFAULT, a small RAM tier + a dir tier on disk |
//!
//! Every strata setup gets its own private daemon (generated configuration)
//! per repeat; its destination is the slow-pfs mount (a tmpfs directory if the
//! mount is absent, said in the output). Repeats interleave the setups; the
//! table gives median [min–max] and ratios of medians against the tmpfs and
//! slow-pfs setups (with the range of per-repeat ratios).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::ior::{self, IorSpec, Verify};
use crate::kv::{format_size, parse_size};
use crate::md::{self, parse_size0, MdSpec};
use crate::team::{self, median_min_max, DaemonSpec, PrivateDaemon, ViaMode, WorkerEnv};

#[derive(clap::Args, Debug, Clone)]
pub struct AdaptersArgs {
    /// Processes of every workload.
    #[arg(long, short = 'n', default_value_t = 4)]
    pub procs: usize,
    /// ior bytes per write/read call.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub transfer_size: u64,
    /// ior bytes per process.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub block_size: u64,
    /// ior+fsync bytes per process (default: --block-size).
    #[arg(long, value_parser = parse_size)]
    pub fsync_block_size: Option<u64>,
    /// md files per process.
    #[arg(long, default_value_t = 1000)]
    pub md_files: u64,
    /// md bytes written into each file.
    #[arg(long, default_value = "4KiB", value_parser = parse_size0)]
    pub md_write_bytes: u64,
    /// Repeats of everything (median and min–max reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Before measuring a strata setup, run one untimed ior (SCRATCH, same
    /// sizes, files removed afterwards) against its fresh daemon: measures a
    /// warm daemon (RAM tier pages already faulted in, as in a long-running
    /// node daemon) instead of a cold start.
    #[arg(long)]
    pub warm_up: bool,
    /// The slow-pfs mount (default: $SLOW_PFS_ROOT/mnt, else /tmp/slow-pfs/mnt, as `slow-pfs up` mounts it).
    #[arg(long)]
    pub slow_pfs: Option<PathBuf>,
    /// Destination of the strata setups (default: the slow-pfs mount if mounted, else a
    /// directory under $TMPDIR or /tmp; never /dev/shm, which the adapter does not buffer).
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// tmpfs directory for the tmpfs baseline.
    #[arg(long, default_value = "/dev/shm")]
    pub tmpfs: PathBuf,
    /// Where the dir tier of the RAM+disk setup lives (must not be tmpfs; default: $TMPDIR if not tmpfs, else the cargo target directory, else /var/tmp).
    #[arg(long)]
    pub tier_dir: Option<PathBuf>,
    /// RAM tier of the RAM-only setups (default: 2 × the ior data + 1 GiB).
    #[arg(long, value_parser = parse_size)]
    pub ram_capacity: Option<u64>,
    /// RAM tier of the RAM+disk setup (default: half the ior data, so the disk tier takes the rest).
    #[arg(long, value_parser = parse_size)]
    pub tiered_ram: Option<u64>,
    /// Setups to run (default all): tmpfs, slow-pfs, scratch-ram, default-ram, default-ram+disk.
    #[arg(long, value_delimiter = ',')]
    pub setups: Vec<String>,
    /// Workloads to run (default all): ior, ior+fsync, md.
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// ior read-phase check.
    #[arg(long, value_enum, default_value_t = Verify::Cheap)]
    pub verify: Verify,
    /// Time limit of one phase, seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// One JSON document on stdout (samples, summary, targets) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Markdown tables (for BENCHMARKS.md) instead of the plain table.
    #[arg(long)]
    pub markdown: bool,
    /// Also write the JSON document to FILE (whatever is printed).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Measure nothing: print the tables of a run saved with --save (with --markdown or --json).
    #[arg(long)]
    pub from: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Tmpfs,
    SlowPfs,
    Strata { mode: ViaMode, disk: bool },
}

#[derive(Debug, Clone)]
struct Setup {
    key: &'static str,
    how: How,
}

const ALL_SETUPS: [Setup; 5] = [
    Setup {
        key: "tmpfs",
        how: How::Tmpfs,
    },
    Setup {
        key: "slow-pfs",
        how: How::SlowPfs,
    },
    Setup {
        key: "scratch-ram",
        how: How::Strata {
            mode: ViaMode::Scratch,
            disk: false,
        },
    },
    Setup {
        key: "default-ram",
        how: How::Strata {
            mode: ViaMode::Default,
            disk: false,
        },
    },
    Setup {
        key: "default-ram+disk",
        how: How::Strata {
            mode: ViaMode::Default,
            disk: true,
        },
    },
];
const ALL_WORKLOADS: [&str; 3] = ["ior", "ior+fsync", "md"];

/// One measured value.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct Sample {
    setup: String,
    metric: String,
    rep: usize,
    value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_us: Option<f64>,
}

/// A metric of the table: name, unit, and the metric its ratios are taken against.
struct Metric {
    name: &'static str,
    unit: &'static str,
    baseline: Option<&'static str>,
}

const METRICS: [Metric; 12] = [
    Metric {
        name: "ior write",
        unit: "MiB/s",
        baseline: Some("ior write"),
    },
    Metric {
        name: "ior read",
        unit: "MiB/s",
        baseline: Some("ior read"),
    },
    Metric {
        name: "ior drain",
        unit: "s",
        baseline: None,
    },
    Metric {
        name: "ior write+drain",
        unit: "MiB/s",
        baseline: Some("ior write"),
    },
    Metric {
        name: "ior+fsync write",
        unit: "MiB/s",
        baseline: Some("ior+fsync write"),
    },
    Metric {
        name: "ior+fsync read",
        unit: "MiB/s",
        baseline: Some("ior+fsync read"),
    },
    Metric {
        name: "ior+fsync drain",
        unit: "s",
        baseline: None,
    },
    Metric {
        name: "ior+fsync write+drain",
        unit: "MiB/s",
        baseline: Some("ior+fsync write"),
    },
    Metric {
        name: "md create",
        unit: "ops/s",
        baseline: Some("md create"),
    },
    Metric {
        name: "md stat",
        unit: "ops/s",
        baseline: Some("md stat"),
    },
    Metric {
        name: "md read",
        unit: "ops/s",
        baseline: Some("md read"),
    },
    Metric {
        name: "md remove",
        unit: "ops/s",
        baseline: Some("md remove"),
    },
];

#[derive(Debug, Clone, Serialize)]
struct Ratio {
    median: f64,
    min: f64,
    max: f64,
}

#[derive(Debug, Clone, Serialize)]
struct SummaryRow {
    metric: String,
    unit: String,
    setup: String,
    median: f64,
    min: f64,
    max: f64,
    n: usize,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    vs_tmpfs: Option<Ratio>,
    vs_slow_pfs: Option<Ratio>,
}

#[derive(Debug, Clone, Serialize)]
struct Check {
    /// "tmpfs ior write" etc.
    against: String,
    ratio: Option<Ratio>,
    goal: f64,
    met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
struct TargetRow {
    target: String,
    setup: String,
    checks: Vec<Check>,
    /// All checks met (None: not measured).
    met: Option<bool>,
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) fn default_slow_pfs() -> PathBuf {
    let root = std::env::var_os("SLOW_PFS_ROOT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/slow-pfs"));
    root.join("mnt")
}

/// The slow-pfs mount point (`--slow-pfs`, else the default) and whether it
/// is mounted. An explicit `--slow-pfs` that is not a mount point is an
/// error unless `--dest` replaces it (`dest_given`).
pub(crate) fn slow_pfs_mount(given: Option<&Path>, dest_given: bool) -> Result<(PathBuf, bool)> {
    let mnt = given
        .map(Path::to_path_buf)
        .unwrap_or_else(default_slow_pfs);
    let mounted = mnt.is_dir() && team::is_mountpoint(&mnt);
    if given.is_some() && !dest_given && !mounted {
        bail!("--slow-pfs {}: not a mount point (mount it with ../shared/tools/slow-pfs up, or give a plain directory with --dest)", mnt.display());
    }
    Ok((mnt, mounted))
}

pub(crate) fn default_tier_base() -> Result<PathBuf> {
    let mut cands = Vec::new();
    if let Some(t) = std::env::var_os("TMPDIR").filter(|v| !v.is_empty()) {
        cands.push(PathBuf::from(t));
    }
    if let Ok(exe) = std::env::current_exe() {
        // <target>/<profile>/strata
        if let Some(target) = exe.parent().and_then(Path::parent) {
            if target.file_name().is_some_and(|n| n == "target") {
                cands.push(target.to_path_buf());
            }
        }
    }
    cands.push(PathBuf::from("/var/tmp"));
    cands.push(PathBuf::from("/tmp"));
    for c in cands {
        if c.is_dir() && !team::is_tmpfs(&c) {
            return Ok(c);
        }
    }
    bail!("no directory off tmpfs for the dir tier; give --tier-dir")
}

/// Median of per-repeat values of (setup, metric), and the samples by repeat.
fn values(samples: &[Sample], setup: &str, metric: &str) -> Vec<(usize, f64)> {
    samples
        .iter()
        .filter(|s| s.setup == setup && s.metric == metric)
        .map(|s| (s.rep, s.value))
        .collect()
}

fn ratio(
    samples: &[Sample],
    setup: &str,
    metric: &str,
    base_setup: &str,
    base_metric: &str,
) -> Option<Ratio> {
    let a = values(samples, setup, metric);
    let b = values(samples, base_setup, base_metric);
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

fn summarize(samples: &[Sample], setups: &[Setup]) -> Vec<SummaryRow> {
    let mut rows = Vec::new();
    for m in &METRICS {
        for s in setups {
            let v = values(samples, s.key, m.name);
            if v.is_empty() {
                continue;
            }
            let (med, lo, hi) = median_min_max(&v.iter().map(|x| x.1).collect::<Vec<_>>());
            let lat = |f: fn(&Sample) -> Option<f64>| {
                let l: Vec<f64> = samples
                    .iter()
                    .filter(|x| x.setup == s.key && x.metric == m.name)
                    .filter_map(f)
                    .collect();
                (!l.is_empty()).then(|| median_min_max(&l).0)
            };
            rows.push(SummaryRow {
                metric: m.name.into(),
                unit: m.unit.into(),
                setup: s.key.into(),
                median: med,
                min: lo,
                max: hi,
                n: v.len(),
                p50_us: lat(|x| x.p50_us),
                p99_us: lat(|x| x.p99_us),
                vs_tmpfs: m
                    .baseline
                    .and_then(|b| ratio(samples, s.key, m.name, "tmpfs", b)),
                vs_slow_pfs: m
                    .baseline
                    .and_then(|b| ratio(samples, s.key, m.name, "slow-pfs", b)),
            });
        }
    }
    rows
}

fn targets(samples: &[Sample]) -> Vec<TargetRow> {
    let mut t = Vec::new();
    // (base setup, base metric, goal) per check.
    let mut add = |target: &str, setup: &str, metric: &str, checks: &[(&str, &str, f64)]| {
        let checks: Vec<Check> = checks
            .iter()
            .map(|(bs, bm, goal)| {
                let r = ratio(samples, setup, metric, bs, bm);
                let met = r.as_ref().map(|r| r.median >= *goal);
                Check {
                    against: format!("{bs} {bm}"),
                    ratio: r,
                    goal: *goal,
                    met,
                }
            })
            .collect();
        let met = if checks.iter().any(|c| c.met.is_none()) {
            None
        } else {
            Some(checks.iter().all(|c| c.met == Some(true)))
        };
        t.push(TargetRow {
            target: target.into(),
            setup: setup.into(),
            checks,
            met,
        });
    };
    add(
        "SCRATCH ior write ≥ 1.0× tmpfs",
        "scratch-ram",
        "ior write",
        &[("tmpfs", "ior write", 1.0)],
    );
    add(
        "SCRATCH ior read ≥ 1.0× tmpfs",
        "scratch-ram",
        "ior read",
        &[("tmpfs", "ior read", 1.0)],
    );
    for s in ["default-ram", "default-ram+disk"] {
        add(
            "DEFAULT ior+fsync write ≥ 8× slow-pfs ior+fsync write",
            s,
            "ior+fsync write",
            &[("slow-pfs", "ior+fsync write", 8.0)],
        );
        add(
            "DEFAULT ior+fsync write ≥ 8× slow-pfs ior write (no fsync)",
            s,
            "ior+fsync write",
            &[("slow-pfs", "ior write", 8.0)],
        );
    }
    for s in ["scratch-ram", "default-ram", "default-ram+disk"] {
        for p in md::PHASES {
            let m = format!("md {p}");
            add(
                &format!("{m} ≥ 0.5× tmpfs and ≥ 10× slow-pfs"),
                s,
                &m,
                &[("tmpfs", &m, 0.5), ("slow-pfs", &m, 10.0)],
            );
        }
    }
    t
}

fn checks_text(t: &TargetRow) -> String {
    t.checks
        .iter()
        .map(|c| match &c.ratio {
            Some(r) => format!(
                "{}× [{}–{}] vs {}",
                num(r.median),
                num(r.min),
                num(r.max),
                c.against.split(' ').next().unwrap_or("")
            ),
            None => format!("- vs {}", c.against.split(' ').next().unwrap_or("")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Thousands separated by thin spaces, like BENCHMARKS.md.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v.abs() < 10.0 {
        return format!("{v:.2}");
    }
    if v.abs() < 100.0 {
        return format!("{v:.1}");
    }
    let s = format!("{:.0}", v);
    let (sign, digits) = s.strip_prefix('-').map(|d| ("-", d)).unwrap_or(("", &s));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn ratio_text(r: &Option<Ratio>) -> String {
    match r {
        Some(r) => format!("{}× [{}–{}]", num(r.median), num(r.min), num(r.max)),
        None => "-".into(),
    }
}

fn lat_text(r: &SummaryRow) -> String {
    match (r.p50_us, r.p99_us) {
        (Some(a), Some(b)) => format!("{} / {}", num(a), num(b)),
        _ => "-".into(),
    }
}

struct Context_ {
    header: Vec<String>,
}

/// `--from FILE`: the tables of a saved run.
fn render_saved(a: &AdaptersArgs, file: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    if doc["bench"] != "adapters" {
        bail!(
            "{} is not a document saved by `strata bench adapters --save`",
            file.display()
        );
    }
    let samples: Vec<Sample> = serde_json::from_value(doc["samples"].clone()).context("samples")?;
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
    let ctx = Context_ { header };
    let setups: Vec<Setup> = ALL_SETUPS
        .iter()
        .filter(|s| samples.iter().any(|x| x.setup == s.key))
        .cloned()
        .collect();
    let summary = summarize(&samples, &setups);
    let tgts = targets(&samples);
    let notes = strings("notes");
    if a.json {
        println!("{text}");
    } else if a.markdown {
        print_markdown(&ctx, &summary, &tgts, &notes);
    } else {
        print_plain(&ctx, &summary, &tgts, &notes);
    }
    Ok(())
}

pub fn run(a: AdaptersArgs, socket: &Path) -> Result<()> {
    if let Some(f) = &a.from {
        return render_saved(&a, f);
    }
    if a.repeat == 0 || a.repeat > 100 {
        bail!("--repeat must be 1..=100");
    }
    let total = a.block_size * a.procs as u64;
    let fsync_block = a.fsync_block_size.unwrap_or(a.block_size);
    // Setups and workloads.
    for s in &a.setups {
        if !ALL_SETUPS.iter().any(|x| x.key == s) {
            bail!(
                "unknown setup {s:?} (tmpfs, slow-pfs, scratch-ram, default-ram, default-ram+disk)"
            );
        }
    }
    for w in &a.workloads {
        if !ALL_WORKLOADS.contains(&w.as_str()) {
            bail!("unknown workload {w:?} (ior, ior+fsync, md)");
        }
    }
    let want_setup = |k: &str| a.setups.is_empty() || a.setups.iter().any(|s| s == k);
    let workloads: Vec<&str> = ALL_WORKLOADS
        .iter()
        .copied()
        .filter(|w| a.workloads.is_empty() || a.workloads.iter().any(|x| x == w))
        .collect();
    let mut notes: Vec<String> = Vec::new();
    // Directories.
    if !a.tmpfs.is_dir() {
        bail!("--tmpfs {} is not a directory", a.tmpfs.display());
    }
    if !team::is_tmpfs(&a.tmpfs) {
        notes.push(format!("{} is not a tmpfs", a.tmpfs.display()));
    }
    let pid = std::process::id();
    let tmpfs_base = a.tmpfs.join(format!("strata-bench-adapters-{pid}"));
    let (slow_mnt, slow_ok) = slow_pfs_mount(a.slow_pfs.as_deref(), a.dest.is_some())?;
    let slow_base = slow_ok.then(|| slow_mnt.join(format!("strata-bench-adapters-{pid}")));
    if !slow_ok {
        notes.push(format!(
            "slow-pfs: {} is not mounted — the slow-pfs baseline is skipped and strata setups write to a tmpfs destination (mount it with ../shared/tools/slow-pfs up, or give --slow-pfs DIR)",
            slow_mnt.display()
        ));
    }
    // The adapter never buffers paths under /dev (so not /dev/shm): without the
    // slow-pfs mount the strata setups write to a directory on the temp file system.
    let (dest_base, dest_kind) = match (&a.dest, &slow_base) {
        (Some(d), _) => (
            d.join(format!("strata-bench-adapters-{pid}")),
            if team::is_tmpfs(d) {
                "tmpfs, given"
            } else {
                "given"
            },
        ),
        (None, Some(b)) => (b.clone(), "slow-pfs"),
        (None, None) => {
            let t = std::env::temp_dir();
            (
                t.join(format!("strata-bench-adapters-{pid}")),
                if team::is_tmpfs(&t) {
                    "tmpfs (slow-pfs absent)"
                } else {
                    "temp dir, not tmpfs (slow-pfs absent)"
                },
            )
        }
    };
    let setups: Vec<Setup> = ALL_SETUPS
        .iter()
        .filter(|s| want_setup(s.key) && (s.how != How::SlowPfs || slow_ok))
        .cloned()
        .collect();
    if setups.is_empty() {
        bail!("no setup left to run");
    }
    let any_strata = setups.iter().any(|s| matches!(s.how, How::Strata { .. }));
    let preload = if any_strata {
        Some(team::find_preload_lib()?)
    } else {
        None
    };
    let tier_base = match &a.tier_dir {
        Some(d) => d.clone(),
        None => default_tier_base()?,
    };
    if setups
        .iter()
        .any(|s| matches!(s.how, How::Strata { disk: true, .. }))
        && team::is_tmpfs(&tier_base)
    {
        bail!(
            "--tier-dir {} is on tmpfs; the disk tier must live on a disk",
            tier_base.display()
        );
    }
    let ram_capacity = a
        .ram_capacity
        .unwrap_or(2 * total.max(fsync_block * a.procs as u64) + (1 << 30));
    let tiered_ram = a.tiered_ram.unwrap_or((total / 2).max(128 << 20));
    let disk_capacity = 2 * total.max(fsync_block * a.procs as u64) + (1 << 30);
    let ctx = Context_ {
        header: vec![
            format!(
                "strata bench adapters: {} processes; ior {} transfers x {} per process (ior+fsync: {} per process, fsync after each write); md {} files x {} B per process; {} repeat(s), median [min–max]",
                a.procs,
                format_size(a.transfer_size),
                format_size(a.block_size),
                format_size(fsync_block),
                a.md_files,
                a.md_write_bytes,
                a.repeat
            ),
            format!("tmpfs baseline: {}; slow-pfs baseline: {}", tmpfs_base.display(), slow_base.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "skipped (not mounted)".into())),
            format!(
                "strata setups: destination {} ({dest_kind}); private daemon per setup and repeat{}; RAM tier {} (RAM-only) / {} + dir tier {} under {} (RAM+disk)",
                dest_base.display(),
                if a.warm_up { ", warmed up by one untimed SCRATCH ior" } else { ", measured cold (fresh daemon)" },
                format_size(ram_capacity),
                format_size(tiered_ram),
                format_size(disk_capacity),
                tier_base.display()
            ),
        ],
    };
    let load_before = loadavg();
    let steps = (a.repeat * setups.len() * workloads.len()) as u64;
    let pb = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:25} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    let mut samples: Vec<Sample> = Vec::new();
    let mut daemon_counters: Vec<serde_json::Value> = Vec::new();
    let started = Instant::now();
    let result = (|| -> Result<()> {
        for rep in 0..a.repeat {
            for s in &setups {
                let base = match s.how {
                    How::Tmpfs => tmpfs_base.clone(),
                    How::SlowPfs => slow_base.clone().context("slow-pfs")?,
                    How::Strata { .. } => dest_base.clone(),
                };
                let mut daemon = match s.how {
                    How::Strata { disk, .. } => {
                        pb.set_message(format!("r{rep} {}: starting a private daemon", s.key));
                        let spec = DaemonSpec {
                            ram_bytes: if disk { tiered_ram } else { ram_capacity },
                            disk: disk.then(|| {
                                (
                                    tier_base.join(format!("strata-bench-tier-{pid}-{rep}")),
                                    disk_capacity,
                                )
                            }),
                            extra_yaml: String::new(),
                        };
                        Some((PrivateDaemon::start(&spec)?, spec))
                    }
                    _ => None,
                };
                if let (true, Some((d, _))) = (a.warm_up, &daemon) {
                    pb.set_message(format!("r{rep} {}: warm-up", s.key));
                    let dir = base.join(format!("{}-r{rep}-warmup", s.key.replace('+', "_")));
                    let _ = std::fs::remove_dir_all(&dir);
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                    let dir = std::fs::canonicalize(&dir)?;
                    let env = WorkerEnv::Strata {
                        preload: preload.clone().context("adapter")?,
                        socket: d.socket.clone(),
                        config: Some(d.config.clone()),
                        mode: ViaMode::Scratch,
                        include: dir.clone(),
                    };
                    let spec = IorSpec {
                        dir: dir.clone(),
                        procs: a.procs,
                        transfer_size: a.transfer_size,
                        block_size: a.block_size,
                        fsync: false,
                        verify: a.verify,
                        keep: false,
                        timeout_s: a.timeout,
                    };
                    ior::run_spec(&spec, &env, None, &pb, &format!("r{rep} {} warm-up", s.key))?;
                    let _ = std::fs::remove_dir_all(&dir);
                }
                for w in &workloads {
                    let dir = base.join(format!(
                        "{}-r{rep}-{}",
                        s.key.replace('+', "_"),
                        w.replace('+', "_")
                    ));
                    let _ = std::fs::remove_dir_all(&dir);
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                    let dir = std::fs::canonicalize(&dir)?;
                    let env = match (s.how, &daemon) {
                        (How::Strata { mode, .. }, Some((d, _))) => WorkerEnv::Strata {
                            preload: preload.clone().context("adapter")?,
                            socket: d.socket.clone(),
                            config: Some(d.config.clone()),
                            mode,
                            include: dir.clone(),
                        },
                        // The socket only lets the workers' CLI find a running daemon instead of starting one.
                        _ => WorkerEnv::Direct {
                            socket: Some(socket.to_path_buf()),
                        },
                    };
                    let drain_socket = match (s.how, &daemon) {
                        (
                            How::Strata {
                                mode: ViaMode::Default,
                                ..
                            },
                            Some((d, _)),
                        ) => Some(d.socket.clone()),
                        _ => None,
                    };
                    let tag = format!("r{rep} {} {w}", s.key);
                    let before = match &daemon {
                        Some((d, _)) => Some(d.status()?),
                        None => None,
                    };
                    let mut push = |metric: &str, value: f64, lat: Option<(f64, f64)>| {
                        samples.push(Sample {
                            setup: s.key.into(),
                            metric: metric.into(),
                            rep,
                            value,
                            p50_us: lat.map(|l| l.0),
                            p99_us: lat.map(|l| l.1),
                        })
                    };
                    match *w {
                        "ior" | "ior+fsync" => {
                            let fsync = *w == "ior+fsync";
                            let spec = IorSpec {
                                dir: dir.clone(),
                                procs: a.procs,
                                transfer_size: a.transfer_size,
                                block_size: if fsync { fsync_block } else { a.block_size },
                                fsync,
                                verify: a.verify,
                                keep: false,
                                timeout_s: a.timeout,
                            };
                            let r = ior::run_spec(&spec, &env, drain_socket.as_deref(), &pb, &tag)
                                .with_context(|| tag.clone())?;
                            push(
                                &format!("{w} write"),
                                r.write.mib_per_s,
                                Some((r.write.p50_us, r.write.p99_us)),
                            );
                            push(
                                &format!("{w} read"),
                                r.read.mib_per_s,
                                Some((r.read.p50_us, r.read.p99_us)),
                            );
                            if let Some(d) = &r.drain {
                                push(&format!("{w} drain"), d.secs, None);
                                push(
                                    &format!("{w} write+drain"),
                                    r.write.bytes as f64 / team::MIB / (r.write.secs + d.secs),
                                    None,
                                );
                            }
                        }
                        _ => {
                            let spec = MdSpec {
                                dir: dir.clone(),
                                procs: a.procs,
                                files: a.md_files,
                                write_bytes: a.md_write_bytes,
                                timeout_s: a.timeout,
                                // mdtest's flags (O_CREAT|O_RDWR), a directory per process
                                excl: false,
                                shared_dir: false,
                            };
                            let r = md::run_spec(&spec, &env, &pb, &tag)
                                .with_context(|| tag.clone())?;
                            for (p, st) in &r.phases {
                                push(
                                    &format!("md {p}"),
                                    st.ops_per_s,
                                    Some((st.p50_us, st.p99_us)),
                                );
                            }
                        }
                    }
                    // Guard: the workload must have gone through the daemon.
                    if let (Some(b), Some((d, _))) = (&before, &daemon) {
                        let after = d.status()?;
                        let reqs = after.requests_total.saturating_sub(b.requests_total);
                        let wrote = after
                            .files
                            .write_bytes_total
                            .saturating_sub(b.files.write_bytes_total);
                        let files = a.md_files * a.procs as u64;
                        if (w.starts_with("ior") && wrote == 0) || (*w == "md" && reqs < files) {
                            bail!(
                                "{tag}: the workload did not go through strata ({wrote} bytes written to the buffer, {reqs} requests): is {} tracked by the adapter (not under /dev, /run, the tiers or the socket directory)?",
                                dir.display()
                            );
                        }
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                    pb.inc(1);
                }
                if let Some((mut d, spec)) = daemon.take() {
                    if let Ok(st) = d.status() {
                        daemon_counters.push(serde_json::json!({"setup": s.key, "rep": rep, "files": st.files, "tiers": st.tiers}));
                    }
                    pb.set_message(format!("r{rep} {}: stopping the daemon", s.key));
                    d.stop()?;
                    if let Some((p, _)) = &spec.disk {
                        let _ = std::fs::remove_dir_all(p);
                    }
                }
            }
        }
        Ok(())
    })();
    pb.finish_and_clear();
    let _ = std::fs::remove_dir_all(&tmpfs_base);
    if let Some(b) = &slow_base {
        let _ = std::fs::remove_dir_all(b);
    }
    let _ = std::fs::remove_dir_all(&dest_base);
    result?;
    let load_after = loadavg();
    let elapsed = started.elapsed().as_secs_f64();
    let summary = summarize(&samples, &setups);
    let tgts = targets(&samples);
    // Anomalies visible in the daemon counters: reads that went to the destination.
    for c in &daemon_counters {
        let dest = c["files"]["read_dest_bytes_total"].as_u64().unwrap_or(0);
        if dest > 0 {
            notes.push(format!(
                "{} r{}: {} read through from the destination instead of the buffer",
                c["setup"].as_str().unwrap_or("?"),
                c["rep"],
                format_size(dest)
            ));
        }
        let errs = c["files"]["flush_errors_total"].as_u64().unwrap_or(0);
        if errs > 0 {
            notes.push(format!(
                "{} r{}: {errs} flush errors",
                c["setup"].as_str().unwrap_or("?"),
                c["rep"]
            ));
        }
    }
    notes.push(format!(
        "load average before {load_before}, after {load_after}; {elapsed:.0} s in all"
    ));
    {
        let doc = serde_json::json!({
            "bench": "adapters",
            "settings": {
                "procs": a.procs, "transfer_size": a.transfer_size, "block_size": a.block_size, "fsync_block_size": fsync_block,
                "md_files": a.md_files, "md_write_bytes": a.md_write_bytes, "repeat": a.repeat,
                "tmpfs": tmpfs_base, "slow_pfs": slow_base, "destination": dest_base, "destination_kind": dest_kind,
                "ram_capacity": ram_capacity, "tiered_ram": tiered_ram, "disk_capacity": disk_capacity, "tier_dir": tier_base,
            },
            "header": ctx.header,
            "samples": samples,
            "summary": summary,
            "targets": tgts,
            "daemon_counters": daemon_counters,
            "notes": notes,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        });
        let text = serde_json::to_string_pretty(&doc)?;
        if let Some(f) = &a.save {
            std::fs::write(f, &text).with_context(|| format!("cannot write {}", f.display()))?;
        }
        if a.json {
            println!("{text}");
            return Ok(());
        }
    }
    if a.markdown {
        print_markdown(&ctx, &summary, &tgts, &notes);
    } else {
        print_plain(&ctx, &summary, &tgts, &notes);
    }
    Ok(())
}

fn verdict(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    }
}

fn print_plain(ctx: &Context_, rows: &[SummaryRow], tgts: &[TargetRow], notes: &[String]) {
    for h in &ctx.header {
        println!("{h}");
    }
    println!();
    let head = [
        "METRIC",
        "SETUP",
        "MEDIAN [MIN–MAX]",
        "P50/P99 µs",
        "VS TMPFS",
        "VS SLOW-PFS",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                format!("{} {}", r.metric, r.unit),
                r.setup.clone(),
                format!("{} [{}–{}]", num(r.median), num(r.min), num(r.max)),
                lat_text(r),
                ratio_text(&r.vs_tmpfs),
                ratio_text(&r.vs_slow_pfs),
            ]
        })
        .collect();
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for (i, x) in c.iter().enumerate() {
            w[i] = w[i].max(x.chars().count());
        }
    }
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, x) in c.iter().enumerate() {
            let pad = w[i] - x.chars().count();
            if i >= 2 {
                s.push_str(&" ".repeat(pad));
                s.push_str(x);
            } else {
                s.push_str(x);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        println!("{}", s.trim_end());
    };
    line(&head.map(String::from));
    let mut last = String::new();
    for (r, c) in rows.iter().zip(&cells) {
        if !last.is_empty() && last != r.metric {
            println!();
        }
        last = r.metric.clone();
        line(c);
    }
    println!("\nTARGETS (ratio of medians [per-repeat min–max])");
    let shown: Vec<&TargetRow> = tgts
        .iter()
        .filter(|t| t.checks.iter().any(|c| c.ratio.is_some()))
        .collect();
    let w0 = shown
        .iter()
        .map(|t| t.target.chars().count())
        .max()
        .unwrap_or(0);
    let w1 = shown.iter().map(|t| t.setup.len()).max().unwrap_or(0);
    let w2 = shown
        .iter()
        .map(|t| checks_text(t).chars().count())
        .max()
        .unwrap_or(0);
    for t in &shown {
        let (a, c) = (t.target.chars().count(), checks_text(t));
        println!(
            "  {}{}  {:<w1$}  {}{}  {}",
            t.target,
            " ".repeat(w0 - a),
            t.setup,
            c,
            " ".repeat(w2 - c.chars().count()),
            verdict(t.met)
        );
    }
    if shown.len() < tgts.len() {
        println!(
            "  ({} target rows not evaluated: their setups or baselines were not run)",
            tgts.len() - shown.len()
        );
    }
    if !notes.is_empty() {
        println!("\nNOTES");
        for n in notes {
            println!("  - {n}");
        }
    }
}

fn print_markdown(ctx: &Context_, rows: &[SummaryRow], tgts: &[TargetRow], notes: &[String]) {
    for h in &ctx.header {
        println!("{h}  ");
    }
    println!();
    println!("| metric | setup | median [min–max] | p50 / p99 µs | vs tmpfs | vs slow-pfs |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} {} | {} | {} [{}–{}] | {} | {} | {} |",
            r.metric,
            r.unit,
            r.setup,
            num(r.median),
            num(r.min),
            num(r.max),
            lat_text(r),
            ratio_text(&r.vs_tmpfs),
            ratio_text(&r.vs_slow_pfs)
        );
    }
    println!();
    println!("| target | setup | measured | verdict |");
    println!("|---|---|---|---|");
    for t in tgts
        .iter()
        .filter(|t| t.checks.iter().any(|c| c.ratio.is_some()))
    {
        println!(
            "| {} | {} | {} | {} |",
            t.target,
            t.setup,
            checks_text(t),
            verdict(t.met)
        );
    }
    if !notes.is_empty() {
        println!();
        for n in notes {
            println!("- {n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(setup: &str, metric: &str, rep: usize, value: f64) -> Sample {
        Sample {
            setup: setup.into(),
            metric: metric.into(),
            rep,
            value,
            p50_us: None,
            p99_us: None,
        }
    }

    #[test]
    fn ratios_and_targets() {
        let v = vec![
            s("tmpfs", "ior write", 0, 100.0),
            s("tmpfs", "ior write", 1, 200.0),
            s("scratch-ram", "ior write", 0, 150.0),
            s("scratch-ram", "ior write", 1, 150.0),
        ];
        let r = ratio(&v, "scratch-ram", "ior write", "tmpfs", "ior write").unwrap();
        assert!((r.median - 1.0).abs() < 1e-9);
        assert!((r.min - 0.75).abs() < 1e-9 && (r.max - 1.5).abs() < 1e-9);
        let t = targets(&v);
        assert_eq!(t[0].met, Some(true));
        assert_eq!(t[1].met, None);
        assert!(checks_text(&t[0]).starts_with("1.00× [0.75–1.50] vs tmpfs"));
        assert_eq!(num(12345.0), "12 345");
        assert_eq!(num(1.5), "1.50");
    }
}
