//! `strata bench checkpoint`: seed 000's checkpoint and restart across
//! nodes (issue 15's benchmark), against the same workload on each node's
//! tmpfs, on the destination and against the network's raw bandwidth, all
//! in the same run.
//!
//! For each node count it builds a bed (`crate::bed`: network namespaces,
//! else 127.x addresses) with files at their owner, starts the cluster and
//! runs, `--repeats` times, for each layout (N-N: a file per rank; N-1: one
//! shared file, IOR's segmented layout) the IOR-like
//! `tests/adapter/mpi_ckpt.c` (built here with `mpicc`) under `mpirun`
//! across the nodes (`Bed::mpirun`, `--per-node` ranks each):
//!
//! - **tmpfs**: plain, on a directory in /dev/shm (every node's tmpfs is
//!   this machine's), fsync + close, then a read one node further;
//! - **destination**: plain, on the shared destination, the same (its
//!   write is the destination's raw bandwidth the drain is measured by);
//! - **SCRATCH**: through the adapter (LD_PRELOAD, each rank's node's
//!   config), write and shifted read;
//! - **DEFAULT**: through the adapter, write without fsync and shifted
//!   read, then `strata flush --wait` on node 0 drains every node (the
//!   nodes' background flushing is off, so the drain is all of it); and
//!   the write again with fsync (durable in a journal with `--disk`, else
//!   at the destination), against the destination's write + fsync.
//!
//! and iperf3 streams node i → i+1, all at once (the network's raw
//! bandwidth). Targets (issue 15): SCRATCH write and read ≥ 0.8× the slower
//! of tmpfs and the network; drain ≥ 0.9× the destination's write.
//! Figures are MiB/s of the whole job (bytes ÷ the slowest rank's phase),
//! medians over the repeats with their range.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::bed::{Bed, BedSpec};
use crate::cluster::Row;
use crate::kv::{format_size, parse_size};
use crate::team::median_min_max;

/// The IOR-like program, compiled at run time with `mpicc`.
const MPI_CKPT_C: &str = include_str!("../../../tests/adapter/mpi_ckpt.c");

#[derive(clap::Args, Debug, Clone)]
pub struct CheckpointArgs {
    /// Node counts, each on a fresh bed.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub nodes: Vec<usize>,
    /// MPI ranks per node.
    #[arg(long, default_value_t = 2)]
    pub per_node: usize,
    /// Bytes per rank and segment (IOR's block).
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    pub block: u64,
    /// Bytes per write and read call (IOR's transfer size).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub xfer: u64,
    /// Segments per rank (IOR's -s).
    #[arg(long, default_value_t = 1)]
    pub segments: u64,
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// RAM tier of each node.
    #[arg(long, default_value = "2GiB")]
    pub ram: String,
    /// A dir tier of this size on each node (in the bed's directory), so
    /// each node keeps a journal and an fsync may be durable there.
    #[arg(long)]
    pub disk: Option<String>,
    /// The file system to drain to (a parallel file system's mount, e.g.
    /// slow-pfs): each bed uses a fresh directory inside it. Default: the
    /// bed's own directory.
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// The I/O interface: `posix` (pwrite/pread), `mpiio` (MPI_File_write_at/
    /// read_at, MPI_File_sync; through strata by libstrata_mpiio) or `coll`
    /// (MPI_File_write_at_all/read_at_all).
    #[arg(long, default_value = "posix", value_parser = ["posix", "mpiio", "coll"])]
    pub api: String,
    /// 127.x addresses even where namespaces could be made.
    #[arg(long)]
    pub loopback: bool,
    /// `cluster.pages_where_written` on every node: files' whole pages stay
    /// on the node that wrote them (the default since 2026-11-28; the flag
    /// stays for the commands recorded before).
    #[arg(long, conflicts_with = "pages_at_owner")]
    pub pages_where_written: bool,
    /// `cluster.pages_where_written: false`: every page lives at its file's
    /// owner (the model before 2026-11-28), for comparison.
    #[arg(long)]
    pub pages_at_owner: bool,
    /// Read the SCRATCH restart this many times (a restart read again, as by
    /// the epochs of an analysis); > 1 adds a row for the last pass, which
    /// a node reads from its replicas of the pages it read before
    /// (`cluster.read_replicas`); 1..=16.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub reads: u32,
    /// `cluster.read_replicas: false` on every node (for comparison).
    #[arg(long)]
    pub no_replicas: bool,
    /// `cluster.remote_read_ahead: true` on every node (off by default).
    #[arg(long)]
    pub read_ahead: bool,
    #[arg(long)]
    pub json: bool,
}

/// The phases of one run of a timing program (mpi_ckpt, h5bench, h5py_bench)
/// from its `ok … write_s=W read_s=R` line: (write MiB/s, read MiB/s).
pub(crate) fn parse_report(out: &str, bytes: u64) -> Result<(f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with("ok "))
        .with_context(|| format!("the program printed no report: {out}"))?;
    let field = |k: &str| -> Result<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .with_context(|| format!("no {k} in {line}"))?
            .parse::<f64>()
            .with_context(|| format!("bad {k} in {line}"))
    };
    let mib = bytes as f64 / (1 << 20) as f64;
    Ok((
        mib / field("write_s=")?.max(1e-9),
        mib / field("read_s=")?.max(1e-9),
    ))
}

/// The last read pass's MiB/s of an mpi_ckpt report (`last_read_s=`).
fn parse_last_read(out: &str, bytes: u64) -> Result<f64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("ok "))
        .with_context(|| format!("the program printed no report: {out}"))?;
    let s: f64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("last_read_s="))
        .with_context(|| format!("no last_read_s= in {line}"))?
        .parse()
        .with_context(|| format!("bad last_read_s= in {line}"))?;
    Ok(bytes as f64 / (1 << 20) as f64 / s.max(1e-9))
}

struct Job<'a> {
    a: &'a CheckpointArgs,
    bed: &'a Bed,
    exe: &'a Path,
    lib: &'a Path,
    /// libstrata_mpiio (Open MPI's build) for the MPI-IO interfaces
    mpiio: Option<&'a Path>,
    bytes: u64,
}

impl Job<'_> {
    /// mpi_ckpt `layout` on `file` across the bed; `mode` = through the
    /// adapter in that mode, else plain.
    fn run(
        &self,
        layout: &str,
        file: &Path,
        mode: Option<&str>,
        fsync: bool,
    ) -> Result<(f64, f64)> {
        self.run_reads(layout, file, mode, fsync, 1)
            .map(|(w, r, _)| (w, r))
    }

    /// [`Job::run`] reading `reads` times: (write, first read, last read) MiB/s.
    fn run_reads(
        &self,
        layout: &str,
        file: &Path,
        mode: Option<&str>,
        fsync: bool,
        reads: u32,
    ) -> Result<(f64, f64, f64)> {
        let mut c = self.bed.mpirun(self.a.per_node)?;
        if let Some(m) = mode {
            let preload = match self.mpiio {
                Some(io) => format!("{}:{}", self.lib.display(), io.display()),
                None => self.lib.display().to_string(),
            };
            c.arg("env")
                .arg(format!("LD_PRELOAD={preload}"))
                .arg(format!("STRATA_MODE={m}"));
        }
        c.arg(self.exe)
            .arg(layout)
            .arg(file)
            .arg(self.a.block.to_string())
            .arg(self.a.xfer.to_string())
            .arg(self.a.segments.to_string());
        if !fsync {
            c.arg("nofsync");
        }
        if self.a.api != "posix" {
            c.arg(&self.a.api);
        }
        if reads > 1 {
            c.arg(format!("reads={reads}"));
        }
        let o = c.output().context("cannot run mpirun")?;
        let out = String::from_utf8_lossy(&o.stdout);
        if !o.status.success() {
            bail!(
                "mpi_ckpt {layout} {} ({}) failed: {out}{}",
                file.display(),
                mode.unwrap_or("plain"),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let (w, r) = parse_report(&out, self.bytes)?;
        Ok((w, r, parse_last_read(&out, self.bytes)?))
    }

    /// `strata ARGS` with node 0's config, inside node 0.
    fn strata_on_0(&self, args: &[&str]) -> Result<()> {
        let o = self
            .bed
            .in_node(0, &self.bed.strata)
            .arg("--config")
            .arg(&self.bed.nodes[0].config)
            .args(args)
            .output()?;
        if !o.status.success() {
            bail!(
                "strata {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(())
    }

    /// Removes `dir` through the adapter in `mode` (the buffer's records
    /// and the destination's files), then what is left of it.
    fn remove(&self, dir: &Path, mode: &str) -> Result<()> {
        // A read-ahead still running after the program ended holds a
        // destination file open; NFS and sshfs then keep an unlinked file
        // as `.nfs*` / `.fuse_hidden*` until it closes, and `rmdir` fails:
        // try again a few times (bounded) once those are gone.
        for _ in 0..10 {
            match self.remove_once(dir, mode) {
                // (or already gone when listed: closed meanwhile)
                Err(e)
                    if e.to_string().contains("left at the destination: [\".")
                        || e.to_string().contains("left at the destination: []") =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                r => return r,
            }
        }
        self.remove_once(dir, mode)
    }

    fn remove_once(&self, dir: &Path, mode: &str) -> Result<()> {
        let o = self
            .bed
            .in_node(0, Path::new("/usr/bin/env"))
            .arg(format!("LD_PRELOAD={}", self.lib.display()))
            .arg(format!("STRATA_MODE={mode}"))
            .arg(format!(
                "STRATA_CONFIG={}",
                self.bed.nodes[0].config.display()
            ))
            .args(["rm", "-rf"])
            .arg(dir)
            .output()?;
        if !o.status.success() {
            let left: Vec<String> = std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            bail!(
                "rm -rf {}: {} (left at the destination: {left:?}; open in: {:?})",
                dir.display(),
                String::from_utf8_lossy(&o.stderr),
                holders_of(dir)
            );
        }
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }
}

pub fn run(a: CheckpointArgs) -> Result<()> {
    if a.repeats == 0 || a.per_node == 0 || a.block == 0 || a.xfer == 0 || a.segments == 0 {
        bail!("--repeats, --per-node, --block, --xfer and --segments must be positive");
    }
    let strata = crate::strata_exe()?;
    let lib = strata.with_file_name("libstrata_posix.so");
    if !lib.is_file() {
        bail!(
            "{} is not built: run `cargo build --release -p strata-posix`",
            lib.display()
        );
    }
    let work = tempfile::Builder::new().prefix("strata-ckpt-").tempdir()?;
    let src = work.path().join("mpi_ckpt.c");
    std::fs::write(&src, MPI_CKPT_C)?;
    let exe = work.path().join("mpi_ckpt");
    // Open MPI's compiler (mpirun across the bed is Open MPI's)
    let mpicc = if strata_mpiio::which(Path::new("mpicc.openmpi")).is_some() {
        "mpicc.openmpi"
    } else {
        "mpicc"
    };
    let cc = Command::new(mpicc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .context("cannot run mpicc: install libopenmpi-dev (and openmpi-bin)")?;
    if !cc.status.success() {
        bail!("mpicc mpi_ckpt.c: {}", String::from_utf8_lossy(&cc.stderr));
    }
    let mpiio = if a.api == "posix" {
        None
    } else {
        Some(
            strata_mpiio::install(strata_mpiio::Mpi::OpenMpi, work.path())
                .map_err(anyhow::Error::msg)?,
        )
    };
    let mut rows = Vec::new();
    for &n in &a.nodes {
        let bed = Bed::new(&BedSpec {
            nodes: n,
            ram: a.ram.clone(),
            disk: a.disk.clone(),
            start_timeout: "60s".into(),
            remote_tier: None,
            toward_readers: false,
            files_at_owner: true,
            pages_where_written: !a.pages_at_owner,
            strata: strata.clone(),
            loopback: a.loopback,
            log: "warn".into(),
            dest_in: a.dest.clone(),
            tls: false,
        })?;
        // Background flushing off: the timed `flush --wait` is the whole drain.
        for node in &bed.nodes {
            let mut y = std::fs::read_to_string(&node.config)?;
            if a.no_replicas {
                y = y.replacen(
                    "  pages_where_written:",
                    "  read_replicas: false\n  pages_where_written:",
                    1,
                );
            }
            if a.read_ahead {
                y = y.replacen(
                    "  pages_where_written:",
                    "  remote_read_ahead: true\n  pages_where_written:",
                    1,
                );
            }
            std::fs::write(&node.config, format!("{y}flush:\n  enabled: false\n"))?;
        }
        let o = bed.cli(&["cluster", "start", "--launcher", bed.launcher()])?;
        if !o.status.success() {
            bail!(
                "cluster start on {n} nodes failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let res = measure(&a, &bed, &exe, &lib, mpiio.as_deref(), n, &mut rows);
        if res.is_err() {
            eprintln!("{}", daemon_warnings(&bed));
        }
        let _ = bed.cli(&["cluster", "stop"]);
        res?;
    }
    report(&a, &rows)
}

/// The warnings and errors in the bed's daemon and drain logs (the last
/// few per file), for a failed run: the bed's directory goes with it.
fn daemon_warnings(bed: &Bed) -> String {
    let mut out = String::new();
    for node in &bed.nodes {
        let rt = bed.dir.path().join(&node.name).join("rt");
        for name in ["daemon.log", "daemon.sock.drain.log"] {
            let text = std::fs::read_to_string(rt.join(name)).unwrap_or_default();
            let bad: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("FAIL"))
                .collect();
            if bad.is_empty() {
                continue;
            }
            out.push_str(&format!("--- {} {name}\n", node.name));
            for l in &bad[bad.len().saturating_sub(8)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

fn measure(
    a: &CheckpointArgs,
    bed: &Bed,
    exe: &Path,
    lib: &Path,
    mpiio: Option<&Path>,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let bytes = a.block * a.segments * (a.per_node * n) as u64;
    let job = Job {
        a,
        bed,
        exe,
        lib,
        mpiio,
        bytes,
    };
    let shm = tempfile::Builder::new()
        .prefix("strata-ckpt-")
        .tempdir_in("/dev/shm")
        .context("cannot make a directory in /dev/shm")?;
    let row = |what: String, peer: &str| Row {
        nodes: n,
        bed: bed.kind.to_string(),
        what,
        unit: "MiB/s".into(),
        strata: Vec::new(),
        peer: peer.into(),
        peer_values: Vec::new(),
        ratios: Vec::new(),
        lower_is_better: false,
    };
    let ceiling = if n > 1 {
        "min(tmpfs, network)"
    } else {
        "tmpfs"
    };
    for layout in ["nn", "n1"] {
        let l = match (layout, a.api.as_str()) {
            ("nn", "posix") => "N-N",
            ("n1", "posix") => "N-1",
            ("nn", "mpiio") => "N-N MPI-IO",
            ("n1", "mpiio") => "N-1 MPI-IO",
            ("nn", _) => "N-N MPI-IO coll",
            _ => "N-1 MPI-IO coll",
        };
        let mut sw = row(format!("{l} SCRATCH write"), ceiling);
        let mut sr = row(format!("{l} SCRATCH read, shifted"), ceiling);
        let mut srn = row(
            format!("{l} SCRATCH read, shifted, pass {}", a.reads),
            ceiling,
        );
        let mut dw = row(format!("{l} DEFAULT write, no fsync"), ceiling);
        let mut dr = row(format!("{l} DEFAULT read, shifted"), ceiling);
        let mut dfs = row(
            format!("{l} DEFAULT write+fsync"),
            "destination write+fsync",
        );
        let mut dvd = row(
            format!("{l} DEFAULT write vs destination"),
            "destination write",
        );
        let mut drain = row(format!("{l} drain (flush --wait)"), "destination write");
        let mut tw = row(format!("{l} tmpfs write (peer)"), "");
        let mut dest_w = row(format!("{l} destination write+fsync (peer)"), "");
        let mut dest_r = row(format!("{l} destination read, shifted (peer)"), "");
        let mut net = row("network, streams i→i+1 (peer)".into(), "");
        for r in 0..a.repeats {
            eprintln!(
                "bench checkpoint: {n} node(s) × {}, {l}, repeat {}/{}",
                a.per_node,
                r + 1,
                a.repeats
            );
            let (t_w, t_r) = job.run(layout, &shm.path().join(format!("ck{r}")), None, true)?;
            for e in std::fs::read_dir(shm.path())? {
                let _ = std::fs::remove_file(e?.path());
            }
            let plain = bed.dest.join(format!("plain-{layout}-{r}"));
            std::fs::create_dir_all(&plain)?;
            let (p_w, p_r) = job.run(layout, &plain.join("ck"), None, true)?;
            std::fs::remove_dir_all(&plain)?;
            let scratch = bed.dest.join(format!("scratch-{layout}-{r}"));
            std::fs::create_dir_all(&scratch)?;
            let (s_w, s_r, s_rn) =
                job.run_reads(layout, &scratch.join("ck"), Some("scratch"), true, a.reads)?;
            job.remove(&scratch, "scratch")?;
            let default = bed.dest.join(format!("default-{layout}-{r}"));
            std::fs::create_dir_all(&default)?;
            let (d_w, d_r) = job.run(layout, &default.join("ck"), Some("default"), false)?;
            let t0 = Instant::now();
            job.strata_on_0(&["flush", "--wait", &default.display().to_string()])?;
            let d_s = t0.elapsed().as_secs_f64();
            let drained = bytes as f64 / (1 << 20) as f64 / d_s.max(1e-9);
            job.remove(&default, "default")?;
            // fsync'ed: durable in the journal of a node with a dir tier,
            // else at the destination
            let synced = bed.dest.join(format!("fsync-{layout}-{r}"));
            std::fs::create_dir_all(&synced)?;
            let (f_w, _) = job.run(layout, &synced.join("ck"), Some("default"), true)?;
            job.remove(&synced, "default")?;
            let pairs: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
            let net_mib = if n > 1 {
                crate::cluster::streams(bed, &pairs, 2.0, 7900 + 40 * r as u16)?.0
            } else {
                f64::INFINITY
            };
            let cap_w = t_w.min(net_mib);
            let cap_r = t_r.min(net_mib);
            for (row, v, peer) in [
                (&mut sw, s_w, cap_w),
                (&mut sr, s_r, cap_r),
                (&mut srn, s_rn, cap_r),
                (&mut dw, d_w, cap_w),
                (&mut dr, d_r, cap_r),
                (&mut dfs, f_w, p_w),
                (&mut dvd, d_w, p_w),
                (&mut drain, drained, p_w),
                (&mut tw, t_w, f64::NAN),
                (&mut dest_w, p_w, f64::NAN),
                (&mut dest_r, p_r, f64::NAN),
                (&mut net, net_mib, f64::NAN),
            ] {
                row.strata.push(v);
                row.peer_values.push(peer);
                row.ratios.push(v / peer);
            }
        }
        rows.extend([sw, sr]);
        if a.reads > 1 {
            rows.push(srn);
        }
        rows.extend([dw, dr, dfs, dvd, drain, tw, dest_w, dest_r]);
        if n > 1 && layout == "n1" {
            rows.push(net);
        }
    }
    Ok(())
}

fn report(a: &CheckpointArgs, rows: &[Row]) -> Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    println!(
        "{:>5} {:<8} {:<40} {:>9} {:<20} {:>9} {:>18}",
        "NODES", "BED", "WHAT", "MiB/s", "PEER", "PEER", "RATIO (RANGE)"
    );
    for r in rows {
        let (m, lo, hi) = median_min_max(&r.strata);
        let (p, _, _) = median_min_max(&r.peer_values);
        let ratio = r
            .ratio_text()
            .unwrap_or_else(|| format!("[{lo:.0}–{hi:.0}]"));
        println!(
            "{:>5} {:<8} {:<40} {:>9.0} {:<20} {:>9} {:>18}",
            r.nodes,
            r.bed,
            r.what,
            m,
            r.peer,
            if p.is_finite() {
                format!("{p:.0}")
            } else {
                "-".into()
            },
            ratio
        );
    }
    println!(
        "({} ranks per node, {} per rank in {} transfers; ratios are strata ÷ peer, median of {} \
         repeats (range); rows without a peer show their own range)",
        a.per_node,
        format_size(a.block * a.segments),
        format_size(a.xfer),
        a.repeats
    );
    Ok(())
}

/// The processes (`pid comm`) with a file under `dir` open: who keeps a
/// silly-renamed file alive.
fn holders_of(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    // Bounded by the processes of the machine.
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let n = fds
            .flatten()
            .filter(|f| std::fs::read_link(f.path()).is_ok_and(|t| t.starts_with(dir)))
            .count();
        if n > 0 {
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push(format!("{pid} {} ({n} files)", comm.trim()));
        }
    }
    out
}
