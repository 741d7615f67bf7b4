//! `strata bench ycsb`: the YCSB core workloads A, B, C, D and F on 1 KiB
//! records (10 fields × 100 bytes plus a 24-byte header naming the key and
//! version, stored as one value per key), against strata and optionally
//! against a real `redis-server` with the same seeds, so both see the same
//! key sequence per thread.
//!
//! Keys are YCSB's: `"user" + fnvhash64(keynum)`. Zipfian workloads use the
//! scrambled zipfian chooser, D the skewed-latest chooser over the
//! acknowledged insert sequence, exactly as YCSB's `CoreWorkload` does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use strata_client::Client;

use crate::hist::Hist;
use crate::redis_peer::{RedisServer, RedisStore};
use crate::zipf::{fnv_hash64, AckCounter, Rng, ScrambledZipfian, SkewedLatest};

/// Fields per record and bytes per field (YCSB defaults).
pub const FIELD_COUNT: usize = 10;
pub const FIELD_LENGTH: usize = 100;
/// Header: key number, version, magic.
const HEADER: usize = 24;
pub const RECORD_BYTES: usize = FIELD_COUNT * FIELD_LENGTH + HEADER;
const MAGIC: u64 = 0x5943_5342_5354_5241; // "ARTSBSCY"

#[derive(clap::Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Core workloads to run (a, b, c, d, f).
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,f")]
    pub workloads: Vec<String>,
    /// Records inserted by the load phase.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Operations of the run phase (split across threads).
    #[arg(long, default_value_t = 200_000)]
    pub ops: u64,
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Also run every workload against a private redis-server and report strata/redis.
    #[arg(long)]
    pub vs_redis: bool,
    /// The redis-server binary (default: on PATH, else /usr/bin/redis-server).
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
    /// One JSON object per result on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Measure each workload this many times (fresh load each time).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Seed of the key and operation sequences (the same for every store).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Bucket used (destroyed before every load and at the end).
    #[arg(long, default_value = "strata-bench-ycsb")]
    pub bucket: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    Zipfian,
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Rmw,
}

pub const OP_KINDS: [OpKind; 4] = [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Rmw];

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Rmw => "rmw",
        }
    }
}

/// A YCSB core workload's mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub name: char,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub rmw: f64,
    pub dist: Dist,
}

impl Workload {
    pub fn core(name: &str) -> Result<Workload> {
        let w = |name, read, update, insert, rmw, dist| Workload {
            name,
            read,
            update,
            insert,
            rmw,
            dist,
        };
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "a" => w('a', 0.5, 0.5, 0.0, 0.0, Dist::Zipfian),
            "b" => w('b', 0.95, 0.05, 0.0, 0.0, Dist::Zipfian),
            "c" => w('c', 1.0, 0.0, 0.0, 0.0, Dist::Zipfian),
            "d" => w('d', 0.95, 0.0, 0.05, 0.0, Dist::Latest),
            "f" => w('f', 0.5, 0.0, 0.0, 0.5, Dist::Zipfian),
            "e" => bail!("workload e (scans) is not supported: strata has no ordered scan"),
            other => bail!("unknown workload {other:?} (use a, b, c, d, f)"),
        })
    }

    /// YCSB's DiscreteGenerator over the proportions, for u in [0, 1).
    pub fn choose(&self, u: f64) -> OpKind {
        let total = self.read + self.update + self.insert + self.rmw;
        let mut x = u * total;
        for (p, k) in [
            (self.read, OpKind::Read),
            (self.update, OpKind::Update),
            (self.insert, OpKind::Insert),
            (self.rmw, OpKind::Rmw),
        ] {
            if x < p {
                return k;
            }
            x -= p;
        }
        // Rounding at the top end: the last op with a share.
        [
            (self.rmw, OpKind::Rmw),
            (self.insert, OpKind::Insert),
            (self.update, OpKind::Update),
        ]
        .into_iter()
        .find(|(p, _)| *p > 0.0)
        .map(|(_, k)| k)
        .unwrap_or(OpKind::Read)
    }
}

/// YCSB's key name of key number `n` (hashed insert order).
pub fn key_name(n: u64) -> String {
    format!("user{}", fnv_hash64(n))
}

/// Fills `v` (RECORD_BYTES long) with a record: header + random field bytes.
pub fn fill_record(v: &mut [u8], keynum: u64, version: u64, rng: &mut Rng) {
    v[0..8].copy_from_slice(&keynum.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v[16..24].copy_from_slice(&MAGIC.to_le_bytes());
    rng.fill(&mut v[HEADER..]);
}

fn check_record(v: &[u8], keynum: u64) -> Result<()> {
    if v.len() != RECORD_BYTES {
        bail!(
            "record {} is {} bytes, expected {RECORD_BYTES}",
            key_name(keynum),
            v.len()
        );
    }
    let k = u64::from_le_bytes(v[0..8].try_into().expect("8 bytes"));
    let m = u64::from_le_bytes(v[16..24].try_into().expect("8 bytes"));
    if k != keynum || m != MAGIC {
        bail!(
            "record {} holds key number {k} (magic {m:#x})",
            key_name(keynum)
        );
    }
    Ok(())
}

/// Per-thread generator of a run's operations: same seed, same sequence.
pub struct OpGen {
    w: Workload,
    rng: Rng,
    zipf: Option<ScrambledZipfian>,
    latest: Option<SkewedLatest>,
}

pub enum NextOp {
    Read(u64),
    Update(u64),
    Insert,
    Rmw(u64),
}

impl OpGen {
    pub fn new(w: Workload, records: u64, seed: u64, last: u64) -> OpGen {
        let (zipf, latest) = match w.dist {
            Dist::Zipfian => (Some(ScrambledZipfian::new(0, records - 1)), None),
            Dist::Latest => (None, Some(SkewedLatest::new(last))),
        };
        OpGen {
            w,
            rng: Rng::new(seed),
            zipf,
            latest,
        }
    }

    fn key(&mut self, last: u64) -> u64 {
        match (&mut self.zipf, &mut self.latest) {
            (Some(z), _) => loop {
                // As YCSB: never a key beyond the acknowledged inserts.
                let k = z.next(&mut self.rng);
                if k <= last {
                    break k;
                }
            },
            (None, Some(l)) => l.next(&mut self.rng, last),
            _ => unreachable!("a chooser is always set"),
        }
    }

    /// The next op; `last` is the highest key number readable now.
    pub fn next(&mut self, last: u64) -> NextOp {
        match self.w.choose(self.rng.next_f64()) {
            OpKind::Read => NextOp::Read(self.key(last)),
            OpKind::Update => NextOp::Update(self.key(last)),
            OpKind::Insert => NextOp::Insert,
            OpKind::Rmw => NextOp::Rmw(self.key(last)),
        }
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

/// One thread's connection to a store.
pub trait KvConn {
    /// Reads `key` into `buf` (resized); returns false if absent.
    fn read(&mut self, key: &str, buf: &mut Vec<u8>) -> Result<bool>;
    fn write(&mut self, key: &str, val: &[u8]) -> Result<()>;
}

/// A store the driver can run against.
pub trait KvStore: Sync {
    type Conn: KvConn;
    fn name(&self) -> &'static str;
    fn connect(&self) -> Result<Self::Conn>;
    /// Removes every record.
    fn reset(&self) -> Result<()>;
}

pub struct StrataStore {
    client: Client,
    bucket: String,
}

impl StrataStore {
    pub fn new(socket: &Path, bucket: &str) -> Result<StrataStore> {
        Ok(StrataStore {
            client: Client::connect_to(socket).map_err(|e| anyhow!("{e}"))?,
            bucket: bucket.to_string(),
        })
    }
}

pub struct StrataConn {
    bucket: strata_client::Bucket,
}

impl KvConn for StrataConn {
    fn read(&mut self, key: &str, buf: &mut Vec<u8>) -> Result<bool> {
        buf.resize(RECORD_BYTES, 0);
        match self.bucket.get_at(key, 0, buf) {
            Ok(n) => {
                buf.truncate(n);
                Ok(true)
            }
            Err(e) if e.errno == strata_client::Errno::NoBlob => Ok(false),
            Err(e) => Err(anyhow!("{e}")),
        }
    }
    fn write(&mut self, key: &str, val: &[u8]) -> Result<()> {
        self.bucket.put(key, val).map_err(|e| anyhow!("{e}"))
    }
}

impl KvStore for StrataStore {
    type Conn = StrataConn;
    fn name(&self) -> &'static str {
        "strata"
    }
    fn connect(&self) -> Result<StrataConn> {
        Ok(StrataConn {
            bucket: self
                .client
                .bucket(&self.bucket)
                .map_err(|e| anyhow!("{e}"))?,
        })
    }
    fn reset(&self) -> Result<()> {
        match self.client.bucket_open(&self.bucket) {
            Ok(b) => b.destroy().map_err(|e| anyhow!("{e}")),
            Err(e) if e.errno == strata_client::Errno::NoBucket => Ok(()),
            Err(e) => Err(anyhow!("{e}")),
        }
    }
}

/// Result of one load or run phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseStats {
    pub ops: u64,
    pub secs: f64,
    pub hists: [Hist; 4],
}

impl PhaseStats {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
    pub fn hist(&self, k: OpKind) -> &Hist {
        &self.hists[k as usize]
    }
}

fn split(total: u64, parts: usize, i: usize) -> (u64, u64) {
    let parts = parts as u64;
    let i = i as u64;
    let base = total / parts;
    let extra = total % parts;
    let start = i * base + i.min(extra);
    (start, base + u64::from(i < extra))
}

fn thread_seed(seed: u64, w: char, repeat: usize, t: usize) -> u64 {
    fnv_hash64(seed ^ ((w as u64) << 48) ^ ((repeat as u64) << 32) ^ t as u64)
}

/// Runs `per_thread(thread, done)` on `threads` threads started together; returns the wall time.
fn parallel<F>(
    threads: usize,
    pb: &ProgressBar,
    total: u64,
    per_thread: F,
) -> Result<(f64, Vec<[Hist; 4]>)>
where
    F: Fn(usize, &AtomicU64) -> Result<[Hist; 4]> + Sync,
{
    let done = AtomicU64::new(0);
    let barrier = Barrier::new(threads + 1);
    pb.set_length(total);
    pb.set_position(0);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (f, done, barrier) = (&per_thread, &done, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    f(t, done)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        while !hs.iter().all(|h| h.is_finished()) {
            pb.set_position(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(20));
        }
        let secs = start.elapsed().as_secs_f64();
        let mut out = Vec::new();
        for h in hs {
            out.push(
                h.join()
                    .map_err(|_| anyhow!("a benchmark thread panicked"))??,
            );
        }
        pb.set_position(done.load(Ordering::Relaxed));
        Ok((secs, out))
    })
}

fn merge(hs: Vec<[Hist; 4]>) -> [Hist; 4] {
    let mut m: [Hist; 4] = Default::default();
    for h in hs {
        for (a, b) in m.iter_mut().zip(h.iter()) {
            a.merge(b);
        }
    }
    m
}

/// Load phase: inserts keys [0, records), split in ranges across threads.
pub fn load<S: KvStore>(
    store: &S,
    records: u64,
    threads: usize,
    seed: u64,
    pb: &ProgressBar,
) -> Result<PhaseStats> {
    store.reset()?;
    let (secs, hs) = parallel(threads, pb, records, |t, done| {
        let mut conn = store.connect()?;
        let (start, count) = split(records, threads, t);
        let mut rng = Rng::new(thread_seed(seed, 'L', 0, t));
        let mut v = vec![0u8; RECORD_BYTES];
        let mut h: [Hist; 4] = Default::default();
        for k in start..start + count {
            fill_record(&mut v, k, 0, &mut rng);
            let key = key_name(k);
            let t0 = Instant::now();
            conn.write(&key, &v)?;
            h[OpKind::Insert as usize].record_ns(t0.elapsed().as_nanos() as u64);
            done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(h)
    })?;
    Ok(PhaseStats {
        ops: records,
        secs,
        hists: merge(hs),
    })
}

/// Run phase: `ops` operations of workload `w` split across threads.
#[allow(clippy::too_many_arguments)]
pub fn run_workload<S: KvStore>(
    store: &S,
    w: Workload,
    records: u64,
    ops: u64,
    threads: usize,
    seed: u64,
    repeat: usize,
    pb: &ProgressBar,
) -> Result<PhaseStats> {
    let ack = AckCounter::new(records);
    let (secs, hs) = parallel(threads, pb, ops, |t, done| {
        let mut conn = store.connect()?;
        let (_, count) = split(ops, threads, t);
        let mut gen = OpGen::new(w, records, thread_seed(seed, w.name, repeat, t), ack.last());
        let mut v = vec![0u8; RECORD_BYTES];
        let mut buf = Vec::with_capacity(RECORD_BYTES);
        let mut h: [Hist; 4] = Default::default();
        for _ in 0..count {
            let op = gen.next(ack.last());
            let (kind, ns) = match op {
                NextOp::Read(k) => {
                    let key = key_name(k);
                    let t0 = Instant::now();
                    let found = conn.read(&key, &mut buf)?;
                    let ns = t0.elapsed().as_nanos() as u64;
                    if !found {
                        bail!("read {key}: missing (key number {k})");
                    }
                    check_record(&buf, k)?;
                    (OpKind::Read, ns)
                }
                NextOp::Update(k) => {
                    let key = key_name(k);
                    fill_record(&mut v, k, 1, gen.rng());
                    let t0 = Instant::now();
                    conn.write(&key, &v)?;
                    (OpKind::Update, t0.elapsed().as_nanos() as u64)
                }
                NextOp::Insert => {
                    let k = ack.next();
                    let key = key_name(k);
                    fill_record(&mut v, k, 0, gen.rng());
                    let t0 = Instant::now();
                    conn.write(&key, &v)?;
                    let ns = t0.elapsed().as_nanos() as u64;
                    ack.ack(k);
                    (OpKind::Insert, ns)
                }
                NextOp::Rmw(k) => {
                    let key = key_name(k);
                    fill_record(&mut v, k, 2, gen.rng());
                    let t0 = Instant::now();
                    let found = conn.read(&key, &mut buf)?;
                    if !found {
                        bail!("read-modify-write {key}: missing");
                    }
                    // Modify: one field of the record read replaced.
                    let f = HEADER + (k as usize % FIELD_COUNT) * FIELD_LENGTH;
                    buf[f..f + FIELD_LENGTH].copy_from_slice(&v[f..f + FIELD_LENGTH]);
                    conn.write(&key, &buf)?;
                    (OpKind::Rmw, t0.elapsed().as_nanos() as u64)
                }
            };
            h[kind as usize].record_ns(ns);
            done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(h)
    })?;
    Ok(PhaseStats {
        ops,
        secs,
        hists: merge(hs),
    })
}

/// Load, then run: one measurement of `w` against `store`.
fn measure<S: KvStore>(
    store: &S,
    a: &YcsbArgs,
    w: Workload,
    rep: usize,
    pb: &ProgressBar,
) -> Result<(PhaseStats, PhaseStats)> {
    let l = load(store, a.records, a.threads, a.seed, pb)?;
    let r = run_workload(store, w, a.records, a.ops, a.threads, a.seed, rep, pb)?;
    Ok((l, r))
}

/// mean, min, max, sample standard deviation.
pub fn spread(xs: &[f64]) -> (f64, f64, f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let min = xs.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sd = if xs.len() > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, min, max, sd)
}

struct Series {
    runs: Vec<f64>,
    hists: [Hist; 4],
}

impl Series {
    fn new() -> Series {
        Series {
            runs: Vec::new(),
            hists: Default::default(),
        }
    }
    fn add(&mut self, s: &PhaseStats) {
        self.runs.push(s.ops_per_s());
        for (a, b) in self.hists.iter_mut().zip(s.hists.iter()) {
            a.merge(b);
        }
    }
}

fn lat_fields(hists: &[Hist; 4]) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    for k in OP_KINDS {
        let h = &hists[k as usize];
        if h.count() > 0 {
            m.insert(format!("{}_ops", k.name()), json!(h.count()));
            m.insert(format!("{}_p50_us", k.name()), json!(h.p50_us()));
            m.insert(format!("{}_p99_us", k.name()), json!(h.p99_us()));
        }
    }
    m
}

fn lat_text(hists: &[Hist; 4]) -> String {
    OP_KINDS
        .iter()
        .filter(|k| hists[**k as usize].count() > 0)
        .map(|k| {
            let h = &hists[*k as usize];
            format!("{} {:.1}/{:.1}", k.name(), h.p50_us(), h.p99_us())
        })
        .collect::<Vec<_>>()
        .join("  ")
}

pub fn run(a: YcsbArgs, socket: &Path) -> Result<()> {
    if a.records == 0 || a.threads == 0 || a.repeat == 0 {
        bail!("--records, --threads and --repeat must be ≥ 1");
    }
    let workloads: Vec<Workload> = a
        .workloads
        .iter()
        .map(|w| Workload::core(w))
        .collect::<Result<_>>()?;
    // Start redis first: a missing binary fails before any work.
    let redis = if a.vs_redis {
        let bin = RedisServer::find(a.redis_server.as_deref())?;
        let server = RedisServer::start(&bin)?;
        let store = RedisStore::new(&server.url())?;
        Some((server, store))
    } else {
        None
    };
    let strata = StrataStore::new(socket, &a.bucket)?;
    let pb = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    let say = |line: String| pb.suspend(|| println!("{line}"));
    if !a.json {
        say(format!(
            "YCSB: {} records of {} B, {} ops, {} threads, {} repeat(s), seed {}; latencies p50/p99 in µs",
            a.records, RECORD_BYTES, a.ops, a.threads, a.repeat, a.seed
        ));
        say(format!(
            "{:<3} {:<7} {:>3} {:>12} {:>12}  {}",
            "WL", "STORE", "REP", "LOAD OPS/S", "RUN OPS/S", "LATENCY (op p50/p99 µs)"
        ));
    }
    let mut summaries = Vec::new();
    let result = (|| -> Result<()> {
        for w in &workloads {
            let mut s_strata = Series::new();
            let mut s_redis = Series::new();
            let mut ratios = Vec::new();
            for rep in 0..a.repeat {
                let record = |store_name: &str,
                              series: &mut Series,
                              res: Result<(PhaseStats, PhaseStats)>|
                 -> Result<f64> {
                    let (l, r) =
                        res.with_context(|| format!("workload {} against {store_name}", w.name))?;
                    series.add(&r);
                    if a.json {
                        let mut m = serde_json::Map::new();
                        m.insert("bench".into(), json!("ycsb"));
                        m.insert("kind".into(), json!("run"));
                        m.insert("workload".into(), json!(w.name.to_string()));
                        m.insert("store".into(), json!(store_name));
                        m.insert("repeat".into(), json!(rep));
                        m.insert("records".into(), json!(a.records));
                        m.insert("threads".into(), json!(a.threads));
                        m.insert("ops".into(), json!(r.ops));
                        m.insert("ops_per_s".into(), json!(r.ops_per_s()));
                        m.insert("load_ops_per_s".into(), json!(l.ops_per_s()));
                        m.extend(lat_fields(&r.hists));
                        say(serde_json::Value::Object(m).to_string());
                    } else {
                        say(format!(
                            "{:<3} {:<7} {:>3} {:>12.0} {:>12.0}  {}",
                            w.name,
                            store_name,
                            rep + 1,
                            l.ops_per_s(),
                            r.ops_per_s(),
                            lat_text(&r.hists)
                        ));
                    }
                    Ok(r.ops_per_s())
                };
                pb.set_message(format!("workload {} strata #{}", w.name, rep + 1));
                let st = record("strata", &mut s_strata, measure(&strata, &a, *w, rep, &pb))?;
                if let Some((_, rs)) = &redis {
                    pb.set_message(format!("workload {} redis #{}", w.name, rep + 1));
                    let rt = record("redis", &mut s_redis, measure(rs, &a, *w, rep, &pb))?;
                    ratios.push(st / rt);
                }
            }
            summaries.push((
                w.name,
                s_strata,
                if redis.is_some() {
                    Some((s_redis, ratios))
                } else {
                    None
                },
            ));
        }
        Ok(())
    })();
    pb.finish_and_clear();
    let _ = strata.reset();
    if let Some((server, store)) = redis {
        drop(store);
        server.stop();
    }
    result?;
    // Summary.
    if !a.json {
        println!();
        println!(
            "Summary over {} repeat(s): run-phase throughput, mean [min–max] ± stddev",
            a.repeat
        );
        if summaries.iter().any(|s| s.2.is_some()) {
            println!(
                "{:<3} {:<40}  {:<40}STRATA/REDIS",
                "WL", "STRATA ops/s", "REDIS ops/s"
            );
        } else {
            println!("WL  STRATA ops/s");
        }
    }
    for (name, st, rd) in &summaries {
        let (m, lo, hi, sd) = spread(&st.runs);
        let stxt = format!("{m:.0} [{lo:.0}–{hi:.0}] ± {sd:.0}");
        if a.json {
            for (store, series) in
                std::iter::once(("strata", st)).chain(rd.as_ref().map(|r| ("redis", &r.0)))
            {
                let (m, lo, hi, sd) = spread(&series.runs);
                let mut o = serde_json::Map::new();
                o.insert("bench".into(), json!("ycsb"));
                o.insert("kind".into(), json!("summary"));
                o.insert("workload".into(), json!(name.to_string()));
                o.insert("store".into(), json!(store));
                o.insert("repeats".into(), json!(series.runs.len()));
                o.insert("mean_ops_per_s".into(), json!(m));
                o.insert("min_ops_per_s".into(), json!(lo));
                o.insert("max_ops_per_s".into(), json!(hi));
                o.insert("stddev_ops_per_s".into(), json!(sd));
                o.extend(lat_fields(&series.hists));
                println!("{}", serde_json::Value::Object(o));
            }
            if let Some((_, ratios)) = rd {
                let (m, lo, hi, sd) = spread(ratios);
                println!(
                    "{}",
                    json!({"bench": "ycsb", "kind": "ratio", "workload": name.to_string(), "ratio_strata_vs_redis_mean": m,
                           "ratio_min": lo, "ratio_max": hi, "ratio_stddev": sd, "repeats": ratios.len()})
                );
            }
        } else if let Some((rs, ratios)) = rd {
            let (rm, rlo, rhi, rsd) = spread(&rs.runs);
            let (qm, qlo, qhi, _) = spread(ratios);
            println!(
                "{:<3} {:<40}  {:<40}{qm:.2}x [{qlo:.2}–{qhi:.2}]",
                name,
                stxt,
                format!("{rm:.0} [{rlo:.0}–{rhi:.0}] ± {rsd:.0}")
            );
        } else {
            println!("{:<3} {}", name, stxt);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_proportions_within_tolerance() {
        let draws = 100_000;
        for (name, expect) in [
            ("a", [0.5, 0.5, 0.0, 0.0]),
            ("b", [0.95, 0.05, 0.0, 0.0]),
            ("c", [1.0, 0.0, 0.0, 0.0]),
            ("d", [0.95, 0.0, 0.05, 0.0]),
            ("f", [0.5, 0.0, 0.0, 0.5]),
        ] {
            let w = Workload::core(name).unwrap();
            let mut g = OpGen::new(w, 1000, 42, 999);
            let mut c = [0u64; 4];
            for _ in 0..draws {
                let kind = match g.next(999) {
                    NextOp::Read(k) | NextOp::Update(k) | NextOp::Rmw(k) if k > 999 => {
                        panic!("key {k} out of range")
                    }
                    NextOp::Read(_) => OpKind::Read,
                    NextOp::Update(_) => OpKind::Update,
                    NextOp::Insert => OpKind::Insert,
                    NextOp::Rmw(_) => OpKind::Rmw,
                };
                c[kind as usize] += 1;
            }
            for i in 0..4 {
                let got = c[i] as f64 / draws as f64;
                assert!(
                    (got - expect[i]).abs() < 0.01,
                    "workload {name} op {i}: {got} vs {}",
                    expect[i]
                );
            }
        }
    }

    #[test]
    fn choose_edges() {
        let b = Workload::core("b").unwrap();
        assert_eq!(b.choose(0.0), OpKind::Read);
        assert_eq!(b.choose(0.9499), OpKind::Read);
        assert_eq!(b.choose(0.951), OpKind::Update);
        assert_eq!(b.choose(0.999_999_999), OpKind::Update);
        assert!(Workload::core("e").is_err());
        assert!(Workload::core("z").is_err());
    }

    #[test]
    fn same_seed_same_ops() {
        let w = Workload::core("a").unwrap();
        let mut x = OpGen::new(w, 100_000, 7, 99_999);
        let mut y = OpGen::new(w, 100_000, 7, 99_999);
        for _ in 0..10_000 {
            let a = match x.next(99_999) {
                NextOp::Read(k) => (0, k),
                NextOp::Update(k) => (1, k),
                _ => unreachable!(),
            };
            let b = match y.next(99_999) {
                NextOp::Read(k) => (0, k),
                NextOp::Update(k) => (1, k),
                _ => unreachable!(),
            };
            assert_eq!(a, b);
        }
    }

    #[test]
    fn records_roundtrip() {
        let mut v = vec![0u8; RECORD_BYTES];
        fill_record(&mut v, 77, 3, &mut Rng::new(1));
        check_record(&v, 77).unwrap();
        assert!(check_record(&v, 78).is_err());
        assert_eq!(RECORD_BYTES, 1024);
        assert!(key_name(0).starts_with("user"));
    }

    #[test]
    fn split_covers_everything() {
        let parts: Vec<_> = (0..3).map(|i| split(10, 3, i)).collect();
        assert_eq!(parts, vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(spread(&[1.0, 2.0, 3.0]), (2.0, 1.0, 3.0, 1.0));
    }
}
