//! `strata bench python`: the Python package against its peers, same run
//! (issue 17's benchmark). Per repeat: a fresh private daemon (RAM tier)
//! and a private `redis-server`; `python/bench/py_bench.py` (embedded) run
//! by `--python` measures, for each blob size and process count, strata
//! put / get / get_into, redis-py SET / GET and the built-in file I/O on
//! tmpfs, then `strata.open` sequential 1 MiB writes/reads (SCRATCH and
//! DEFAULT, each after an untimed pass unless `--cold`) against the
//! built-in `open` on tmpfs; this process measures the
//! Rust client's 16 MiB get (into a buffer) on the same daemon, for the
//! "Python ≥ 0.8× Rust" target.
//!
//! Targets (issue 17): ≥ 10× redis-py ops/s at 1 KiB; Python get_into at
//! 16 MiB ≥ 0.8× the Rust client; strata.open sequential 1 MiB ≥ 1.0×
//! the built-in open on tmpfs. Figures: medians over the repeats with the
//! range of the per-repeat ratios.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::kv::{format_size, parse_size};
use crate::redis_peer::RedisServer;
use crate::team::{median_min_max, DaemonSpec, PrivateDaemon};

const PY_BENCH: &str = include_str!("../../../python/bench/py_bench.py");

#[derive(clap::Args, Debug, Clone)]
pub struct PythonArgs {
    /// A Python with the strata package (`pip install ./python`) and redis-py.
    #[arg(long)]
    pub python: String,
    /// Blob sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_size,
          default_value = "1KiB,4KiB,64KiB,1MiB,16MiB")]
    pub sizes: Vec<u64>,
    /// Process counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub procs: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// MiB of the sequential strata.open / open files (0: leave them out).
    #[arg(long, default_value_t = 256)]
    pub file_mib: u64,
    /// RAM tier of the private daemons.
    #[arg(long, default_value = "3GiB", value_parser = parse_size)]
    pub ram: u64,
    /// Leave redis-server out (not installed).
    #[arg(long)]
    pub no_redis: bool,
    /// Time the sequential file runs cold: no untimed pass first (a fresh
    /// daemon's arena pages are faulted in by the timed writes).
    #[arg(long)]
    pub cold: bool,
}

/// Key of a measurement: (kind, system, op, size, procs).
type Key = (String, String, String, u64, usize);

fn rust_get_mib_s(socket: &std::path::Path, size: u64, seconds: f64) -> Result<f64> {
    let c = strata_client::Client::connect_to(socket).map_err(|e| anyhow::anyhow!("{e}"))?;
    let b = c.bucket("bench-rust").map_err(|e| anyhow::anyhow!("{e}"))?;
    let data = vec![0x5au8; size as usize];
    let keys = (256u64 << 20).div_ceil(size).clamp(1, 16);
    for k in 0..keys {
        b.put(&format!("k{k}"), &data)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut buf = vec![0u8; size as usize];
    let t0 = Instant::now();
    let deadline = Duration::from_secs_f64(seconds);
    let mut ops = 0u64;
    // bounded: the deadline (each pass is `keys` gets)
    while t0.elapsed() < deadline {
        for k in 0..keys {
            let n = b
                .get_at(&format!("k{k}"), 0, &mut buf)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            assert_eq!(n as u64, size, "short get");
        }
        ops += keys;
    }
    let mib_s = (ops * size) as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64();
    for k in 0..keys {
        let _ = b.delete(&format!("k{k}"));
    }
    Ok(mib_s)
}

pub fn run(a: PythonArgs) -> Result<()> {
    if a.repeats == 0 || a.sizes.is_empty() || a.procs.is_empty() || a.seconds <= 0.0 {
        bail!("--repeats ≥ 1, --seconds > 0, and at least one size and process count");
    }
    let ok = Command::new(&a.python)
        .args(["-c", "import strata"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        bail!(
            "{} cannot import strata: `pip install ./python` into it first",
            a.python
        );
    }
    let redis_bin = if a.no_redis {
        None
    } else {
        Some(RedisServer::find(None)?)
    };
    let work = tempfile::Builder::new()
        .prefix("strata-pyb-")
        .tempdir_in("/dev/shm")
        .context("cannot make a directory in /dev/shm")?;
    let script = work.path().join("py_bench.py");
    std::fs::write(&script, PY_BENCH)?;
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    let procs: Vec<String> = a.procs.iter().map(|p| p.to_string()).collect();
    let mut runs: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    let mut rust16: Vec<f64> = Vec::new();
    let big = *a.sizes.iter().max().expect("non-empty");
    for r in 0..a.repeats {
        eprintln!("bench python: repeat {}/{}", r + 1, a.repeats);
        let d = PrivateDaemon::start(&DaemonSpec {
            ram_bytes: a.ram,
            disk: None,
            extra_yaml: String::new(),
        })?;
        let rust_before = rust_get_mib_s(&d.socket, big, a.seconds)?;
        let redis = match &redis_bin {
            Some(b) => Some(RedisServer::start(b)?),
            None => None,
        };
        let dir = work.path().join(format!("r{r}"));
        std::fs::create_dir_all(&dir)?;
        let mut c = Command::new(&a.python);
        c.arg(&script)
            .arg("--socket")
            .arg(&d.socket)
            .arg("--dir")
            .arg(&dir)
            .args(["--sizes", &sizes.join(",")])
            .args(["--procs", &procs.join(",")])
            .args(["--seconds", &a.seconds.to_string()])
            .args(["--file-mib", &a.file_mib.to_string()]);
        if let Some(rs) = &redis {
            c.args(["--redis-port", &rs.port().to_string()]);
        }
        if a.cold {
            c.arg("--cold");
        }
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("STRATA_") {
                c.env_remove(k);
            }
        }
        let o = c.output().context("cannot run py_bench.py")?;
        if let Some(rs) = redis {
            rs.stop();
        }
        // the Rust figure is the mean of one run before and one after Python's
        let rust_after = rust_get_mib_s(&d.socket, big, a.seconds)?;
        rust16.push((rust_before + rust_after) / 2.0);
        if !o.status.success() {
            bail!(
                "py_bench.py failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("py_bench said {line:?}"))?;
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            match v["kind"].as_str() {
                Some("kv") => {
                    let key = (
                        "kv".into(),
                        s("system"),
                        s("op"),
                        v["size"].as_u64().unwrap_or(0),
                        v["procs"].as_u64().unwrap_or(0) as usize,
                    );
                    let val = v["ops_s"].as_f64().unwrap_or(f64::NAN);
                    runs.entry(key).or_default().push(val);
                }
                Some("seq") => {
                    for op in ["write", "read"] {
                        let key = ("seq".into(), s("system"), op.into(), 1 << 20, 1);
                        let val = v[format!("{op}_mib_s")].as_f64().unwrap_or(f64::NAN);
                        runs.entry(key).or_default().push(val);
                    }
                }
                _ => bail!("py_bench said {line:?}"),
            }
        }
        drop(d);
    }
    report(&a, &runs, &rust16, big);
    Ok(())
}

fn ratio_text(v: &[f64], peer: &[f64]) -> String {
    if v.is_empty() || v.len() != peer.len() {
        return "-".into();
    }
    let r: Vec<f64> = v.iter().zip(peer).map(|(a, b)| a / b).collect();
    let (m, lo, hi) = median_min_max(&r);
    format!("{m:.2} ({lo:.2}–{hi:.2})")
}

fn report(a: &PythonArgs, runs: &BTreeMap<Key, Vec<f64>>, rust16: &[f64], big: u64) {
    let get = |sys: &str, op: &str, size: u64, procs: usize| -> Vec<f64> {
        runs.get(&("kv".into(), sys.into(), op.into(), size, procs))
            .cloned()
            .unwrap_or_default()
    };
    println!(
        "{:<10} {:>6} {:>5} {:>12} {:>12} {:>18} {:>12} {:>18}",
        "OP",
        "SIZE",
        "PROCS",
        "STRATA OP/S",
        "REDIS-PY",
        "×REDIS (RANGE)",
        "FILE/TMPFS",
        "×FILE (RANGE)"
    );
    for &procs in &a.procs {
        for &size in &a.sizes {
            for op in ["put", "get", "get_into"] {
                let s = get("strata", op, size, procs);
                if s.is_empty() {
                    continue;
                }
                let redis_op = if op == "get_into" { "get" } else { op };
                let rd = get("redis", redis_op, size, procs);
                let f = get("files", op, size, procs);
                let med = |v: &[f64]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        format!("{:.0}", median_min_max(v).0)
                    }
                };
                println!(
                    "{:<10} {:>6} {:>5} {:>12} {:>12} {:>18} {:>12} {:>18}",
                    op,
                    format_size(size),
                    procs,
                    med(&s),
                    med(&rd),
                    ratio_text(&s, &rd),
                    med(&f),
                    ratio_text(&s, &f)
                );
            }
        }
    }
    let py16: Vec<f64> = get("strata", "get_into", big, 1)
        .iter()
        .map(|ops| ops * big as f64 / (1 << 20) as f64)
        .collect();
    if !py16.is_empty() {
        println!(
            "get_into {} (1 process) vs the Rust client's get into a buffer: Python {:.0} MiB/s, Rust {:.0} MiB/s, ratio {}",
            format_size(big),
            median_min_max(&py16).0,
            median_min_max(rust16).0,
            ratio_text(&py16, rust16)
        );
    }
    let seq = |sys: &str, op: &str| {
        runs.get(&("seq".into(), sys.into(), op.into(), 1 << 20, 1))
            .cloned()
            .unwrap_or_default()
    };
    if a.file_mib > 0 {
        println!(
            "{:<24} {:>6} {:>12} {:>14} {:>18}",
            "SEQUENTIAL 1 MiB", "OP", "MIB/S", "OPEN ON TMPFS", "RATIO (RANGE)"
        );
        for sys in ["strata.open SCRATCH", "strata.open DEFAULT"] {
            for op in ["write", "read"] {
                let v = seq(sys, op);
                let p = seq("builtin open on tmpfs", op);
                if v.is_empty() {
                    continue;
                }
                println!(
                    "{:<24} {:>6} {:>12.0} {:>14.0} {:>18}",
                    sys,
                    op,
                    median_min_max(&v).0,
                    median_min_max(&p).0,
                    ratio_text(&v, &p)
                );
            }
        }
    }
    println!(
        "({} s per measurement, {} repeat(s), median (range of per-repeat ratios); files of {} MiB{}; a fresh private daemon and redis-server per repeat; the Rust figure is the mean of a run before and one after Python's)",
        a.seconds,
        a.repeats,
        a.file_mib,
        if a.cold { ", timed cold" } else { ", each after one untimed pass" }
    );
}
