//! `strata bench md`: an mdtest-like metadata benchmark.
//!
//! N worker processes, each with its own directory `md.<rank>` (created
//! before the measurement; mdtest's `-u`), or all in one shared directory
//! `md.shared` (`--shared-dir`, mdtest's default). Phases, each behind a
//! barrier: **create** (open `O_CREAT|O_RDWR` as mdtest does — an existing
//! file would be opened, so a buffered create must look for one; `--excl`
//! adds `O_EXCL`, the old behaviour of this bench —, write W bytes, close), **stat** (every file of
//! the next process's directory, checking the size), **read** (open, read,
//! close the next process's files, checking the bytes), **remove** (unlink
//! own files). Rates are aggregate ops/s: files / (slowest end − common start).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::ior::{absolute_dir, spinner, strata_env, PhaseStats};
use crate::team::{
    self, cpath, errno, mono_ns, worker_cmds, Team, ViaMode, WorkerEnv, WorkerReport,
};

/// Upper bound of files per process.
const MAX_FILES: u64 = 10_000_000;
pub const PHASES: [&str; 4] = ["create", "stat", "read", "remove"];

/// Like [`crate::kv::parse_size`] but 0 is allowed.
pub fn parse_size0(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    crate::kv::parse_size(s)
}

#[derive(clap::Args, Debug, Clone)]
pub struct MdArgs {
    /// Directory holding the per-process directories (the destination when --via-strata).
    #[arg(long)]
    pub dir: PathBuf,
    /// Run through strata in this mode (adapter preloaded, tracking --dir).
    #[arg(long, value_enum)]
    pub via_strata: Option<ViaMode>,
    /// Processes.
    #[arg(long, short = 'n', default_value_t = 4)]
    pub procs: usize,
    /// Files per process.
    #[arg(long, short = 'F', default_value_t = 1000)]
    pub files: u64,
    /// Bytes written into (and read back from) each file (0 or e.g. 4KiB).
    #[arg(long, short = 'w', default_value = "0", value_parser = parse_size0)]
    pub write_bytes: u64,
    /// Time limit of one phase, seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Create with O_EXCL (mdtest does not: it opens O_CREAT|O_RDWR).
    #[arg(long)]
    pub excl: bool,
    /// All processes in one directory (mdtest's default; else one each, `-u`).
    #[arg(long)]
    pub shared_dir: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct MdWorkerArgs {
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub rank: usize,
    #[arg(long)]
    pub procs: usize,
    #[arg(long)]
    pub files: u64,
    #[arg(long)]
    pub write_bytes: u64,
    #[arg(long)]
    pub excl: bool,
    #[arg(long)]
    pub shared_dir: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct MdSpec {
    pub dir: PathBuf,
    pub procs: usize,
    pub files: u64,
    pub write_bytes: u64,
    pub timeout_s: u64,
    /// Create with O_EXCL.
    pub excl: bool,
    /// One directory for all processes.
    pub shared_dir: bool,
}

impl MdSpec {
    pub fn check(&self) -> Result<()> {
        if self.procs == 0 || self.procs > 1024 {
            bail!("--procs must be 1..=1024");
        }
        if self.files == 0 || self.files > MAX_FILES {
            bail!("--files must be 1..={MAX_FILES}");
        }
        if self.write_bytes > 64 << 20 {
            bail!("--write-bytes must be ≤ 64 MiB");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MdResult {
    /// In the order of [`PHASES`].
    pub phases: Vec<(String, PhaseStats)>,
}

pub fn run_spec(spec: &MdSpec, env: &WorkerEnv, pb: &ProgressBar, tag: &str) -> Result<MdResult> {
    spec.check()?;
    std::fs::create_dir_all(&spec.dir)
        .with_context(|| format!("cannot create {}", spec.dir.display()))?;
    let mut args = [
        "--files",
        &spec.files.to_string(),
        "--write-bytes",
        &spec.write_bytes.to_string(),
    ]
    .map(String::from)
    .to_vec();
    if spec.excl {
        args.push("--excl".into());
    }
    if spec.shared_dir {
        args.push("--shared-dir".into());
    }
    let cmds = worker_cmds("md-worker", &spec.dir, spec.procs, env, &args)?;
    let timeout = Duration::from_secs(spec.timeout_s);
    pb.set_message(format!("{tag}: starting {} workers", spec.procs));
    let mut team = Team::spawn("md", cmds, Duration::from_secs(120))?;
    let mut phases = Vec::new();
    for p in PHASES {
        pb.set_message(format!(
            "{tag}: {p} {} files",
            spec.files * spec.procs as u64
        ));
        let o = team.phase(p, timeout)?;
        phases.push((p.to_string(), PhaseStats::from(&o)));
    }
    team.phase("cleanup", timeout)?;
    drop(team);
    Ok(MdResult { phases })
}

pub fn run(a: MdArgs, socket: &Path) -> Result<()> {
    let dir = absolute_dir(&a.dir)?;
    let spec = MdSpec {
        dir: dir.clone(),
        procs: a.procs,
        files: a.files,
        write_bytes: a.write_bytes,
        timeout_s: a.timeout,
        excl: a.excl,
        shared_dir: a.shared_dir,
    };
    spec.check()?;
    let env = match a.via_strata {
        None => WorkerEnv::Direct {
            socket: Some(socket.to_path_buf()),
        },
        Some(m) => strata_env(socket, m, &dir)?,
    };
    let before = a
        .via_strata
        .map(|_| team::file_counters(socket))
        .transpose()?;
    let pb = spinner();
    let res = run_spec(&spec, &env, &pb, "md");
    pb.finish_and_clear();
    let res = res?;
    if let Some(b) = before {
        team::check_went_through(socket, &b, &dir, spec.files * spec.procs as u64)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(
                &serde_json::json!({"bench": "md", "how": env.describe(), "spec": spec, "result": res})
            )?
        );
        return Ok(());
    }
    println!(
        "md: {} processes x {} files of {} bytes, {}, created O_CREAT|O_RDWR{}, {} on {} ({})",
        spec.procs,
        spec.files,
        spec.write_bytes,
        if spec.shared_dir {
            "one shared directory"
        } else {
            "a directory per process"
        },
        if spec.excl { "|O_EXCL" } else { "" },
        env.describe(),
        dir.display(),
        if team::is_tmpfs(&dir) {
            "tmpfs"
        } else {
            "not tmpfs"
        }
    );
    println!(
        "{:<7} {:>11} {:>9} {:>10} {:>10} {:>10}",
        "PHASE", "OPS/S", "SECONDS", "P50us", "P99us", "MAXus"
    );
    for (n, p) in &res.phases {
        println!(
            "{n:<7} {:>11.0} {:>9.3} {:>10.1} {:>10.1} {:>10.1}",
            p.ops_per_s, p.secs, p.p50_us, p.p99_us, p.max_us
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- worker

fn dir_of(base: &Path, rank: usize, shared: bool) -> PathBuf {
    if shared {
        base.join("md.shared")
    } else {
        base.join(format!("md.{rank}"))
    }
}

/// File `k` of process `rank` (in its own directory, or prefixed by its
/// rank in the shared one).
fn file_of(dir: &Path, rank: usize, k: u64, shared: bool) -> PathBuf {
    if shared {
        dir.join(format!("f.{rank}.{k}"))
    } else {
        dir.join(format!("f.{k}"))
    }
}

fn content(len: u64, rank: usize, k: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (rank as u8).wrapping_add(k as u8))
        .collect()
}

/// `strata bench md-worker`: one process of `bench md`.
pub fn run_worker(a: MdWorkerArgs) -> Result<()> {
    let own_dir = dir_of(&a.dir, a.rank, a.shared_dir);
    let src_rank = (a.rank + 1) % a.procs.max(1);
    let src_dir = dir_of(&a.dir, src_rank, a.shared_dir);
    let create_flags =
        libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC | if a.excl { libc::O_EXCL } else { 0 };
    let setup = || -> Result<(Vec<std::ffi::CString>, Vec<std::ffi::CString>)> {
        if a.procs == 0 || a.rank >= a.procs || a.files == 0 || a.files > MAX_FILES {
            bail!("bad worker arguments {a:?}");
        }
        // A leftover directory of an interrupted run: empty it of this
        // process's files (bounded by a listing).
        if own_dir.exists() {
            let mine = format!("f.{}.", a.rank);
            for e in std::fs::read_dir(&own_dir)?.take(MAX_FILES as usize * 1024) {
                let e = e?;
                if !a.shared_dir || e.file_name().to_string_lossy().starts_with(&mine) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        std::fs::create_dir_all(&own_dir)
            .with_context(|| format!("cannot create {}", own_dir.display()))?;
        let own = (0..a.files)
            .map(|k| cpath(&file_of(&own_dir, a.rank, k, a.shared_dir)))
            .collect::<Result<Vec<_>>>()?;
        let src = (0..a.files)
            .map(|k| cpath(&file_of(&src_dir, src_rank, k, a.shared_dir)))
            .collect::<Result<Vec<_>>>()?;
        Ok((own, src))
    };
    let (own, src) = setup().map_err(team::setup_failed)?;
    let w = a.write_bytes as usize;
    // Contents depend on the file index only modulo 256: precompute them.
    let contents: Vec<Vec<u8>> = (0..256u64.min(a.files))
        .map(|k| content(a.write_bytes, a.rank, k))
        .collect();
    let src_contents: Vec<Vec<u8>> = (0..256u64.min(a.files))
        .map(|k| content(a.write_bytes, src_rank, k))
        .collect();
    let mut rbuf = vec![0u8; w + 1];
    team::serve(|phase| {
        let mut hist = crate::hist::Hist::new();
        let start_ns = mono_ns();
        match phase {
            "create" => {
                for (k, p) in own.iter().enumerate() {
                    let t0 = mono_ns();
                    // SAFETY: plain POSIX calls on NUL-terminated paths and owned buffers.
                    let fd = unsafe { libc::open(p.as_ptr(), create_flags, 0o644) };
                    if fd < 0 {
                        bail!("create {p:?}: {}", errno());
                    }
                    let r = if w > 0 {
                        team::write_all(fd, &contents[k % 256])
                    } else {
                        Ok(())
                    };
                    // SAFETY: fd is open and ours.
                    let rc = unsafe { libc::close(fd) };
                    r.with_context(|| format!("write {p:?}"))?;
                    if rc != 0 {
                        bail!("close {p:?}: {}", errno());
                    }
                    hist.record_ns(mono_ns() - t0);
                }
            }
            "stat" => {
                for p in &src {
                    let t0 = mono_ns();
                    // SAFETY: zeroed stat is a valid out-parameter.
                    let mut st: libc::stat = unsafe { std::mem::zeroed() };
                    // SAFETY: NUL-terminated path, valid out-parameter.
                    if unsafe { libc::stat(p.as_ptr(), &mut st) } != 0 {
                        bail!("stat {p:?}: {}", errno());
                    }
                    hist.record_ns(mono_ns() - t0);
                    if st.st_size as u64 != a.write_bytes
                        || st.st_mode & libc::S_IFMT != libc::S_IFREG
                    {
                        bail!(
                            "stat {p:?}: size {} mode {:o}, expected a regular file of {} bytes",
                            st.st_size,
                            st.st_mode,
                            a.write_bytes
                        );
                    }
                }
            }
            "read" => {
                for (k, p) in src.iter().enumerate() {
                    let t0 = mono_ns();
                    // SAFETY: as above.
                    let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                    if fd < 0 {
                        bail!("open {p:?}: {}", errno());
                    }
                    let r = team::read_full(fd, &mut rbuf);
                    // SAFETY: fd is open and ours.
                    unsafe { libc::close(fd) };
                    let got = r.with_context(|| format!("read {p:?}"))?;
                    hist.record_ns(mono_ns() - t0);
                    if got != w || rbuf[..w] != src_contents[k % 256][..] {
                        bail!("read {p:?}: {got} bytes, expected the {w} bytes written");
                    }
                }
            }
            "remove" => {
                for p in &own {
                    let t0 = mono_ns();
                    // SAFETY: NUL-terminated path.
                    if unsafe { libc::unlink(p.as_ptr()) } != 0 {
                        bail!("unlink {p:?}: {}", errno());
                    }
                    hist.record_ns(mono_ns() - t0);
                }
            }
            "cleanup" => {
                match std::fs::remove_dir(&own_dir) {
                    Ok(()) => {}
                    // the shared directory: the last process to leave removes it
                    Err(e)
                        if a.shared_dir
                            && matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::ENOENT)) => {
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("rmdir {}", own_dir.display()))
                    }
                }
                return Ok(WorkerReport {
                    start_ns,
                    end_ns: mono_ns(),
                    ops: 1,
                    bytes: 0,
                    hist: hist.encode(),
                });
            }
            other => bail!("unknown phase {other:?}"),
        }
        Ok(WorkerReport {
            start_ns,
            end_ns: mono_ns(),
            ops: a.files,
            bytes: 0,
            hist: hist.encode(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_zero() {
        assert_eq!(parse_size0("0").unwrap(), 0);
        assert_eq!(parse_size0("4KiB").unwrap(), 4096);
        assert!(parse_size0("x").is_err());
    }
}
