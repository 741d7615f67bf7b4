//! `strata bench ior`: an IOR-like checkpoint/restart driver.
//!
//! N worker processes, one file per process (`ior.<rank>` in the directory).
//! Write phase: every process writes `block_size` bytes in `transfer_size`
//! writes (optionally `fsync` after each), open and close included. Read
//! phase: process i reads the file of process (i+1) % N (IOR `-C`, so no
//! process reads what it wrote itself), checking a stamp at the start, middle
//! and end of every transfer (`--verify full` compares every byte). Rates are
//! aggregate: total bytes / (slowest process end − common start); latencies are
//! per write (+fsync) / read call.
//!
//! `--dir D` runs directly on D; `--via-strata MODE` runs the same workers with
//! the adapter preloaded, tracking D (the destination). In DEFAULT mode the time
//! to drain what is still dirty after the write phase is measured separately.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::kv::{format_size, parse_size};
use crate::team::{
    self, cpath, errno, mono_ns, worker_cmds, Drain, PhaseOutcome, Team, ViaMode, WorkerEnv,
    WorkerReport,
};
use crate::zipf::Rng;

/// Upper bound of transfers per process (a limit on every loop).
const MAX_TRANSFERS: u64 = 1 << 26;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// No check.
    None,
    /// Stamps at the start, middle and end of every transfer.
    Cheap,
    /// Every byte.
    Full,
}

#[derive(clap::Args, Debug, Clone)]
pub struct IorArgs {
    /// Directory of the files (the destination when --via-strata).
    #[arg(long)]
    pub dir: PathBuf,
    /// Run through strata in this mode (adapter preloaded, tracking --dir).
    #[arg(long, value_enum)]
    pub via_strata: Option<ViaMode>,
    /// Processes (one file each).
    #[arg(long, short = 'n', default_value_t = 4)]
    pub procs: usize,
    /// Bytes per write/read call.
    #[arg(long, short = 't', default_value = "1MiB", value_parser = parse_size)]
    pub transfer_size: u64,
    /// Bytes per process (a multiple of --transfer-size).
    #[arg(long, short = 'b', default_value = "256MiB", value_parser = parse_size)]
    pub block_size: u64,
    /// fsync after each write.
    #[arg(long)]
    pub fsync: bool,
    /// Read-phase check.
    #[arg(long, value_enum, default_value_t = Verify::Cheap)]
    pub verify: Verify,
    /// Keep the files (default: each process removes its file at the end, not timed).
    #[arg(long)]
    pub keep: bool,
    /// Time limit of one phase, seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct IorWorkerArgs {
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub rank: usize,
    #[arg(long)]
    pub procs: usize,
    #[arg(long)]
    pub transfer_size: u64,
    #[arg(long)]
    pub block_size: u64,
    #[arg(long)]
    pub fsync: bool,
    #[arg(long, value_enum)]
    pub verify: Verify,
}

/// What to run (shared by `ior` and `adapters`).
#[derive(Debug, Clone, Serialize)]
pub struct IorSpec {
    pub dir: PathBuf,
    pub procs: usize,
    pub transfer_size: u64,
    pub block_size: u64,
    pub fsync: bool,
    pub verify: Verify,
    pub keep: bool,
    pub timeout_s: u64,
}

impl IorSpec {
    pub fn check(&self) -> Result<()> {
        if self.procs == 0 || self.procs > 1024 {
            bail!("--procs must be 1..=1024");
        }
        if self.transfer_size < 32 {
            bail!("--transfer-size must be ≥ 32 bytes (it carries the verification stamps)");
        }
        if self.transfer_size > 1 << 30 {
            bail!("--transfer-size must be ≤ 1 GiB");
        }
        if self.block_size / self.transfer_size * self.transfer_size != self.block_size {
            bail!(
                "--block-size ({}) must be a multiple of --transfer-size ({})",
                format_size(self.block_size),
                format_size(self.transfer_size)
            );
        }
        if self.block_size / self.transfer_size > MAX_TRANSFERS {
            bail!("more than {MAX_TRANSFERS} transfers per process; raise --transfer-size");
        }
        Ok(())
    }
    pub fn total_bytes(&self) -> u64 {
        self.block_size * self.procs as u64
    }
}

/// Latency and rate of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub secs: f64,
    pub bytes: u64,
    pub ops: u64,
    pub mib_per_s: f64,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl From<&PhaseOutcome> for PhaseStats {
    fn from(p: &PhaseOutcome) -> PhaseStats {
        PhaseStats {
            secs: p.secs(),
            bytes: p.bytes,
            ops: p.ops,
            mib_per_s: p.mib_per_s(),
            ops_per_s: p.ops_per_s(),
            p50_us: p.hist.p50_us(),
            p99_us: p.hist.p99_us(),
            max_us: p.hist.max_us(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct IorResult {
    pub write: PhaseStats,
    pub read: PhaseStats,
    /// DEFAULT mode: drain after the write phase.
    pub drain: Option<Drain>,
}

/// Runs one IOR write + (drain) + read. `drain_socket`: drain through this daemon after the write phase.
pub fn run_spec(
    spec: &IorSpec,
    env: &WorkerEnv,
    drain_socket: Option<&Path>,
    pb: &ProgressBar,
    tag: &str,
) -> Result<IorResult> {
    spec.check()?;
    std::fs::create_dir_all(&spec.dir)
        .with_context(|| format!("cannot create {}", spec.dir.display()))?;
    let verify = match spec.verify {
        Verify::None => "none",
        Verify::Cheap => "cheap",
        Verify::Full => "full",
    };
    let mut args: Vec<String> = [
        "--transfer-size",
        &spec.transfer_size.to_string(),
        "--block-size",
        &spec.block_size.to_string(),
        "--verify",
        verify,
    ]
    .map(String::from)
    .to_vec();
    if spec.fsync {
        args.push("--fsync".into());
    }
    let cmds = worker_cmds("ior-worker", &spec.dir, spec.procs, env, &args)?;
    let timeout = Duration::from_secs(spec.timeout_s);
    pb.set_message(format!("{tag}: starting {} workers", spec.procs));
    let mut team = Team::spawn("ior", cmds, Duration::from_secs(120))?;
    pb.set_message(format!("{tag}: write {}", format_size(spec.total_bytes())));
    let w = team.phase("write", timeout)?;
    let drain = match drain_socket {
        Some(s) => {
            pb.set_message(format!("{tag}: drain"));
            let paths = vec![spec.dir.to_string_lossy().into_owned()];
            Some(team::drain(s, &paths, timeout, |st| {
                pb.set_message(format!(
                    "{tag}: drain, {} dirty in {} files",
                    format_size(st.dirty_bytes.max(1)),
                    st.dirty_files
                ))
            })?)
        }
        None => None,
    };
    pb.set_message(format!("{tag}: read"));
    let r = team.phase("read", timeout)?;
    if !spec.keep {
        pb.set_message(format!("{tag}: cleanup"));
        team.phase("cleanup", timeout)?;
    }
    drop(team);
    Ok(IorResult {
        write: PhaseStats::from(&w),
        read: PhaseStats::from(&r),
        drain,
    })
}

pub fn spinner() -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// The directory as the adapter will see it: absolute, created.
pub fn absolute_dir(d: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    std::fs::canonicalize(d).with_context(|| format!("cannot resolve {}", d.display()))
}

/// The worker environment for `--via-strata` against the daemon at `socket`.
pub fn strata_env(socket: &Path, mode: ViaMode, dir: &Path) -> Result<WorkerEnv> {
    Ok(WorkerEnv::Strata {
        preload: team::find_preload_lib()?,
        socket: socket.to_path_buf(),
        config: team::cli_config_path(),
        mode,
        include: dir.to_path_buf(),
    })
}

pub fn run(a: IorArgs, socket: &Path) -> Result<()> {
    let dir = absolute_dir(&a.dir)?;
    let spec = IorSpec {
        dir: dir.clone(),
        procs: a.procs,
        transfer_size: a.transfer_size,
        block_size: a.block_size,
        fsync: a.fsync,
        verify: a.verify,
        keep: a.keep,
        timeout_s: a.timeout,
    };
    spec.check()?;
    let env = match a.via_strata {
        None => WorkerEnv::Direct {
            socket: Some(socket.to_path_buf()),
        },
        Some(m) => strata_env(socket, m, &dir)?,
    };
    let drain_socket = (a.via_strata == Some(ViaMode::Default)).then_some(socket);
    let before = a
        .via_strata
        .map(|_| team::file_counters(socket))
        .transpose()?;
    let pb = spinner();
    let res = run_spec(&spec, &env, drain_socket, &pb, "ior");
    pb.finish_and_clear();
    let res = res?;
    if let Some(b) = before {
        team::check_went_through(socket, &b, &dir, 1)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(
                &serde_json::json!({"bench": "ior", "how": env.describe(), "spec": spec, "result": res})
            )?
        );
        return Ok(());
    }
    println!(
        "ior: {} processes x {} in {} transfers{}, {} on {} ({})",
        spec.procs,
        format_size(spec.block_size),
        format_size(spec.transfer_size),
        if spec.fsync { " + fsync each" } else { "" },
        env.describe(),
        dir.display(),
        if team::is_tmpfs(&dir) {
            "tmpfs"
        } else {
            "not tmpfs"
        }
    );
    println!(
        "{:<6} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "PHASE", "MiB/s", "SECONDS", "P50us", "P99us", "MAXus"
    );
    for (n, p) in [("write", &res.write), ("read", &res.read)] {
        println!(
            "{n:<6} {:>10.1} {:>9.3} {:>10.1} {:>10.1} {:>10.1}",
            p.mib_per_s, p.secs, p.p50_us, p.p99_us, p.max_us
        );
    }
    if let Some(d) = &res.drain {
        println!(
            "drain after write: {:.3} s ({} dirty at start, {} flushed); write + drain: {:.1} MiB/s",
            d.secs,
            format_size(d.dirty_bytes_at_start.max(1)),
            format_size(d.flushed_bytes.max(1)),
            res.write.bytes as f64 / team::MIB / (res.write.secs + d.secs)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- worker

const MAGIC: u64 = 0x5354_5241_5441_494f; // "STRATAIO"

/// Base pattern of rank `r`'s transfers (the stamps are written over it).
fn base_pattern(rank: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    Rng::new(0x10b_0000 + rank as u64).fill(&mut b);
    b
}

fn stamp_words(rank: usize, off: u64) -> [u64; 4] {
    [
        MAGIC ^ rank as u64,
        off,
        off.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15 ^ rank as u64,
        !off ^ (rank as u64) << 48,
    ]
}

fn stamp_positions(len: usize) -> [usize; 4] {
    [0, 8, (len / 2) & !7, len - 8]
}

fn stamp(buf: &mut [u8], rank: usize, off: u64) {
    let w = stamp_words(rank, off);
    for (p, v) in stamp_positions(buf.len()).iter().zip(w) {
        buf[*p..*p + 8].copy_from_slice(&v.to_le_bytes());
    }
}

fn check_stamp(buf: &[u8], rank: usize, off: u64) -> Result<()> {
    let w = stamp_words(rank, off);
    for (p, v) in stamp_positions(buf.len()).iter().zip(w) {
        let got = u64::from_le_bytes(buf[*p..*p + 8].try_into().expect("8 bytes"));
        if got != v {
            bail!("data mismatch in the file of rank {rank} at offset {} (+{p}): {got:#018x}, expected {v:#018x}", off);
        }
    }
    Ok(())
}

fn file_of(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("ior.{rank}"))
}

/// `strata bench ior-worker`: one process of `bench ior`.
pub fn run_worker(a: IorWorkerArgs) -> Result<()> {
    let t = a.transfer_size as usize;
    let setup = || -> Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        if a.procs == 0
            || a.rank >= a.procs
            || t < 32
            || a.block_size / a.transfer_size * a.transfer_size != a.block_size
        {
            bail!("bad worker arguments {a:?}");
        }
        let own = file_of(&a.dir, a.rank);
        match std::fs::remove_file(&own) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove the old {}", own.display()))
            }
        }
        let wbuf = base_pattern(a.rank, t);
        let src = (a.rank + 1) % a.procs;
        let expect = if a.verify == Verify::Full {
            base_pattern(src, t)
        } else {
            Vec::new()
        };
        Ok((wbuf, vec![0u8; t], expect))
    };
    let (mut wbuf, mut rbuf, mut expect) = setup().map_err(team::setup_failed)?;
    let n = a.block_size / a.transfer_size;
    let own = cpath(&file_of(&a.dir, a.rank))?;
    let src_rank = (a.rank + 1) % a.procs;
    let src = cpath(&file_of(&a.dir, src_rank))?;
    team::serve(|phase| {
        let mut hist = crate::hist::Hist::new();
        match phase {
            "write" => {
                let start_ns = mono_ns();
                // SAFETY: plain POSIX calls on a NUL-terminated path and owned buffers.
                let fd = unsafe {
                    libc::open(
                        own.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC,
                        0o644,
                    )
                };
                if fd < 0 {
                    bail!("open {:?} for writing: {}", own, errno());
                }
                let res = (|| -> Result<()> {
                    for k in 0..n {
                        let off = k * a.transfer_size;
                        stamp(&mut wbuf, a.rank, off);
                        let t0 = mono_ns();
                        team::write_all(fd, &wbuf).with_context(|| format!("write at {off}"))?;
                        // SAFETY: fd is open.
                        if a.fsync && unsafe { libc::fsync(fd) } != 0 {
                            bail!("fsync after the write at {off}: {}", errno());
                        }
                        hist.record_ns(mono_ns() - t0);
                    }
                    Ok(())
                })();
                // SAFETY: fd is open and ours.
                let rc = unsafe { libc::close(fd) };
                res?;
                if rc != 0 {
                    bail!("close after writing: {}", errno());
                }
                Ok(WorkerReport {
                    start_ns,
                    end_ns: mono_ns(),
                    ops: n,
                    bytes: a.block_size,
                    hist: hist.encode(),
                })
            }
            "read" => {
                let start_ns = mono_ns();
                // SAFETY: as above.
                let fd = unsafe { libc::open(src.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    bail!("open {:?} for reading: {}", src, errno());
                }
                let res = (|| -> Result<()> {
                    for k in 0..n {
                        let off = k * a.transfer_size;
                        let t0 = mono_ns();
                        let got = team::read_full(fd, &mut rbuf)
                            .with_context(|| format!("read at {off}"))?;
                        hist.record_ns(mono_ns() - t0);
                        if got != t {
                            bail!("short read at offset {off} of the file of rank {src_rank}: {got} of {t} bytes");
                        }
                        match a.verify {
                            Verify::None => {}
                            Verify::Cheap => check_stamp(&rbuf, src_rank, off)?,
                            Verify::Full => {
                                stamp(&mut expect, src_rank, off);
                                if rbuf != expect {
                                    let i = rbuf
                                        .iter()
                                        .zip(&expect)
                                        .position(|(x, y)| x != y)
                                        .unwrap_or(0);
                                    bail!(
                                        "data mismatch in the file of rank {src_rank} at offset {}",
                                        off + i as u64
                                    );
                                }
                            }
                        }
                    }
                    let mut one = [0u8; 1];
                    if team::read_full(fd, &mut one)? != 0 {
                        bail!(
                            "the file of rank {src_rank} is longer than {} bytes",
                            a.block_size
                        );
                    }
                    Ok(())
                })();
                // SAFETY: fd is open and ours.
                unsafe { libc::close(fd) };
                res?;
                Ok(WorkerReport {
                    start_ns,
                    end_ns: mono_ns(),
                    ops: n,
                    bytes: a.block_size,
                    hist: hist.encode(),
                })
            }
            "cleanup" => {
                let start_ns = mono_ns();
                // SAFETY: NUL-terminated path.
                if unsafe { libc::unlink(own.as_ptr()) } != 0 {
                    bail!("unlink {:?}: {}", own, errno());
                }
                Ok(WorkerReport {
                    start_ns,
                    end_ns: mono_ns(),
                    ops: 1,
                    bytes: 0,
                    hist: hist.encode(),
                })
            }
            other => bail!("unknown phase {other:?}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_check() {
        let mut b = base_pattern(3, 4096);
        stamp(&mut b, 3, 1 << 20);
        check_stamp(&b, 3, 1 << 20).unwrap();
        assert!(check_stamp(&b, 2, 1 << 20).is_err());
        assert!(check_stamp(&b, 3, 0).is_err());
        let mut small = vec![0u8; 32];
        stamp(&mut small, 0, 0);
        check_stamp(&small, 0, 0).unwrap();
    }

    #[test]
    fn spec_rules() {
        let mut s = IorSpec {
            dir: "/x".into(),
            procs: 4,
            transfer_size: 1 << 20,
            block_size: 256 << 20,
            fsync: false,
            verify: Verify::Cheap,
            keep: false,
            timeout_s: 1,
        };
        s.check().unwrap();
        s.block_size = (256 << 20) + 1;
        assert!(s.check().is_err());
        s.block_size = 1 << 20;
        s.transfer_size = 16;
        assert!(s.check().is_err());
    }
}
