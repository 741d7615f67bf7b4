//! `strata drain status|wait|log`: per-file drain state of the files the
//! flusher writes — DEFAULT mode, and WORKFLOW once staged out — (dirty →
//! flushing → persisted, or failed; `stalled` flushes and `verified`
//! persisted files marked), waiting until files are persisted, and the
//! daemon's event log (`<socket>.drain.log`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use strata_proto::control::{ControlReply, ControlRequest, DrainReply, DrainState};

use crate::flush;
use crate::table::{format_size, Table};

/// Poll interval of `wait` and `log --follow`.
const POLL: Duration = Duration::from_millis(100);
/// A wait shorter than this shows no progress bar.
const BAR_AFTER: Duration = Duration::from_millis(500);
/// Exit status of `wait` when `--timeout` expires.
pub const EXIT_TIMEOUT: u8 = 2;
/// Bytes `log --tail` reads from the end of the log at most.
const TAIL_BYTES_MAX: u64 = 4 << 20;

fn absolute_all(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    paths.iter().map(|p| flush::absolute(p)).collect()
}

/// Control `DrainStatus` for `paths` (absolute; empty = all).
pub fn drain_status(socket: &Path, paths: &[PathBuf]) -> Result<DrainReply> {
    let req = ControlRequest::DrainStatus {
        paths: paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
    };
    match strata_client::control_request(socket, &req) {
        Ok(ControlReply::Drain(r)) => Ok(r),
        Ok(ControlReply::Error { code, message }) => bail!("the daemon refused the drain status request ({code}): {message}"),
        Ok(other) => bail!("unexpected reply from the daemon: {other:?} (is it an older version without drain status?)"),
        Err(e) => bail!("no daemon answers at {} ({e})", socket.display()),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The one-line summary under the table.
pub fn summary(r: &DrainReply) -> String {
    let total = r.dirty_files + r.flushing_files + r.failed_files + r.persisted_files;
    let mut s = format!(
        "{total} file{}: {} persisted, {} dirty, {} flushing, {} failed; {} not yet persisted",
        plural(total),
        r.persisted_files,
        r.dirty_files,
        r.flushing_files,
        r.failed_files,
        format_size(r.dirty_bytes)
    );
    if r.truncated {
        s.push_str(&format!(" (table shows the first {} files)", r.files.len()));
    }
    s
}

pub fn table(r: &DrainReply) -> String {
    let mut t = Table::new(&["PATH", "STATE", "SIZE", "DIRTY", "FLUSHED", "ERROR"]);
    for f in &r.files {
        let err = match (&f.error, f.retry_in_ms) {
            (Some(e), Some(ms)) => format!(
                "{e} (attempt {}, retry in {:.1}s)",
                f.failures,
                ms as f64 / 1000.0
            ),
            (Some(e), None) => e.clone(),
            (None, _) => String::new(),
        };
        // `stalled`: in flight for longer than the daemon's `flush.stall_warn` (it logs it too).
        let state = match f.flushing_ms {
            Some(ms) if f.state == DrainState::Flushing && f.stalled => {
                format!("flushing (stalled {} s)", ms / 1000)
            }
            _ if f.state == DrainState::Persisted && f.verified => {
                "persisted (verified)".to_string()
            }
            _ => f.state.as_str().to_string(),
        };
        t.row(vec![
            f.path.clone(),
            state,
            format_size(f.size_bytes),
            format_size(f.dirty_bytes),
            format_size(f.flushed_bytes_total),
            err,
        ]);
    }
    t.render()
}

/// `strata drain status [--json] [PATH…]`.
pub fn status_command(socket: &Path, paths: &[PathBuf], json: bool) -> Result<ExitCode> {
    let r = drain_status(socket, &absolute_all(paths)?)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        if !r.files.is_empty() {
            print!("{}", table(&r));
        }
        println!("{}", summary(&r));
    }
    Ok(ExitCode::SUCCESS)
}

/// Nothing left the flusher can still do: every file not persisted has
/// failed and waits for a retry.
fn only_failures_left(r: &DrainReply) -> bool {
    r.failed_files > 0 && r.dirty_files == 0 && r.flushing_files == 0
}

fn print_failed(r: &DrainReply) {
    for f in r.files.iter().filter(|f| f.state == DrainState::Failed) {
        eprintln!(
            "strata: cannot persist {}: {}",
            f.path,
            f.error.as_deref().unwrap_or("unknown error")
        );
    }
    if r.truncated {
        eprintln!("strata: (more files than one answer holds; see `strata drain status --json`)");
    }
}

/// `strata drain wait [PATH…] [--timeout SECS] [--no-flush]`: asks for a
/// flush of the paths (unless `no_flush`), then polls until every DEFAULT
/// (or staged-out WORKFLOW) file under them is persisted (exit 0), only failed files remain (exit 1,
/// listing them) or the timeout expires (exit `EXIT_TIMEOUT`).
pub fn wait_command(
    socket: &Path,
    paths: &[PathBuf],
    timeout: Option<f64>,
    no_flush: bool,
    quiet: bool,
) -> Result<ExitCode> {
    let paths = absolute_all(paths)?;
    if !no_flush {
        flush::request_flush(socket, &paths)?;
    }
    let start = Instant::now();
    let deadline = match timeout {
        Some(s) if s.is_finite() && s >= 0.0 => Some(start + Duration::from_secs_f64(s.min(1e9))),
        Some(s) => bail!("--timeout {s}: give a number of seconds ≥ 0"),
        None => None,
    };
    let mut r = drain_status(socket, &paths)?;
    let total = r.dirty_bytes.max(1);
    let mut bar: Option<indicatif::ProgressBar> = None;
    let code = loop {
        if r.pending_files() == 0 {
            break ExitCode::SUCCESS;
        }
        if only_failures_left(&r) {
            print_failed(&r);
            eprintln!(
                "strata: {} file{} could not be persisted",
                r.failed_files,
                plural(r.failed_files)
            );
            break ExitCode::from(1);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            print_failed(&r);
            eprintln!("strata: timed out: {}", summary(&r));
            break ExitCode::from(EXIT_TIMEOUT);
        }
        if !quiet && bar.is_none() && start.elapsed() >= BAR_AFTER {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let style = indicatif::ProgressStyle::with_template(
                "strata: draining {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {msg})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            b.set_style(style);
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_length(total.max(r.dirty_bytes));
            b.set_position(total.max(r.dirty_bytes).saturating_sub(r.dirty_bytes));
            let left = r.pending_files();
            b.set_message(format!(
                "{left} file{} left, {} failed",
                plural(left),
                r.failed_files
            ));
        }
        std::thread::sleep(POLL);
        r = drain_status(socket, &paths)?;
    };
    if let Some(b) = bar {
        b.set_position(b.length().unwrap_or(0).saturating_sub(r.dirty_bytes));
        b.finish_and_clear();
    }
    Ok(code)
}

/// The last `lines` lines of the file `path` (reads at most `TAIL_BYTES_MAX`).
fn tail(path: &Path, lines: usize) -> Result<(String, u64)> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len();
    let from = len.saturating_sub(TAIL_BYTES_MAX);
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(len - from).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(lines)..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    Ok((out, len))
}

/// `strata drain log [--tail N] [--follow]`: prints the event log's path, or
/// its last lines, or follows it (until interrupted).
pub fn log_command(socket: &Path, tail_lines: Option<usize>, follow: bool) -> Result<ExitCode> {
    let path = strata_daemon::drain::event_log_path(socket);
    if tail_lines.is_none() && !follow {
        println!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let (text, mut pos) = tail(&path, tail_lines.unwrap_or(10))?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    // Runs until interrupted; a truncated log (size cap) is read from its start.
    loop {
        std::thread::sleep(POLL);
        let Ok(mut f) = std::fs::File::open(&path) else {
            continue;
        };
        let len = f.metadata()?.len();
        if len < pos {
            pos = 0;
        }
        if len == pos {
            continue;
        }
        f.seek(SeekFrom::Start(pos))?;
        let mut buf = Vec::new();
        f.take(len - pos).read_to_end(&mut buf)?;
        pos = len;
        out.write_all(&buf)?;
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_proto::control::DrainFile;

    fn file(path: &str, state: DrainState) -> DrainFile {
        DrainFile {
            path: path.into(),
            state,
            size_bytes: 10,
            dirty_bytes: 4,
            flushed_bytes_total: 6,
            error: None,
            retry_in_ms: None,
            failures: 0,
            flushing_ms: None,
            stalled: false,
            verified: false,
        }
    }

    #[test]
    fn failures_left_and_summary() {
        let mut r = DrainReply {
            failed_files: 1,
            ..Default::default()
        };
        assert!(only_failures_left(&r));
        r.dirty_files = 1;
        assert!(!only_failures_left(&r));
        r.dirty_files = 0;
        r.flushing_files = 1;
        assert!(!only_failures_left(&r));
        assert!(!only_failures_left(&DrainReply::default()));
        let mut r = DrainReply {
            persisted_files: 1,
            failed_files: 1,
            dirty_bytes: 4,
            ..Default::default()
        };
        let mut f = file("/a/b", DrainState::Failed);
        f.error = Some("open /a/b: No such file".into());
        f.retry_in_ms = Some(1500);
        f.failures = 2;
        r.files = vec![file("/a/a", DrainState::Persisted), f];
        let t = table(&r);
        assert!(t.starts_with("PATH"), "{t}");
        assert!(
            t.contains("failed") && t.contains("attempt 2, retry in 1.5s"),
            "{t}"
        );
        assert_eq!(
            summary(&r),
            "2 files: 1 persisted, 0 dirty, 0 flushing, 1 failed; 4B not yet persisted"
        );
    }

    #[test]
    fn a_long_flush_shows_as_stalled() {
        let mut f = file("/a/h", DrainState::Flushing);
        f.flushing_ms = Some(42_500);
        f.stalled = true;
        let mut g = file("/a/g", DrainState::Flushing);
        g.flushing_ms = Some(300);
        let t = table(&DrainReply {
            files: vec![f, g],
            flushing_files: 2,
            ..Default::default()
        });
        assert!(t.contains("flushing (stalled 42 s)"), "{t}");
        assert_eq!(t.matches("stalled").count(), 1, "{t}");
        let mut v = file("/a/v", DrainState::Persisted);
        v.verified = true;
        let t = table(&DrainReply {
            files: vec![v, file("/a/w", DrainState::Persisted)],
            persisted_files: 2,
            ..Default::default()
        });
        assert_eq!(t.matches("persisted (verified)").count(), 1, "{t}");
    }

    #[test]
    fn tail_reads_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "1\n2\n3\n").unwrap();
        assert_eq!(tail(&p, 2).unwrap(), ("2\n3\n".to_string(), 6));
        assert_eq!(tail(&p, 10).unwrap().0, "1\n2\n3\n");
    }
}
