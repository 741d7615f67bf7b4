//! Staging: **stage-in** copies files (or whole directory trees) from their
//! destination into the buffer before a job reads them; **stage-out** makes
//! the daemon write WORKFLOW-mode (and DEFAULT-mode) files to their
//! destination now and waits until they are persisted, optionally dropping
//! their clean pages from the buffer afterwards.
//!
//! Stage-in reads every byte through the file API (`file_open` with the
//! chosen persist mode, then `file_read`): pages the buffer lacks are read
//! from the destination and handed to the daemon with `FileFill`, so later
//! reads (e.g. under `strata run`) hit the buffer. Files are read by
//! `StageOptions::jobs` threads in parallel. A full buffer is not an error:
//! pages that find no room stay unbuffered (`StageReport::buffered_bytes`
//! tells how much was kept).
//!
//! Stage-out is a control-plane operation (`StageOut` / `StageState` on the
//! daemon socket); it needs no data connection (`stage_out_at`).
//!
//! Paths are made absolute and lexically normalised (no symlink
//! resolution), the way the adapter names files. A manifest is a text file
//! with one path per line; blank lines and lines starting with `#` are
//! ignored; relative paths are relative to the current directory.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_proto::control::{ControlReply, ControlRequest, DrainState, StageReply};
use strata_proto::Errno;

use crate::file::{OpenFlags, Persist};
use crate::{control_request, err, Client, Error, Result};

/// Default number of parallel stage-in readers.
pub const JOBS_DEFAULT: usize = 4;
/// Most parallel stage-in readers.
pub const JOBS_MAX: usize = 64;
/// Bytes one stage-in `file_read` asks for (at least one page).
const READ_CHUNK_BYTES: u64 = 4 << 20;
/// Paths in one manifest at most.
pub const MANIFEST_PATHS_MAX: usize = 1_000_000;
/// Stage-out polls the daemon at most this often, and at least this rarely.
const POLL_MIN: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Where a staging run stands (given to the progress callback).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageProgress {
    pub files_total: u64,
    pub files_done: u64,
    pub files_failed: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
}

/// Progress callback; stage-in calls it from its reader threads (one call
/// at a time is not guaranteed: make it thread-safe).
pub type ProgressFn = Arc<dyn Fn(&StageProgress) + Send + Sync>;

/// How to stage in.
#[derive(Clone)]
pub struct StageOptions {
    /// Persist mode of files that get a new record (an existing record keeps its mode).
    pub persist: Persist,
    /// Parallel readers (1..=`JOBS_MAX`).
    pub jobs: usize,
    /// Page size of new records (a power of two in 4 KiB..=64 MiB).
    pub page_bytes: u64,
    pub progress: Option<ProgressFn>,
}

impl Default for StageOptions {
    fn default() -> Self {
        StageOptions {
            persist: Persist::Workflow,
            jobs: JOBS_DEFAULT,
            page_bytes: 1 << 20,
            progress: None,
        }
    }
}

impl std::fmt::Debug for StageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageOptions")
            .field("persist", &self.persist)
            .field("jobs", &self.jobs)
            .field("page_bytes", &self.page_bytes)
            .finish_non_exhaustive()
    }
}

/// How to stage out.
#[derive(Clone)]
pub struct StageOutOptions {
    /// Drop the files' clean pages from the buffer once persisted (with
    /// `wait: false`: only those already persisted now).
    pub evict: bool,
    /// Block until every file is persisted (or only failures remain).
    pub wait: bool,
    /// Give up waiting after this long (`StageReport::timed_out`).
    pub timeout: Option<Duration>,
    pub progress: Option<ProgressFn>,
}

impl Default for StageOutOptions {
    fn default() -> Self {
        StageOutOptions {
            evict: false,
            wait: true,
            timeout: None,
            progress: None,
        }
    }
}

impl std::fmt::Debug for StageOutOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageOutOptions")
            .field("evict", &self.evict)
            .field("wait", &self.wait)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A file that could not be staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageError {
    pub path: String,
    pub errno: Errno,
    pub message: String,
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What a staging run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageReport {
    /// Files staged (stage-in: read; stage-out: persisted).
    pub files: u64,
    /// Bytes moved (stage-in: read; stage-out: written to the destination
    /// by this stage-out, i.e. the bytes not yet persisted when it started).
    pub bytes: u64,
    pub elapsed: Duration,
    /// Files that failed, with the reason (empty on full success).
    pub errors: Vec<StageError>,
    /// Bytes of the staged paths held in the buffer afterwards.
    pub buffered_bytes: u64,
    /// Stage-out with evict: bytes dropped from the buffer.
    pub evicted_bytes: u64,
    /// Stage-out: SCRATCH files under the paths (never staged out).
    pub scratch_files: u64,
    /// Stage-out: files not persisted before `timeout`.
    pub timed_out: bool,
}

impl StageReport {
    /// Throughput of the run (MiB/s).
    pub fn mib_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / (1u64 << 20) as f64 / s
        } else {
            0.0
        }
    }
}

/// `path` made absolute (against the current directory) and lexically
/// normalised: no `.`, no `..`, no doubled or trailing `/`.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| err(Errno::Inval, format!("current directory: {e}")))?
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Ok(out)
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| err(Errno::Inval, format!("path is not UTF-8: {}", p.display())))
}

/// The paths listed in manifest `text` (one per line, `#` comments).
pub fn parse_manifest(text: &str) -> Vec<PathBuf> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(PathBuf::from)
        .collect()
}

/// Reads a manifest file (see the module docs).
pub fn read_manifest(path: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io_error(e, format!("manifest {}", path.display())))?;
    let paths = parse_manifest(&text);
    if paths.len() > MANIFEST_PATHS_MAX {
        return Err(err(
            Errno::Limit,
            format!(
                "manifest {} lists {} paths (at most {MANIFEST_PATHS_MAX})",
                path.display(),
                paths.len()
            ),
        ));
    }
    Ok(paths)
}

fn io_error(e: std::io::Error, context: String) -> Error {
    let errno = match e.kind() {
        std::io::ErrorKind::NotFound => Errno::NoFile,
        _ => Errno::Io,
    };
    Error {
        errno,
        context: format!("{context}: {e}"),
        os: e.raw_os_error().unwrap_or(0),
    }
}

fn stage_error(path: &str, e: &Error) -> StageError {
    StageError {
        path: path.to_string(),
        errno: e.errno,
        message: e.to_string(),
    }
}

/// Regular files under `root` (itself if a file), with their sizes. Symbolic
/// links to files are staged under the link's path; links to directories
/// are not followed (except `root` itself).
fn collect(root: &Path, files: &mut Vec<(String, u64)>, errors: &mut Vec<StageError>) {
    let root_s = root.to_string_lossy().into_owned();
    let md = match std::fs::metadata(root) {
        Ok(m) => m,
        Err(e) => {
            let e = io_error(e, format!("cannot stage in {root_s}"));
            errors.push(stage_error(&root_s, &e));
            return;
        }
    };
    if md.is_file() {
        match path_str(root) {
            Ok(s) => files.push((s, md.len())),
            Err(e) => errors.push(stage_error(&root_s, &e)),
        }
        return;
    }
    if !md.is_dir() {
        errors.push(StageError {
            path: root_s.clone(),
            errno: Errno::Inval,
            message: format!("cannot stage in {root_s}: not a regular file or directory"),
        });
        return;
    }
    let mut stack = vec![root.to_path_buf()];
    // Bounded by the tree: every directory is pushed once (links to
    // directories are not followed, so there are no cycles).
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) => {
                let d = dir.to_string_lossy().into_owned();
                errors.push(stage_error(&d, &io_error(e, format!("cannot list {d}"))));
                continue;
            }
        };
        for ent in rd {
            let ent = match ent {
                Ok(e) => e,
                Err(e) => {
                    let d = dir.to_string_lossy().into_owned();
                    errors.push(stage_error(&d, &io_error(e, format!("cannot list {d}"))));
                    continue;
                }
            };
            let p = ent.path();
            let Ok(ft) = ent.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
                continue;
            }
            let size = if ft.is_file() {
                ent.metadata().map(|m| m.len()).ok()
            } else if ft.is_symlink() {
                std::fs::metadata(&p)
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
            } else {
                None // fifos, sockets, devices: not data to stage
            };
            let Some(size) = size else { continue };
            match path_str(&p) {
                Ok(s) => files.push((s, size)),
                Err(e) => errors.push(stage_error(&p.to_string_lossy(), &e)),
            }
        }
    }
}

/// Shared counters of a stage-in run.
struct Counters {
    files_total: u64,
    files_done: AtomicU64,
    files_failed: AtomicU64,
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
    progress: Option<ProgressFn>,
}

impl Counters {
    fn report(&self) {
        if let Some(p) = &self.progress {
            p(&StageProgress {
                files_total: self.files_total,
                files_done: self.files_done.load(Ordering::Relaxed),
                files_failed: self.files_failed.load(Ordering::Relaxed),
                bytes_total: self.bytes_total.load(Ordering::Relaxed),
                bytes_done: self.bytes_done.load(Ordering::Relaxed),
            });
        }
    }
}

impl Client {
    /// Stages `paths` (files or directories, recursively) into the buffer:
    /// see the module docs. Per-file failures are listed in the report's
    /// `errors`; `Err` only for failures of the whole run (bad options, no
    /// daemon).
    pub fn stage_in(&self, paths: &[PathBuf], opts: &StageOptions) -> Result<StageReport> {
        let start = Instant::now();
        if paths.is_empty() {
            return Err(err(Errno::Inval, "stage-in: no paths given"));
        }
        let page = opts.page_bytes;
        if !strata_proto::types::page_bytes_valid(page) {
            return Err(err(
                Errno::Inval,
                format!("page size {page} must be a power of two in 4 KiB..=64 MiB"),
            ));
        }
        let mut roots = Vec::with_capacity(paths.len());
        for p in paths {
            roots.push(absolute(p)?);
        }
        let mut files = Vec::new();
        let mut errors = Vec::new();
        for r in &roots {
            collect(r, &mut files, &mut errors);
        }
        files.sort_unstable();
        files.dedup_by(|a, b| a.0 == b.0);
        let c = Counters {
            files_total: files.len() as u64,
            files_done: AtomicU64::new(0),
            files_failed: AtomicU64::new(0),
            bytes_total: AtomicU64::new(files.iter().map(|f| f.1).sum()),
            bytes_done: AtomicU64::new(0),
            progress: opts.progress.clone(),
        };
        c.report();
        let next = AtomicUsize::new(0);
        let failed = Mutex::new(Vec::new());
        let jobs = opts.jobs.clamp(1, JOBS_MAX).min(files.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| {
                    let mut buf = vec![0u8; READ_CHUNK_BYTES.max(page) as usize];
                    // Bounded: each round takes the next unclaimed file.
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((path, _)) = files.get(i) else { break };
                        match self.stage_in_file(path, opts, &mut buf, &c) {
                            Ok(()) => {
                                c.files_done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                c.files_failed.fetch_add(1, Ordering::Relaxed);
                                failed
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .push(stage_error(path, &e));
                            }
                        }
                        c.report();
                    }
                });
            }
        });
        errors.extend(failed.into_inner().unwrap_or_else(|p| p.into_inner()));
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        let buffered_bytes = {
            let roots: Vec<String> = roots
                .iter()
                .map(|r| r.to_string_lossy().into_owned())
                .collect();
            stage_state_at(&self.inner.socket, &roots)
                .map(|r| r.buffered_bytes)
                .unwrap_or(0)
        };
        Ok(StageReport {
            files: c.files_done.load(Ordering::Relaxed),
            bytes: c.bytes_done.load(Ordering::Relaxed),
            elapsed: start.elapsed(),
            errors,
            buffered_bytes,
            ..StageReport::default()
        })
    }

    /// Reads one file through the buffer.
    fn stage_in_file(
        &self,
        path: &str,
        opts: &StageOptions,
        buf: &mut [u8],
        c: &Counters,
    ) -> Result<()> {
        let attr = self.file_open(
            path,
            OpenFlags {
                read: true,
                ..OpenFlags::default()
            },
            0,
            opts.persist,
            opts.page_bytes,
        )?;
        let mut off = 0u64;
        let res = (|| {
            // Bounded: each round reads ≥ 1 byte or ends (EOF).
            loop {
                // Stage-in asks for the data to stay: keep it even if that evicts written pages.
                let n = self
                    .file_read_fill(attr.id, off, buf, true)
                    .map_err(|e| err(e.errno, format!("read at {off}: {e}")))?;
                if n == 0 {
                    return Ok(());
                }
                off += n as u64;
                let done = c.bytes_done.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
                c.bytes_total.fetch_max(done, Ordering::Relaxed);
                c.report();
            }
        })();
        let _ = self.file_close(attr.id);
        res
    }

    /// Stages out `paths`: see [`stage_out_at`].
    pub fn stage_out(&self, paths: &[PathBuf], opts: &StageOutOptions) -> Result<StageReport> {
        stage_out_at(&self.inner.socket, paths, opts)
    }

    /// The staging state of the files under `paths` (absolute).
    pub fn stage_state(&self, paths: &[String]) -> Result<StageReply> {
        stage_state_at(&self.inner.socket, paths)
    }
}

fn stage_request(socket: &Path, req: &ControlRequest) -> Result<StageReply> {
    match control_request(socket, req)? {
        ControlReply::Stage(r) => Ok(r),
        ControlReply::Error { code, message } => Err(crate::daemon_error(code, message)),
        other => Err(err(
            Errno::Version,
            format!("unexpected reply {other:?} (is the daemon an older version without staging?)"),
        )),
    }
}

/// Control `StageState` for `paths` (absolute; empty = all).
pub fn stage_state_at(socket: &Path, paths: &[String]) -> Result<StageReply> {
    stage_request(
        socket,
        &ControlRequest::StageState {
            paths: paths.to_vec(),
        },
    )
}

/// `path` is `prefix` or lies under it.
fn under(path: &str, prefix: &str) -> bool {
    let p = if prefix.len() > 1 {
        prefix.trim_end_matches('/')
    } else {
        prefix
    };
    path == p || p == "/" || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
}

fn only_failures_left(r: &StageReply) -> bool {
    r.failed_files > 0 && r.dirty_files == 0 && r.flushing_files == 0
}

/// Stages out the WORKFLOW and DEFAULT files under `paths` through the
/// daemon at `socket`: marks them (WORKFLOW files are flushed from now on),
/// waits until all are persisted (`opts.wait`), then evicts their clean
/// pages (`opts.evict`). A path with no buffered file that does not exist at
/// the destination either is an error (`NoFile`) in the report; files whose
/// flush fails are reported with the daemon's error once nothing else is
/// left to wait for.
pub fn stage_out_at(
    socket: &Path,
    paths: &[PathBuf],
    opts: &StageOutOptions,
) -> Result<StageReport> {
    let start = Instant::now();
    if paths.is_empty() {
        return Err(err(Errno::Inval, "stage-out: no paths given"));
    }
    let mut roots = Vec::with_capacity(paths.len());
    for p in paths {
        roots.push(path_str(&absolute(p)?)?);
    }
    roots.sort_unstable();
    roots.dedup();
    let mut r = stage_request(
        socket,
        &ControlRequest::StageOut {
            paths: roots.clone(),
            evict: opts.evict && !opts.wait,
        },
    )?;
    let mut report = StageReport {
        scratch_files: r.scratch_files,
        evicted_bytes: r.evicted_bytes,
        ..StageReport::default()
    };
    if !r.truncated {
        for root in &roots {
            if r.files.iter().any(|f| under(&f.path, root)) {
                continue;
            }
            if std::fs::symlink_metadata(root).is_err() && r.scratch_files == 0 {
                report.errors.push(StageError {
                    path: root.clone(),
                    errno: Errno::NoFile,
                    message: format!("cannot stage out {root}: no such file or directory (neither buffered nor at the destination)"),
                });
            }
        }
    }
    let bytes_total = r.dirty_bytes;
    let progress = |r: &StageReply, total: u64| {
        if let Some(p) = &opts.progress {
            let total = total.max(r.dirty_bytes);
            p(&StageProgress {
                files_total: r.pending_files() + r.persisted_files,
                files_done: r.persisted_files,
                files_failed: r.failed_files,
                bytes_total: total,
                bytes_done: total - r.dirty_bytes,
            });
        }
    };
    progress(&r, bytes_total);
    if opts.wait {
        let deadline = opts.timeout.map(|t| start + t);
        let mut sleep = POLL_MIN;
        // Bounded by the flusher's progress, failures or the deadline.
        while r.pending_files() > 0 && !only_failures_left(&r) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                report.timed_out = true;
                break;
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(POLL_MAX);
            // WORKFLOW files created under the paths since: mark them too.
            let unmarked = r
                .files
                .iter()
                .any(|f| f.mode == "workflow" && !f.staged_out && f.state != DrainState::Persisted);
            r = if unmarked {
                stage_request(
                    socket,
                    &ControlRequest::StageOut {
                        paths: roots.clone(),
                        evict: false,
                    },
                )?
            } else {
                stage_state_at(socket, &roots)?
            };
            progress(&r, bytes_total);
        }
        if opts.evict && !report.timed_out {
            let e = stage_request(
                socket,
                &ControlRequest::StageOut {
                    paths: roots.clone(),
                    evict: true,
                },
            )?;
            report.evicted_bytes = e.evicted_bytes;
            r = e;
        }
    }
    for f in &r.files {
        match f.state {
            DrainState::Persisted => {}
            DrainState::Failed => report.errors.push(StageError {
                path: f.path.clone(),
                errno: Errno::Io,
                message: format!(
                    "cannot persist: {}",
                    f.error.as_deref().unwrap_or("unknown error")
                ),
            }),
            _ if report.timed_out => report.errors.push(StageError {
                path: f.path.clone(),
                errno: Errno::Timeout,
                message: format!("not persisted before the timeout ({})", f.state.as_str()),
            }),
            _ => {}
        }
    }
    report.files = r.persisted_files;
    report.bytes = bytes_total.saturating_sub(r.dirty_bytes);
    report.buffered_bytes = r.buffered_bytes;
    report.elapsed = start.elapsed();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines() {
        let m = parse_manifest("# inputs\n/a/b\n\n  rel/c  \n#x\n/d # not a comment\n");
        assert_eq!(
            m,
            vec![
                PathBuf::from("/a/b"),
                PathBuf::from("rel/c"),
                PathBuf::from("/d # not a comment")
            ]
        );
    }

    #[test]
    fn absolute_is_lexical() {
        assert_eq!(
            absolute(Path::new("/a/./b/../c//d/")).unwrap(),
            PathBuf::from("/a/c/d")
        );
        assert!(absolute(Path::new("x")).unwrap().is_absolute());
    }

    #[test]
    fn under_matches_directory_prefixes_only() {
        assert!(
            under("/a/b", "/a") && under("/a", "/a") && under("/a/b", "/a/") && under("/x", "/")
        );
        assert!(!under("/ab", "/a"));
    }

    #[test]
    fn collect_walks_trees_and_reports_missing_paths() {
        let d = std::env::temp_dir().join(format!("strata-stage-collect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("x/y")).unwrap();
        std::fs::write(d.join("a"), b"12").unwrap();
        std::fs::write(d.join("x/y/b"), b"345").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("x/link")).unwrap();
        std::os::unix::fs::symlink(&d, d.join("x/loop")).unwrap();
        let (mut files, mut errors) = (Vec::new(), Vec::new());
        collect(&d, &mut files, &mut errors);
        collect(&d.join("missing"), &mut files, &mut errors);
        files.sort();
        let names: Vec<(String, u64)> = files
            .iter()
            .map(|(p, s)| (p.strip_prefix(d.to_str().unwrap()).unwrap().to_string(), *s))
            .collect();
        assert_eq!(
            names,
            vec![
                ("/a".into(), 2),
                ("/x/link".into(), 2),
                ("/x/y/b".into(), 3)
            ]
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].errno, Errno::NoFile);
        assert!(
            errors[0].message.contains("missing"),
            "{}",
            errors[0].message
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
