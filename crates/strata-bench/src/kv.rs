//! `strata bench kv`: put/get latency and throughput per blob size, thread
//! count and process count, next to a memcpy reference at the same
//! concurrency (the floor a one-copy design is measured against).
//!
//! Each *worker* (one thread) overwrites its own working set of keys, so the
//! daemon's memory stays bounded. With `procs` > 1 the workers live in
//! copies of this executable (`strata bench kv-worker`, hidden) that talk to
//! the coordinator over stdin/stdout: `ready`, then `put`/`get`/`quit`
//! commands answered by `done {json}` lines.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use strata_client::Client;

use crate::hist::Hist;
use crate::zipf::Rng;

const MIB: f64 = 1024.0 * 1024.0;
/// Default per-worker op count: enough bytes for a stable figure…
const TARGET_BYTES: u64 = 256 << 20;
/// …but at most this many ops (small sizes) and at least this many (huge sizes).
const MAX_DEFAULT_OPS: u64 = 20_000;
const MIN_DEFAULT_OPS: u64 = 64;
/// Default time cap of one measured phase when `--seconds` is not given.
const DEFAULT_CAP_S: f64 = 3.0;

#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// Blob sizes (suffixes B, K/KiB, M/MiB, G/GiB; KB/MB/GB are decimal).
    #[arg(long, value_delimiter = ',', default_value = "1KiB,4KiB,64KiB,1MiB,16MiB", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Threads per process.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub threads: Vec<usize>,
    /// Client processes (copies of this executable, all on the same daemon).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub procs: Vec<usize>,
    /// Ops per worker thread and phase (default: 256 MiB worth, clamped to 64..=20000).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Time cap per measured phase in seconds (default 3 s; with only --seconds, runs that long).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Keys each worker overwrites (fewer for big blobs, see --working-set).
    #[arg(long, default_value_t = 256)]
    pub keys: usize,
    /// Bytes all workers of one point may keep in the daemon at once.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub working_set: u64,
    /// One JSON object per result on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Bucket used (destroyed after each point).
    #[arg(long, default_value = "strata-bench-kv")]
    pub bucket: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct KvWorkerArgs {
    #[arg(long)]
    pub socket: PathBuf,
    #[arg(long)]
    pub size: u64,
    #[arg(long)]
    pub threads: usize,
    #[arg(long)]
    pub ops: u64,
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long)]
    pub keys: usize,
    #[arg(long)]
    pub bucket: String,
    #[arg(long)]
    pub prefix: String,
}

/// "1KiB" → 1024. Suffixes: B, K/KiB, M/MiB, G/GiB (binary), KB/MB/GB (decimal).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => MIB,
        "g" | "gib" => 1024.0 * MIB,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => return Err(format!("bad size unit in {s:?} (use B, KiB, MiB, GiB)")),
    };
    let v = (n * mult).round();
    if !(1.0..=1e15).contains(&v) {
        return Err(format!("size {s:?} out of range"));
    }
    Ok(v as u64)
}

pub fn format_size(b: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, m) in UNITS {
        if b >= m && b & (m - 1) == 0 {
            return format!("{}{u}", b / m);
        }
    }
    for (u, m) in UNITS {
        if b >= m {
            return format!("{:.1}{u}", b as f64 / m as f64);
        }
    }
    format!("{b}B")
}

/// Ops per worker and phase when `--ops` is not given.
pub fn default_ops(size: u64) -> u64 {
    (TARGET_BYTES / size.max(1)).clamp(MIN_DEFAULT_OPS, MAX_DEFAULT_OPS)
}

/// Keys per worker: at most `max_keys`, within the working-set budget, at least 2.
pub fn keys_per_worker(size: u64, workers: usize, max_keys: usize, working_set: u64) -> usize {
    let fit = working_set / (workers.max(1) as u64) / size.max(1);
    (fit as usize).clamp(2, max_keys.max(2))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Put,
    Get,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Put => "put",
            Phase::Get => "get",
        }
    }
}

enum Cmd {
    Run(Phase),
    Quit,
}

enum Msg {
    Ready,
    Done(PhaseResult),
    Failed(String),
}

/// What one worker (or a merge of workers) did in one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseResult {
    pub ops: u64,
    pub bytes: u64,
    /// Longest worker's time (the phase's wall time).
    pub elapsed_ns: u64,
    pub hist: Hist,
}

impl PhaseResult {
    fn merge(&mut self, o: &PhaseResult) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.hist.merge(&o.hist);
    }
}

#[derive(Serialize, Deserialize)]
struct WirePhase {
    ops: u64,
    bytes: u64,
    elapsed_ns: u64,
    hist: String,
}

#[derive(Debug, Clone)]
struct Plan {
    size: usize,
    ops: u64,
    seconds: Option<f64>,
    keys: usize,
    bucket: String,
    prefix: String,
}

fn se(e: strata_client::Error) -> anyhow::Error {
    anyhow!("{e}")
}

/// One worker thread: populate + warm up, report Ready, then run phases on command.
fn worker(client: Client, plan: Arc<Plan>, tid: usize, cmds: Receiver<Cmd>, out: Sender<Msg>) {
    let run = || -> Result<()> {
        let bucket = client.bucket(&plan.bucket).map_err(se)?;
        let names: Vec<String> = (0..plan.keys)
            .map(|k| format!("{}t{tid}k{k}", plan.prefix))
            .collect();
        let mut data = vec![0u8; plan.size];
        Rng::new(0x5eed ^ (tid as u64) << 32 ^ plan.size as u64).fill(&mut data);
        let mut buf = vec![0u8; plan.size];
        // Populate, check one round trip, then warm up by time.
        for n in &names {
            bucket.put(n, &data).map_err(se)?;
        }
        let got = bucket.get_at(&names[0], 0, &mut buf).map_err(se)?;
        if got != plan.size || buf != data {
            bail!(
                "blob {} came back different ({got} of {} bytes)",
                names[0],
                plan.size
            );
        }
        let warm = Instant::now();
        let mut i = 0usize;
        while i < 2 * names.len()
            && (warm.elapsed() < Duration::from_millis(150) || i < 8)
            && warm.elapsed() < Duration::from_secs(2)
        {
            let n = &names[i % names.len()];
            bucket.put(n, &data).map_err(se)?;
            bucket.get_at(n, 0, &mut buf).map_err(se)?;
            i += 1;
        }
        let _ = out.send(Msg::Ready);
        while let Ok(cmd) = cmds.recv() {
            let phase = match cmd {
                Cmd::Run(p) => p,
                Cmd::Quit => break,
            };
            let mut hist = Hist::new();
            let start = Instant::now();
            let deadline = plan.seconds.map(|s| start + Duration::from_secs_f64(s));
            let mut ops = 0u64;
            while ops < plan.ops {
                let n = &names[ops as usize % names.len()];
                let t0 = Instant::now();
                match phase {
                    Phase::Put => bucket.put(n, &data).map_err(se)?,
                    Phase::Get => {
                        let got = bucket.get_at(n, 0, &mut buf).map_err(se)?;
                        if got != plan.size {
                            bail!("get {n}: {got} of {} bytes", plan.size);
                        }
                    }
                }
                let t1 = Instant::now();
                hist.record_ns((t1 - t0).as_nanos() as u64);
                ops += 1;
                if deadline.is_some_and(|d| t1 >= d) {
                    break;
                }
            }
            let elapsed_ns = start.elapsed().as_nanos() as u64;
            if phase == Phase::Get && buf != data {
                bail!("blob contents changed under the get phase");
            }
            let _ = out.send(Msg::Done(PhaseResult {
                ops,
                bytes: ops * plan.size as u64,
                elapsed_ns,
                hist,
            }));
        }
        Ok(())
    };
    if let Err(e) = run() {
        let _ = out.send(Msg::Failed(format!("{e:#}")));
    }
}

/// The worker threads of this process.
struct Group {
    cmds: Vec<Sender<Cmd>>,
    rx: Receiver<Msg>,
    handles: Vec<JoinHandle<()>>,
}

impl Group {
    fn start(socket: &Path, plan: Plan, threads: usize) -> Result<Group> {
        let client = Client::connect_to(socket).map_err(se)?;
        let plan = Arc::new(plan);
        let (tx, rx) = channel();
        let mut cmds = Vec::new();
        let mut handles = Vec::new();
        for tid in 0..threads {
            let (ctx, crx) = channel();
            cmds.push(ctx);
            let (c, p, o) = (client.clone(), plan.clone(), tx.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("kv-{tid}"))
                    .spawn(move || worker(c, p, tid, crx, o))?,
            );
        }
        let g = Group { cmds, rx, handles };
        for _ in 0..threads {
            match g.rx.recv() {
                Ok(Msg::Ready) => {}
                Ok(Msg::Failed(e)) => bail!("{e}"),
                Ok(Msg::Done(_)) => bail!("worker finished before it was started"),
                Err(_) => bail!("a worker thread died"),
            }
        }
        Ok(g)
    }

    fn run(&self, phase: Phase) -> Result<PhaseResult> {
        for c in &self.cmds {
            c.send(Cmd::Run(phase))
                .map_err(|_| anyhow!("a worker thread died"))?;
        }
        let mut total = PhaseResult::default();
        for _ in 0..self.cmds.len() {
            match self.rx.recv() {
                Ok(Msg::Done(r)) => total.merge(&r),
                Ok(Msg::Failed(e)) => bail!("{e}"),
                Ok(Msg::Ready) => bail!("unexpected ready"),
                Err(_) => bail!("a worker thread died"),
            }
        }
        Ok(total)
    }

    fn finish(self) {
        for c in &self.cmds {
            let _ = c.send(Cmd::Quit);
        }
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// `strata bench kv-worker`: one process's threads, driven over stdin/stdout.
pub fn run_worker(a: KvWorkerArgs) -> Result<()> {
    let plan = Plan {
        size: a.size as usize,
        ops: a.ops,
        seconds: a.seconds,
        keys: a.keys,
        bucket: a.bucket,
        prefix: a.prefix,
    };
    let mut out = std::io::stdout().lock();
    let group = match Group::start(&a.socket, plan, a.threads) {
        Ok(g) => g,
        Err(e) => {
            writeln!(out, "error {e:#}")?;
            out.flush()?;
            return Err(e);
        }
    };
    writeln!(out, "ready")?;
    out.flush()?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let phase = match line.trim() {
            "put" => Phase::Put,
            "get" => Phase::Get,
            _ => break,
        };
        match group.run(phase) {
            Ok(r) => {
                let w = WirePhase {
                    ops: r.ops,
                    bytes: r.bytes,
                    elapsed_ns: r.elapsed_ns,
                    hist: r.hist.encode(),
                };
                writeln!(out, "done {}", serde_json::to_string(&w)?)?;
                out.flush()?;
            }
            Err(e) => {
                writeln!(out, "error {e:#}")?;
                out.flush()?;
                group.finish();
                return Err(e);
            }
        }
    }
    group.finish();
    Ok(())
}

pub struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    /// Starts a `kv-worker` command (its pipes are set here).
    pub fn spawn(mut cmd: Command) -> Result<Proc> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot spawn {:?}", cmd.get_program()))?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("worker stdout")?);
        Ok(Proc {
            child,
            stdin,
            stdout,
        })
    }

    /// Barrier: every process connected, populated and warmed up.
    pub fn barrier(ps: &mut [Proc]) -> Result<()> {
        for p in ps {
            let l = p.read_line()?;
            if l != "ready" {
                bail!("worker said {l:?} instead of ready");
            }
        }
        Ok(())
    }

    /// Runs `phase` in every process at once; their results merged.
    pub fn run_phase(ps: &mut [Proc], phase: Phase) -> Result<PhaseResult> {
        for p in ps.iter_mut() {
            p.stdin
                .write_all(format!("{}\n", phase.name()).as_bytes())?;
            p.stdin.flush()?;
        }
        let mut total = PhaseResult::default();
        for p in ps.iter_mut() {
            let l = p.read_line()?;
            let json = l
                .strip_prefix("done ")
                .ok_or_else(|| anyhow!("worker said {l:?}"))?;
            let w: WirePhase = serde_json::from_str(json)?;
            total.merge(&PhaseResult {
                ops: w.ops,
                bytes: w.bytes,
                elapsed_ns: w.elapsed_ns,
                hist: Hist::decode(&w.hist)?,
            });
        }
        Ok(total)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut l = String::new();
        if self.stdout.read_line(&mut l)? == 0 {
            bail!("worker process {} exited early", self.child.id());
        }
        let l = l.trim_end().to_string();
        if let Some(e) = l.strip_prefix("error ") {
            bail!("worker process {}: {e}", self.child.id());
        }
        Ok(l)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"quit\n");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Workers of one point: threads here, or child processes.
enum Workers {
    Local(Group),
    Procs(Vec<Proc>),
}

impl Workers {
    #[allow(clippy::too_many_arguments)]
    fn start(
        socket: &Path,
        a: &KvArgs,
        size: u64,
        threads: usize,
        procs: usize,
        ops: u64,
        seconds: Option<f64>,
        keys: usize,
    ) -> Result<Workers> {
        if procs <= 1 {
            let plan = Plan {
                size: size as usize,
                ops,
                seconds,
                keys,
                bucket: a.bucket.clone(),
                prefix: "p0".into(),
            };
            return Ok(Workers::Local(Group::start(socket, plan, threads)?));
        }
        let exe =
            std::env::current_exe().context("cannot find this executable to spawn workers")?;
        let mut ps = Vec::new();
        for p in 0..procs {
            let mut cmd = Command::new(&exe);
            cmd.args(["kv-worker", "--socket"]).arg(socket);
            cmd.args([
                "--size",
                &size.to_string(),
                "--threads",
                &threads.to_string(),
                "--ops",
                &ops.to_string(),
            ]);
            if let Some(s) = seconds {
                cmd.args(["--seconds", &s.to_string()]);
            }
            cmd.args([
                "--keys",
                &keys.to_string(),
                "--bucket",
                &a.bucket,
                "--prefix",
                &format!("p{p}"),
            ]);
            // The worker's CLI finds the same daemon through this, never starts its own.
            cmd.env("STRATA_SOCKET", socket);
            ps.push(Proc::spawn(cmd)?);
        }
        Proc::barrier(&mut ps)?;
        Ok(Workers::Procs(ps))
    }

    fn run(&mut self, phase: Phase) -> Result<PhaseResult> {
        match self {
            Workers::Local(g) => g.run(phase),
            Workers::Procs(ps) => Proc::run_phase(ps, phase),
        }
    }

    fn finish(self) {
        match self {
            Workers::Local(g) => g.finish(),
            Workers::Procs(ps) => drop(ps),
        }
    }
}

/// memcpy between two preallocated buffers per thread, `n` threads at once.
#[derive(Debug, Clone, Copy)]
pub struct MemcpyRef {
    pub mib_per_s: f64,
    pub copies_per_s: f64,
    pub ns_per_copy: f64,
    pub copies: u64,
}

pub fn memcpy_reference(size: usize, threads: usize, min_time: Duration) -> MemcpyRef {
    let results: Vec<(u64, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|t| {
                s.spawn(move || {
                    let mut src = vec![0u8; size];
                    Rng::new(t as u64 + 1).fill(&mut src);
                    let mut dst = vec![0u8; size];
                    // Warm-up: fault the pages in, fill the caches.
                    for _ in 0..4 {
                        dst.copy_from_slice(std::hint::black_box(&src));
                        std::hint::black_box(&mut dst);
                    }
                    let min_copies = (TARGET_BYTES / 4 / size as u64).clamp(16, 1 << 20);
                    let batch = ((1u64 << 20) / size as u64).clamp(1, 4096);
                    let start = Instant::now();
                    let mut copies = 0u64;
                    loop {
                        for _ in 0..batch {
                            dst.copy_from_slice(std::hint::black_box(&src));
                            std::hint::black_box(&mut dst);
                        }
                        copies += batch;
                        let el = start.elapsed();
                        if (copies >= min_copies && el >= min_time) || el >= min_time * 10 {
                            return (copies, el);
                        }
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("memcpy thread"))
            .collect()
    });
    let copies: u64 = results.iter().map(|r| r.0).sum();
    let wall = results
        .iter()
        .map(|r| r.1)
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-9);
    let ns_per_copy = results
        .iter()
        .map(|r| r.1.as_nanos() as f64 / r.0 as f64)
        .sum::<f64>()
        / results.len() as f64;
    MemcpyRef {
        mib_per_s: copies as f64 * size as f64 / MIB / wall,
        copies_per_s: copies as f64 / wall,
        ns_per_copy,
        copies,
    }
}

/// One result line of `strata bench kv --json`.
#[derive(Debug, Clone, Serialize)]
pub struct KvRow {
    pub bench: &'static str,
    pub op: &'static str,
    pub size_bytes: u64,
    pub threads: usize,
    pub procs: usize,
    pub ops: u64,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub memcpy_mib_per_s: f64,
    pub ratio_vs_memcpy: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_copy: Option<f64>,
    pub keys_per_worker: usize,
    pub seconds: f64,
}

fn row_text(r: &KvRow) -> String {
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    let ratio = match r.ns_per_copy {
        Some(ns) => format!("({ns:.0} ns/copy)"),
        None => format!("{:.3}", r.ratio_vs_memcpy),
    };
    format!(
        "{:>7} {:>3} {:>4} {:<6} {:>9} {:>11.0} {:>10.1} {:>9} {:>9} {:>10} {:>12.1}  {}",
        format_size(r.size_bytes),
        r.threads,
        r.procs,
        r.op,
        r.ops,
        r.ops_per_s,
        r.mib_per_s,
        f(r.p50_us),
        f(r.p99_us),
        f(r.max_us),
        r.memcpy_mib_per_s,
        ratio
    )
}

fn header() -> String {
    format!(
        "{:>7} {:>3} {:>4} {:<6} {:>9} {:>11} {:>10} {:>9} {:>9} {:>10} {:>12}  {}",
        "SIZE",
        "THR",
        "PROC",
        "OP",
        "OPS",
        "OPS/S",
        "MiB/S",
        "P50us",
        "P99us",
        "MAXus",
        "MEMCPY MiB/s",
        "RATIO"
    )
}

pub fn run(a: KvArgs, socket: &Path) -> Result<()> {
    if a.sizes.is_empty() || a.threads.is_empty() || a.procs.is_empty() {
        bail!("--sizes, --threads and --procs need at least one value each");
    }
    if a.threads.contains(&0) || a.procs.contains(&0) {
        bail!("--threads and --procs must be ≥ 1");
    }
    if a.ops == Some(0) {
        bail!("--ops must be ≥ 1");
    }
    if let Some(s) = a.seconds {
        if s.is_nan() || s <= 0.0 {
            bail!("--seconds must be > 0");
        }
    }
    let client = Client::connect_to(socket).map_err(se)?;
    if let Ok(b) = client.bucket_open(&a.bucket) {
        let _ = b.destroy();
    }
    let points = a.sizes.len() * a.threads.len() * a.procs.len();
    let pb = ProgressBar::with_draw_target(Some(points as u64 * 3), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    let emit = |r: &KvRow| -> Result<()> {
        let line = if a.json {
            serde_json::to_string(r)?
        } else {
            row_text(r)
        };
        pb.suspend(|| println!("{line}"));
        Ok(())
    };
    if !a.json {
        pb.suspend(|| println!("{}", header()));
    }
    let mut memcpy_cache: std::collections::HashMap<(u64, usize), MemcpyRef> = Default::default();
    let result = (|| -> Result<()> {
        for &size in &a.sizes {
            for &threads in &a.threads {
                for &procs in &a.procs {
                    let workers = threads * procs;
                    let ops = match (a.ops, a.seconds) {
                        (Some(n), _) => n,
                        (None, Some(_)) => u64::MAX,
                        (None, None) => default_ops(size),
                    };
                    let seconds = a.seconds.or(Some(DEFAULT_CAP_S));
                    let keys = keys_per_worker(size, workers, a.keys, a.working_set);
                    let tag = format!("{} x {threads} thr x {procs} proc", format_size(size));
                    pb.set_message(format!("{tag}: memcpy reference"));
                    let mc = *memcpy_cache.entry((size, workers)).or_insert_with(|| {
                        memcpy_reference(size as usize, workers, Duration::from_millis(300))
                    });
                    pb.inc(1);
                    emit(&KvRow {
                        bench: "kv",
                        op: "memcpy",
                        size_bytes: size,
                        threads,
                        procs,
                        ops: mc.copies,
                        ops_per_s: mc.copies_per_s,
                        mib_per_s: mc.mib_per_s,
                        p50_us: None,
                        p99_us: None,
                        max_us: None,
                        memcpy_mib_per_s: mc.mib_per_s,
                        ratio_vs_memcpy: 1.0,
                        ns_per_copy: Some(mc.ns_per_copy),
                        keys_per_worker: 0,
                        seconds: mc.copies as f64 / mc.copies_per_s,
                    })?;
                    pb.set_message(format!("{tag}: populate + warm-up"));
                    let mut w =
                        Workers::start(socket, &a, size, threads, procs, ops, seconds, keys)?;
                    let res = (|| -> Result<()> {
                        for phase in [Phase::Put, Phase::Get] {
                            pb.set_message(format!("{tag}: {}", phase.name()));
                            let r = w.run(phase)?;
                            pb.inc(1);
                            let secs = (r.elapsed_ns as f64 / 1e9).max(1e-9);
                            let mib_s = r.bytes as f64 / MIB / secs;
                            emit(&KvRow {
                                bench: "kv",
                                op: phase.name(),
                                size_bytes: size,
                                threads,
                                procs,
                                ops: r.ops,
                                ops_per_s: r.ops as f64 / secs,
                                mib_per_s: mib_s,
                                p50_us: Some(r.hist.p50_us()),
                                p99_us: Some(r.hist.p99_us()),
                                max_us: Some(r.hist.max_us()),
                                memcpy_mib_per_s: mc.mib_per_s,
                                ratio_vs_memcpy: mib_s / mc.mib_per_s,
                                ns_per_copy: None,
                                keys_per_worker: keys,
                                seconds: secs,
                            })?;
                        }
                        Ok(())
                    })();
                    w.finish();
                    if let Ok(b) = client.bucket_open(&a.bucket) {
                        let _ = b.destroy();
                    }
                    res.with_context(|| format!("kv point {tag}"))?;
                }
            }
        }
        Ok(())
    })();
    pb.finish_and_clear();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("1KB").unwrap(), 1000);
        assert_eq!(parse_size("1.5MiB").unwrap(), 3 << 19);
        assert!(parse_size("1XB").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(format_size(64 << 10), "64KiB");
        assert_eq!(format_size(1000), "1000B");
    }

    #[test]
    fn op_counts_and_keys() {
        assert_eq!(default_ops(1024), 20_000);
        assert_eq!(default_ops(64 << 10), 4096);
        assert_eq!(default_ops(16 << 20), 64);
        assert_eq!(keys_per_worker(1024, 4, 256, 1 << 30), 256);
        assert_eq!(keys_per_worker(16 << 20, 16, 256, 1 << 30), 4);
        assert_eq!(keys_per_worker(1 << 30, 16, 256, 1 << 30), 2);
    }

    #[test]
    fn memcpy_reference_is_sane() {
        let m = memcpy_reference(4096, 1, Duration::from_millis(5));
        assert!(m.copies >= 16 && m.mib_per_s > 0.0 && m.ns_per_copy > 0.0);
    }
}
