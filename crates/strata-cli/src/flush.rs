//! `strata flush [--wait] [PATH…]` and the drain used by `strata run`: ask the
//! daemon to flush the DEFAULT-mode files under some paths now, then poll
//! their flush state until nothing is dirty (or only failed files remain).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use strata_proto::control::{ControlReply, ControlRequest, FlushReply};

/// Poll interval of `--wait`.
const POLL: Duration = Duration::from_millis(100);
/// A drain shorter than this shows no progress bar.
const BAR_AFTER: Duration = Duration::from_millis(500);

/// `path` made absolute (against the current directory) and lexically
/// normalised: no `.`, no `..`, no trailing or doubled `/`. Symbolic links
/// are not resolved — the file model names files the same way.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    Ok(strata_client::stage::absolute(path)?)
}

fn path_strings(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn flush_request(socket: &Path, req: &ControlRequest) -> Result<FlushReply> {
    match strata_client::control_request(socket, req) {
        Ok(ControlReply::Flush(r)) => Ok(r),
        Ok(ControlReply::Error { code, message }) => bail!("the daemon refused the flush request ({code}): {message}"),
        Ok(other) => bail!("unexpected reply from the daemon: {other:?} (is it an older version without file support?)"),
        Err(e) => bail!("no daemon answers at {} ({e})", socket.display()),
    }
}

/// Marks the DEFAULT files under `paths` (empty = all) urgent.
pub fn request_flush(socket: &Path, paths: &[PathBuf]) -> Result<FlushReply> {
    flush_request(
        socket,
        &ControlRequest::Flush {
            paths: path_strings(paths),
        },
    )
}

pub fn flush_state(socket: &Path, paths: &[PathBuf]) -> Result<FlushReply> {
    flush_request(
        socket,
        &ControlRequest::FlushState {
            paths: path_strings(paths),
        },
    )
}

/// Requests a flush of `paths` and waits until they are clean. Returns the
/// final state; its `errors` are non-empty when files could not be persisted.
/// A progress bar (dirty bytes remaining) appears on stderr when the drain
/// takes longer than half a second and `progress` is set.
pub fn drain(socket: &Path, paths: &[PathBuf], progress: bool) -> Result<FlushReply> {
    let first = request_flush(socket, paths)?;
    let start = Instant::now();
    let total = first.dirty_bytes.max(1);
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut state = first;
    // A failure seen may come from a job that began before this call (the
    // destination put right meanwhile): ask once more when no job runs, so
    // the verdict is a fresh attempt's.
    let mut asked_again = false;
    loop {
        // Clean only when no job or clean-up of these paths is left either.
        if state.drained() {
            break;
        }
        if state.only_failures_left() {
            if asked_again {
                break;
            }
            asked_again = true;
            state = request_flush(socket, paths)?;
            continue;
        }
        if progress && bar.is_none() && start.elapsed() >= BAR_AFTER {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let style = indicatif::ProgressStyle::with_template(
                "strata: flushing {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {msg})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            b.set_style(style);
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_length(total.max(state.dirty_bytes));
            b.set_position(total.saturating_sub(state.dirty_bytes));
            b.set_message(format!(
                "{} file{} left",
                state.dirty_files,
                if state.dirty_files == 1 { "" } else { "s" }
            ));
        }
        std::thread::sleep(POLL);
        state = flush_state(socket, paths)?;
    }
    if let Some(b) = bar {
        b.set_position(b.length().unwrap_or(0).saturating_sub(state.dirty_bytes));
        b.finish_and_clear();
    }
    Ok(state)
}

/// Prints the flush errors of `r` to stderr.
pub fn print_errors(r: &FlushReply) {
    for e in &r.errors {
        eprintln!("strata: cannot persist {}: {}", e.path, e.message);
    }
}

/// `strata flush [--wait] [PATH…]`.
pub fn command(socket: &Path, paths: &[PathBuf], wait: bool) -> Result<std::process::ExitCode> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| absolute(p)).collect::<Result<_>>()?;
    if !wait {
        let r = request_flush(socket, &paths)?;
        eprintln!(
            "strata: flush requested: {} dirty file{} ({})",
            r.dirty_files,
            if r.dirty_files == 1 { "" } else { "s" },
            crate::table::format_size(r.dirty_bytes)
        );
        print_errors(&r);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let r = drain(socket, &paths, true)?;
    if r.dirty_files > 0 || !r.errors.is_empty() {
        print_errors(&r);
        if r.dirty_files > 0 {
            eprintln!(
                "strata: {} file{} could not be persisted",
                r.dirty_files,
                if r.dirty_files == 1 { "" } else { "s" }
            );
            return Ok(std::process::ExitCode::from(1));
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_normalises() {
        assert_eq!(
            absolute(Path::new("/a/./b//c/../d/")).unwrap(),
            PathBuf::from("/a/b/d")
        );
        assert_eq!(absolute(Path::new("/..")).unwrap(), PathBuf::from("/"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("x/y")).unwrap(), cwd.join("x/y"));
    }

    #[test]
    fn failures_left() {
        let mut r = FlushReply {
            dirty_files: 1,
            ..Default::default()
        };
        assert!(!r.only_failures_left());
        r.errors.push(strata_proto::control::FlushError {
            path: "/x".into(),
            message: "EACCES".into(),
        });
        assert!(r.only_failures_left());
        r.flushing_files = 1;
        assert!(!r.only_failures_left());
        r.flushing_files = 0;
        r.dirty_files = 2;
        assert!(!r.only_failures_left());
    }
}
