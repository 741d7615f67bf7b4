//! `strata stage-in` and `strata stage-out`: move whole files and
//! directory trees into the buffer before a job reads them, and write
//! WORKFLOW-mode results to their destination after it (waiting until they
//! are persisted, optionally dropping them from the buffer). Both take paths
//! and/or a manifest (one path per line, `#` comments) and show a progress
//! bar of bytes on stderr. The work is done by `strata_client::stage`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use strata_client::file::Persist;
use strata_client::stage::{self, StageOptions, StageOutOptions, StageProgress, StageReport};
use strata_config::Config;

use crate::table::format_size;

/// Exit status of `stage-out --timeout` when it expires.
pub const EXIT_TIMEOUT: u8 = 2;

/// Persist mode of files stage-in creates records for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StageMode {
    /// Kept in the buffer; written to the destination only by stage-out (if modified).
    Workflow,
    /// Flushed to the destination in the background when modified.
    Default,
    /// Never written back.
    Scratch,
}

impl StageMode {
    fn persist(self) -> Persist {
        match self {
            StageMode::Workflow => Persist::Workflow,
            StageMode::Default => Persist::Default,
            StageMode::Scratch => Persist::Scratch,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct StageInArgs {
    /// Files or directories (recursively) to read into the buffer.
    pub paths: Vec<PathBuf>,
    /// Also stage the paths listed in FILE (one per line, `#` comments).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Persist mode of the staged files.
    #[arg(long, value_enum, default_value = "workflow")]
    pub mode: StageMode,
    /// Files read in parallel.
    #[arg(long, short, default_value_t = stage::JOBS_DEFAULT)]
    pub jobs: usize,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, clap::Args)]
pub struct StageOutArgs {
    /// Files or directories whose buffered WORKFLOW (and DEFAULT) files to
    /// write to their destination.
    pub paths: Vec<PathBuf>,
    /// Also stage out the paths listed in FILE (one per line, `#` comments).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Once persisted, drop their pages from the buffer (reads then go to the destination).
    #[arg(long)]
    pub evict: bool,
    /// Return after marking them; do not wait (with --evict: only pages
    /// already persisted are dropped).
    #[arg(long)]
    pub no_wait: bool,
    /// Give up waiting after SECS seconds (exit 2).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

fn all_paths(paths: &[PathBuf], manifest: Option<&PathBuf>) -> Result<Vec<PathBuf>> {
    let mut out = paths.to_vec();
    if let Some(m) = manifest {
        out.extend(stage::read_manifest(m).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    if out.is_empty() {
        bail!("give at least one PATH or a --manifest that lists some");
    }
    Ok(out)
}

/// A byte progress bar on stderr (hidden when `quiet` or not a terminal).
fn bar(quiet: bool, what: &'static str) -> Option<indicatif::ProgressBar> {
    if quiet {
        return None;
    }
    let b =
        indicatif::ProgressBar::with_draw_target(Some(0), indicatif::ProgressDrawTarget::stderr());
    let style = indicatif::ProgressStyle::with_template(&format!(
        "strata: {what} {{bar:30}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, {{msg}})"
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    b.set_style(style);
    Some(b)
}

fn progress_fn(b: &Option<indicatif::ProgressBar>) -> Option<stage::ProgressFn> {
    let b = b.clone()?;
    Some(Arc::new(move |p: &StageProgress| {
        b.set_length(p.bytes_total);
        b.set_position(p.bytes_done);
        let failed = if p.files_failed > 0 {
            format!(", {} failed", p.files_failed)
        } else {
            String::new()
        };
        b.set_message(format!("{}/{} files{failed}", p.files_done, p.files_total));
    }))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn print_errors(what: &str, r: &StageReport) {
    for e in &r.errors {
        if e.message.contains(&e.path) {
            eprintln!("strata: {what}: {}", e.message);
        } else {
            eprintln!("strata: {what}: {e}");
        }
    }
}

/// `strata stage-in PATH… [--manifest F] [--mode M] [--jobs N]`.
pub fn stage_in_command(cfg: &Config, args: &StageInArgs) -> Result<ExitCode> {
    let paths = all_paths(&args.paths, args.manifest.as_ref())?;
    if args.jobs == 0 || args.jobs > stage::JOBS_MAX {
        bail!("--jobs {}: give 1..={}", args.jobs, stage::JOBS_MAX);
    }
    let socket = cfg.resolved_socket_path();
    let client = strata_client::Client::connect_to(&socket).map_err(|e| anyhow::anyhow!("{e}"))?;
    let b = bar(args.quiet, "staging in");
    let opts = StageOptions {
        persist: args.mode.persist(),
        jobs: args.jobs,
        page_bytes: cfg.adapter.page_size_bytes,
        progress: progress_fn(&b),
    };
    let r = client
        .stage_in(&paths, &opts)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(b) = b {
        b.finish_and_clear();
    }
    print_errors("stage-in", &r);
    println!(
        "staged in {} file{}, {} in {:.2} s ({:.1} MiB/s); {} buffered under the paths{}",
        r.files,
        plural(r.files),
        format_size(r.bytes),
        r.elapsed.as_secs_f64(),
        r.mib_s(),
        format_size(r.buffered_bytes),
        if r.errors.is_empty() {
            String::new()
        } else {
            format!("; {} failed", r.errors.len())
        }
    );
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `strata stage-out PATH… [--manifest F] [--evict] [--no-wait] [--timeout S]`.
pub fn stage_out_command(cfg: &Config, args: &StageOutArgs) -> Result<ExitCode> {
    let paths = all_paths(&args.paths, args.manifest.as_ref())?;
    let timeout = match args.timeout {
        Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s.min(1e9))),
        Some(s) => bail!("--timeout {s}: give a number of seconds ≥ 0"),
        None => None,
    };
    let socket = cfg.resolved_socket_path();
    let b = if args.no_wait {
        None
    } else {
        bar(args.quiet, "staging out")
    };
    let opts = StageOutOptions {
        evict: args.evict,
        wait: !args.no_wait,
        timeout,
        progress: progress_fn(&b),
    };
    let r = stage::stage_out_at(&socket, &paths, &opts)
        .map_err(|e| anyhow::anyhow!("{e} (daemon socket {})", socket.display()))?;
    if let Some(b) = b {
        b.finish_and_clear();
    }
    print_errors("stage-out", &r);
    let mut line = if args.no_wait {
        format!(
            "stage-out requested; {} file{} already persisted",
            r.files,
            plural(r.files)
        )
    } else {
        format!(
            "staged out {} file{}, {} written in {:.2} s ({:.1} MiB/s)",
            r.files,
            plural(r.files),
            format_size(r.bytes),
            r.elapsed.as_secs_f64(),
            r.mib_s()
        )
    };
    if args.evict {
        line.push_str(&format!(
            "; {} evicted, {} still buffered",
            format_size(r.evicted_bytes),
            format_size(r.buffered_bytes)
        ));
    }
    if r.scratch_files > 0 {
        line.push_str(&format!(
            "; {} SCRATCH file{} skipped",
            r.scratch_files,
            plural(r.scratch_files)
        ));
    }
    if !r.errors.is_empty() {
        line.push_str(&format!("; {} failed", r.errors.len()));
    }
    println!("{line}");
    Ok(if r.timed_out {
        ExitCode::from(EXIT_TIMEOUT)
    } else if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
