//! `strata bench hdf5`: HDF5 write/read through strata's driver against the
//! same program on HDF5's sec2 driver on tmpfs and on the destination (e.g.
//! slow-pfs), same run (issue 16's HDF5 benchmark).
//!
//! Programs: `tests/adapter/h5bench.c` (C, Debian's HDF5 1.10, the driver
//! linked: `H5Pset_fapl_strata`) and, with a Python that has h5py,
//! `tests/adapter/h5py_bench.py` (h5py's own HDF5 ≥ 1.14, the driver as a
//! plugin: `HDF5_DRIVER=strata`). Each writes one chunked dataset of
//! `--size` bytes in `--chunk` pieces, closes it, reopens and reads it back,
//! checking every value. Per repeat and API:
//!
//! - **tmpfs**: sec2 on a /dev/shm directory;
//! - **destination**: sec2 on `--dest`, write + fsync (its durable write);
//! - **SCRATCH** and **DEFAULT**: the strata driver, a fresh private daemon
//!   (RAM tier `--ram`) whose destination is `--dest`; after DEFAULT, a
//!   timed `strata flush --wait` (background flushing off: that is the drain).
//!
//! Targets (issue 16): SCRATCH ≥ 1.0× tmpfs for write and read; DEFAULT
//! write ≥ 8× the destination's. Figures: MiB/s, medians over the repeats
//! with the range of the per-repeat ratios.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::checkpoint::parse_report;
use crate::kv::{format_size, parse_size};
use crate::team::{median_min_max, DaemonSpec, PrivateDaemon};

const H5BENCH_C: &str = include_str!("../../../tests/adapter/h5bench.c");
const H5PY_BENCH: &str = include_str!("../../../tests/adapter/h5py_bench.py");

#[derive(clap::Args, Debug, Clone)]
pub struct Hdf5Args {
    /// Bytes of the dataset.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub size: u64,
    /// Bytes per chunk (and per H5Dwrite / H5Dread).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub chunk: u64,
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// RAM tier of the private daemons.
    #[arg(long, default_value = "3GiB", value_parser = parse_size)]
    pub ram: u64,
    /// The destination file system (default: the slow-pfs mount).
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// A Python with h5py for the h5py rows (default: python3 if it imports
    /// h5py; else those rows are left out, said so).
    #[arg(long)]
    pub python: Option<String>,
}

fn output(mut c: Command, what: &str) -> Result<String> {
    let o = c.output().with_context(|| format!("cannot run {what}"))?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        bail!("{what} failed: {out}{}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(out)
}

/// How one API's program is run.
struct Api {
    name: &'static str,
    /// program and leading arguments
    argv: Vec<String>,
    /// h5py: the driver by environment (plugin dir)
    plugin_dir: Option<PathBuf>,
}

impl Api {
    /// `file` written and read with sec2 (`strata` None) or strata's driver
    /// in that mode, against `daemon`.
    fn command(
        &self,
        a: &Hdf5Args,
        file: &Path,
        strata: Option<(&str, &PrivateDaemon)>,
        sync: bool,
    ) -> Command {
        let mut c = Command::new(&self.argv[0]);
        c.args(&self.argv[1..]);
        let size = a.size.to_string();
        let chunk = a.chunk.to_string();
        c.env_remove("LD_PRELOAD")
            .env_remove("HDF5_DRIVER")
            .env_remove("HDF5_DRIVER_CONFIG");
        match &self.plugin_dir {
            None => {
                c.arg(if strata.is_some() { "strata" } else { "sec2" })
                    .arg(file)
                    .arg(&size)
                    .arg(&chunk);
                if let Some((mode, _)) = strata {
                    c.arg(mode);
                }
            }
            Some(dir) => {
                c.arg(file).arg(&size).arg(&chunk);
                if let Some((mode, _)) = strata {
                    c.env("HDF5_PLUGIN_PATH", dir)
                        .env("HDF5_DRIVER", "strata")
                        .env("HDF5_DRIVER_CONFIG", mode);
                }
            }
        }
        if sync {
            c.arg("sync");
        }
        if let Some((_, d)) = strata {
            c.env("STRATA_SOCKET", &d.socket)
                .env("STRATA_CONFIG", &d.config);
        }
        c
    }
}

struct Series {
    what: String,
    peer: &'static str,
    values: Vec<f64>,
    peers: Vec<f64>,
}

impl Series {
    fn new(what: String, peer: &'static str) -> Series {
        Series {
            what,
            peer,
            values: Vec::new(),
            peers: Vec::new(),
        }
    }
    fn push(&mut self, v: f64, peer: f64) {
        self.values.push(v);
        self.peers.push(peer);
    }
}

pub fn run(a: Hdf5Args) -> Result<()> {
    if a.size == 0
        || a.chunk == 0
        || !a.size.is_multiple_of(a.chunk)
        || !a.chunk.is_multiple_of(8)
        || a.repeats == 0
    {
        bail!("--size must be a multiple of --chunk, --chunk a multiple of 8, --repeats ≥ 1");
    }
    let strata = crate::strata_exe()?;
    let lib = strata.with_file_name("libstrata_h5fd.so");
    if !lib.is_file() {
        bail!(
            "{} is not built: run `cargo build --release -p strata-h5fd`",
            lib.display()
        );
    }
    let (dest_root, mounted) = match &a.dest {
        Some(d) => (d.clone(), true),
        None => crate::adapters::slow_pfs_mount(None, false)?,
    };
    if !mounted {
        bail!(
            "{} is not mounted: ../shared/tools/slow-pfs up, or give --dest DIR",
            dest_root.display()
        );
    }
    let work = tempfile::Builder::new().prefix("strata-h5b-").tempdir()?;
    let src = work.path().join("h5bench.c");
    std::fs::write(&src, H5BENCH_C)?;
    let exe = work.path().join("h5bench");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "hdf5-serial"])
        .output()
        .context("cannot run pkg-config (install pkg-config and libhdf5-dev)")?;
    if !flags.status.success() {
        bail!("pkg-config cannot find hdf5-serial: install libhdf5-dev");
    }
    let libdir = lib.parent().context("library directory")?;
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(String::from_utf8_lossy(&flags.stdout).split_whitespace())
        .arg(format!("-L{}", libdir.display()))
        .arg("-lstrata_h5fd")
        .arg(format!("-Wl,-rpath,{}", libdir.display()));
    output(cc, "cc h5bench.c")?;
    let mut apis = vec![Api {
        name: "C (HDF5 1.10, linked driver)",
        argv: vec![exe.display().to_string()],
        plugin_dir: None,
    }];
    let python = a
        .python
        .clone()
        .or_else(|| Some("python3".into()))
        .filter(|p| {
            Command::new(p)
                .args(["-c", "import h5py"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    match python {
        Some(py) => {
            let script = work.path().join("h5py_bench.py");
            std::fs::write(&script, H5PY_BENCH)?;
            let plugins = work.path().join("plugins");
            std::fs::create_dir_all(&plugins)?;
            std::fs::copy(&lib, plugins.join("libstrata_h5fd.so"))?;
            apis.push(Api {
                name: "h5py (its HDF5, plugin)",
                argv: vec![py, script.display().to_string()],
                plugin_dir: Some(plugins),
            });
        }
        None => eprintln!("bench hdf5: no python with h5py (--python): h5py rows left out"),
    }
    let shm = tempfile::Builder::new()
        .prefix("strata-h5b-")
        .tempdir_in("/dev/shm")
        .context("cannot make a directory in /dev/shm")?;
    let dest = tempfile::Builder::new()
        .prefix("strata-h5b-")
        .tempdir_in(&dest_root)
        .with_context(|| format!("cannot make a directory in {}", dest_root.display()))?;
    let mut all = Vec::new();
    for api in &apis {
        let mut sw = Series::new(format!("{}: SCRATCH write", api.name), "tmpfs");
        let mut sr = Series::new(format!("{}: SCRATCH read", api.name), "tmpfs");
        let mut dw = Series::new(format!("{}: DEFAULT write", api.name), "destination");
        let mut dr = Series::new(format!("{}: DEFAULT read", api.name), "tmpfs");
        let mut drain = Series::new(format!("{}: drain (flush --wait)", api.name), "destination");
        let mut tw = Series::new(format!("{}: tmpfs write (peer)", api.name), "");
        let mut tr = Series::new(format!("{}: tmpfs read (peer)", api.name), "");
        let mut pw = Series::new(format!("{}: destination write+fsync (peer)", api.name), "");
        let mut pr = Series::new(format!("{}: destination read (peer)", api.name), "");
        for r in 0..a.repeats {
            eprintln!("bench hdf5: {}, repeat {}/{}", api.name, r + 1, a.repeats);
            let f = shm.path().join("t.h5");
            let (t_w, t_r) = parse_report(
                &output(api.command(&a, &f, None, false), "tmpfs run")?,
                a.size,
            )?;
            std::fs::remove_file(&f)?;
            let f = dest.path().join("p.h5");
            let (p_w, p_r) = parse_report(
                &output(api.command(&a, &f, None, true), "destination run")?,
                a.size,
            )?;
            std::fs::remove_file(&f)?;
            let spec = DaemonSpec {
                ram_bytes: a.ram,
                disk: None,
                extra_yaml: "flush:\n  enabled: false\n".into(),
            };
            let (s_w, s_r) = {
                let d = PrivateDaemon::start(&spec)?;
                let f = dest.path().join("s.h5");
                parse_report(
                    &output(
                        api.command(&a, &f, Some(("scratch", &d)), false),
                        "SCRATCH run",
                    )?,
                    a.size,
                )?
            };
            let (d_w, d_r, drained) = {
                let d = PrivateDaemon::start(&spec)?;
                let f = dest.path().join("d.h5");
                let (w, rd) = parse_report(
                    &output(
                        api.command(&a, &f, Some(("default", &d)), false),
                        "DEFAULT run",
                    )?,
                    a.size,
                )?;
                let t0 = Instant::now();
                let mut c = Command::new(&strata);
                c.arg("--config")
                    .arg(&d.config)
                    .args(["flush", "--wait"])
                    .arg(&f);
                output(c, "strata flush --wait")?;
                let mib = a.size as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
                let _ = std::fs::remove_file(&f);
                (w, rd, mib)
            };
            sw.push(s_w, t_w);
            sr.push(s_r, t_r);
            dw.push(d_w, p_w);
            dr.push(d_r, t_r);
            drain.push(drained, p_w);
            tw.push(t_w, f64::NAN);
            tr.push(t_r, f64::NAN);
            pw.push(p_w, f64::NAN);
            pr.push(p_r, f64::NAN);
        }
        all.extend([sw, sr, dw, dr, drain, tw, tr, pw, pr]);
    }
    println!(
        "{:<52} {:>9} {:<12} {:>9} {:>20}",
        "WHAT", "MiB/s", "PEER", "PEER", "RATIO (RANGE)"
    );
    for s in &all {
        let (m, lo, hi) = median_min_max(&s.values);
        if s.peer.is_empty() {
            println!(
                "{:<52} {:>9.0} {:<12} {:>9} {:>20}",
                s.what,
                m,
                "",
                "-",
                format!("[{lo:.0}–{hi:.0}]")
            );
            continue;
        }
        let ratios: Vec<f64> = s.values.iter().zip(&s.peers).map(|(v, p)| v / p).collect();
        let (rm, rlo, rhi) = median_min_max(&ratios);
        let (pm, _, _) = median_min_max(&s.peers);
        println!(
            "{:<52} {:>9.0} {:<12} {:>9.0} {:>20}",
            s.what,
            m,
            s.peer,
            pm,
            format!("{rm:.2} ({rlo:.2}–{rhi:.2})")
        );
    }
    println!(
        "({} dataset in {} chunks; destination {}; ratios are strata ÷ peer, median of {} repeats (range))",
        format_size(a.size),
        format_size(a.chunk),
        dest_root.display(),
        a.repeats
    );
    Ok(())
}
