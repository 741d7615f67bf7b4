//! Shared machinery of the file-system benchmarks (`ior`, `md`, `adapters`).
//!
//! * [`Team`]: N worker processes — copies of this executable running a hidden
//!   worker subcommand — driven phase by phase over pipes. The coordinator
//!   writes a phase name to every worker's stdin at once (the barrier), each
//!   worker answers one `done {json}` line with its own start/end time on
//!   `CLOCK_MONOTONIC` (one clock for all processes of the machine), so the
//!   aggregate rate is total work / (slowest end − common start).
//! * [`WorkerEnv`]: how workers run — directly on a directory, or with the
//!   adapter preloaded (`LD_PRELOAD=libstrata_posix.so`) against a daemon.
//!   The workers themselves are plain POSIX programs with no strata code.
//! * [`PrivateDaemon`]: a daemon with a generated configuration, stopped on drop.
//! * [`drain`]: control `Flush` then poll `FlushState` until no file is dirty.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use strata_proto::control::{ControlReply, ControlRequest, FlushReply};

use crate::hist::Hist;

pub const MIB: f64 = 1024.0 * 1024.0;

/// `CLOCK_MONOTONIC` in nanoseconds: comparable across the processes of one machine.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How the processes of a file-system benchmark reach their directory.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ViaMode {
    /// Buffered, never written to the destination.
    Scratch,
    /// Buffered and flushed to the destination asynchronously.
    Default,
    /// Buffered, kept until staged out.
    Workflow,
}

impl ViaMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ViaMode::Scratch => "scratch",
            ViaMode::Default => "default",
            ViaMode::Workflow => "workflow",
        }
    }
}

/// The environment of the worker processes.
#[derive(Debug, Clone)]
pub enum WorkerEnv {
    /// Plain I/O on the directory. `socket` is handed down only so that the
    /// worker's CLI finds a running daemon instead of starting one.
    Direct { socket: Option<PathBuf> },
    /// Through strata: the adapter preloaded, tracking `include`.
    Strata {
        preload: PathBuf,
        socket: PathBuf,
        config: Option<PathBuf>,
        mode: ViaMode,
        include: PathBuf,
    },
}

impl WorkerEnv {
    pub fn apply(&self, cmd: &mut Command) {
        // Nothing inherited may redirect the workers to another daemon or mode.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("STRATA_") || k == "LD_PRELOAD" {
                cmd.env_remove(k.as_ref());
            }
        }
        match self {
            WorkerEnv::Direct { socket } => {
                if let Some(s) = socket {
                    cmd.env("STRATA_SOCKET", s);
                }
            }
            WorkerEnv::Strata {
                preload,
                socket,
                config,
                mode,
                include,
            } => {
                cmd.env("LD_PRELOAD", preload)
                    .env("STRATA_SOCKET", socket)
                    .env("STRATA_MODE", mode.as_str())
                    .env("STRATA_INCLUDE", include);
                if let Some(c) = config {
                    cmd.env("STRATA_CONFIG", c);
                }
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            WorkerEnv::Direct { .. } => "direct".into(),
            WorkerEnv::Strata { mode, .. } => format!("strata {}", mode.as_str()),
        }
    }
}

/// `libstrata_posix.so`: `$STRATA_PRELOAD_LIB`, else next to this executable.
/// One command per rank running the hidden worker subcommand `worker` of
/// this executable (`bench <worker> --dir DIR --rank R --procs N` + `args`),
/// with the workers' environment applied.
pub fn worker_cmds(
    worker: &str,
    dir: &Path,
    procs: usize,
    env: &WorkerEnv,
    args: &[String],
) -> Result<Vec<Command>> {
    let exe = std::env::current_exe().context("cannot find this executable to spawn workers")?;
    Ok((0..procs)
        .map(|rank| {
            let mut c = Command::new(&exe);
            env.apply(&mut c);
            c.args([worker, "--dir"]).arg(dir);
            c.args(["--rank", &rank.to_string(), "--procs", &procs.to_string()])
                .args(args);
            c
        })
        .collect())
}

pub fn find_preload_lib() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("STRATA_PRELOAD_LIB").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("STRATA_PRELOAD_LIB={} does not exist", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let p = exe.with_file_name("libstrata_posix.so");
    if !p.is_file() {
        bail!(
            "the adapter {} is missing: build it (cargo build [--release] -p strata-posix) or set STRATA_PRELOAD_LIB",
            p.display()
        );
    }
    Ok(p)
}

/// The `--config FILE` this process was started with, if any (the CLI keeps
/// it to itself; workers under the adapter need the same file).
pub fn cli_config_path() -> Option<PathBuf> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    for (i, a) in args.iter().enumerate() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return args.get(i + 1).map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    std::env::var_os("STRATA_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// What one worker did in one phase (one line on its stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    pub start_ns: u64,
    pub end_ns: u64,
    pub ops: u64,
    pub bytes: u64,
    /// Per-operation latencies (see [`Hist::encode`]).
    pub hist: String,
}

/// A phase of the whole team.
#[derive(Debug, Clone)]
pub struct PhaseOutcome {
    pub name: String,
    /// Barrier release (just before the phase name was written to the first worker).
    pub start_ns: u64,
    /// Slowest worker's end.
    pub end_ns: u64,
    pub ops: u64,
    pub bytes: u64,
    pub hist: Hist,
    pub workers: usize,
}

impl PhaseOutcome {
    pub fn secs(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9).max(1e-9)
    }
    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / MIB / self.secs()
    }
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.secs()
    }
}

/// A line from a worker (None: its stdout closed).
type Line = (usize, Option<String>);

struct Member {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// The worker processes of one benchmark run.
pub struct Team {
    members: Vec<Member>,
    rx: Receiver<Line>,
    what: String,
}

impl Team {
    /// Spawns one process per command (already carrying args and env) and
    /// waits until every one printed `ready` (setup is not measured).
    pub fn spawn(what: &str, cmds: Vec<Command>, timeout: Duration) -> Result<Team> {
        let (tx, rx) = channel();
        let mut team = Team {
            members: Vec::new(),
            rx,
            what: what.to_string(),
        };
        for (rank, mut cmd) in cmds.into_iter().enumerate() {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let mut child = cmd
                .spawn()
                .with_context(|| format!("cannot spawn {what} worker {rank}"))?;
            let stdout = child.stdout.take().context("worker stdout")?;
            let stdin = child.stdin.take();
            team.members.push(Member { child, stdin });
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(format!("{what}-out-{rank}"))
                .spawn(move || {
                    let mut r = BufReader::new(stdout);
                    loop {
                        let mut l = String::new();
                        match r.read_line(&mut l) {
                            Ok(0) | Err(_) => {
                                let _ = tx.send((rank, None));
                                return;
                            }
                            Ok(_) => {
                                if tx.send((rank, Some(l.trim_end().to_string()))).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                })?;
        }
        let n = team.members.len();
        team.collect(n, timeout, "setup", |_, l| {
            if l == "ready" {
                Ok(())
            } else {
                bail!("said {l:?} instead of ready")
            }
        })?;
        Ok(team)
    }

    /// Waits for one line from each of `n` workers, handing each to `f`.
    fn collect(
        &mut self,
        n: usize,
        timeout: Duration,
        phase: &str,
        mut f: impl FnMut(usize, &str) -> Result<()>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut seen = vec![false; self.members.len()];
        let mut got = 0;
        while got < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((rank, Some(l))) => {
                    if let Some(e) = l.strip_prefix("error ") {
                        bail!("{} worker {rank}, phase {phase}: {e}", self.what);
                    }
                    if seen[rank] {
                        bail!(
                            "{} worker {rank} said {l:?} twice in phase {phase}",
                            self.what
                        );
                    }
                    seen[rank] = true;
                    got += 1;
                    f(rank, &l)
                        .with_context(|| format!("{} worker {rank}, phase {phase}", self.what))?;
                }
                Ok((rank, None)) => {
                    let status = self.members[rank]
                        .child
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_default();
                    bail!("{} worker {rank} exited during phase {phase} ({status}); see its stderr above", self.what);
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} phase {phase}: {} of {n} workers did not finish within {timeout:?}",
                        self.what,
                        n - got
                    )
                }
                Err(RecvTimeoutError::Disconnected) => bail!("{} workers vanished", self.what),
            }
        }
        Ok(())
    }

    /// Releases every worker into phase `name` and gathers the results.
    pub fn phase(&mut self, name: &str, timeout: Duration) -> Result<PhaseOutcome> {
        let line = format!("{name}\n");
        let start_ns = mono_ns();
        for (rank, m) in self.members.iter_mut().enumerate() {
            let stdin = m
                .stdin
                .as_mut()
                .ok_or_else(|| anyhow!("worker {rank} has no stdin"))?;
            stdin
                .write_all(line.as_bytes())
                .and_then(|_| stdin.flush())
                .with_context(|| format!("{} worker {rank} is gone", self.what))?;
        }
        let mut out = PhaseOutcome {
            name: name.to_string(),
            start_ns,
            end_ns: start_ns,
            ops: 0,
            bytes: 0,
            hist: Hist::new(),
            workers: self.members.len(),
        };
        let n = self.members.len();
        self.collect(n, timeout, name, |_, l| {
            let json = l
                .strip_prefix("done ")
                .ok_or_else(|| anyhow!("said {l:?}"))?;
            let r: WorkerReport = serde_json::from_str(json)?;
            out.end_ns = out.end_ns.max(r.end_ns);
            out.ops += r.ops;
            out.bytes += r.bytes;
            out.hist.merge(&Hist::decode(&r.hist)?);
            Ok(())
        })?;
        Ok(out)
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut s) = m.stdin.take() {
                let _ = s.write_all(b"quit\n");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for m in &mut self.members {
            loop {
                match m.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = m.child.kill();
                        let _ = m.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
    }
}

/// The worker side: prints `ready`, then runs each phase named on stdin
/// (`quit` or EOF ends), answering `done {json}` or `error …`.
pub fn serve(mut phase: impl FnMut(&str) -> Result<WorkerReport>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let stdin = std::io::stdin();
    let mut line = String::new();
    let mut lock = stdin.lock();
    // Bounded: a worker serves at most this many phases.
    for _ in 0..10_000 {
        line.clear();
        if lock.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let name = line.trim();
        if name == "quit" || name.is_empty() {
            return Ok(());
        }
        match phase(name) {
            Ok(r) => writeln!(out, "done {}", serde_json::to_string(&r)?)?,
            Err(e) => {
                writeln!(out, "error {e:#}")?;
                out.flush()?;
                return Err(e);
            }
        }
        out.flush()?;
    }
    bail!("too many phases")
}

/// Reports a setup failure on the protocol channel, then returns it.
pub fn setup_failed(e: anyhow::Error) -> anyhow::Error {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "error {e:#}");
    let _ = out.flush();
    e
}

// ---------------------------------------------------------------- raw POSIX I/O

pub fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| anyhow!("path {} contains a NUL byte", p.display()))
}

pub fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Writes all of `buf` at the current offset (retrying short writes and EINTR).
pub fn write_all(fd: i32, buf: &[u8]) -> std::io::Result<()> {
    write_all_at(fd, buf, None)
}

/// Writes all of `buf` at file offset `at` (`pwrite`), or at the current
/// offset if None (`write`), retrying short writes and EINTR.
pub fn write_all_at(fd: i32, mut buf: &[u8], mut at: Option<u64>) -> std::io::Result<()> {
    let mut spins = 0u32;
    // Bounded: every round writes ≥ 1 byte or fails (EINTR retried ≤ 1000 times).
    while !buf.is_empty() {
        // SAFETY: buf is a valid readable slice.
        let n = unsafe {
            match at {
                Some(off) => libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t),
                None => libc::write(fd, buf.as_ptr().cast(), buf.len()),
            }
        };
        if n < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted && spins < 1000 {
                spins += 1;
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "write returned 0",
            ));
        }
        buf = &buf[n as usize..];
        at = at.map(|o| o + n as u64);
    }
    Ok(())
}

/// Reads until `buf` is full or EOF; returns the bytes read.
pub fn read_full(fd: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    read_full_at(fd, buf, None)
}

/// Reads from file offset `at` (`pread`), or from the current offset if
/// None (`read`), until `buf` is full or EOF; returns the bytes read.
pub fn read_full_at(fd: i32, buf: &mut [u8], at: Option<u64>) -> std::io::Result<usize> {
    let mut got = 0;
    let mut spins = 0u32;
    // Bounded: every round reads ≥ 1 byte, stops at EOF or fails (EINTR retried ≤ 1000 times).
    while got < buf.len() {
        let tail = &mut buf[got..];
        // SAFETY: the tail of buf is a valid writable slice.
        let n = unsafe {
            match at {
                Some(off) => libc::pread(
                    fd,
                    tail.as_mut_ptr().cast(),
                    tail.len(),
                    (off + got as u64) as libc::off_t,
                ),
                None => libc::read(fd, tail.as_mut_ptr().cast(), tail.len()),
            }
        };
        if n < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted && spins < 1000 {
                spins += 1;
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        got += n as usize;
    }
    Ok(got)
}

// ---------------------------------------------------------------- daemons

fn control(socket: &Path, req: &ControlRequest) -> Result<ControlReply> {
    strata_client::control_request(socket, req)
        .map_err(|e| anyhow!("daemon at {}: {e}", socket.display()))
}

pub fn ping(socket: &Path) -> bool {
    matches!(control(socket, &ControlRequest::Ping), Ok(ControlReply::Ok))
}

/// (requests_total, files.write_bytes_total) of the daemon at `socket`.
pub fn file_counters(socket: &Path) -> Result<(u64, u64)> {
    let st = strata_client::status(socket)
        .map_err(|e| anyhow!("status of the daemon at {}: {e}", socket.display()))?;
    Ok((st.requests_total, st.files.write_bytes_total))
}

/// Fails when a run through strata left no trace in the daemon: fewer than
/// `min_requests` requests and no byte written to the buffer.
pub fn check_went_through(
    socket: &Path,
    before: &(u64, u64),
    dir: &Path,
    min_requests: u64,
) -> Result<()> {
    let after = file_counters(socket)?;
    let (reqs, wrote) = (
        after.0.saturating_sub(before.0),
        after.1.saturating_sub(before.1),
    );
    if reqs < min_requests && wrote == 0 {
        bail!(
            "the run did not go through strata ({reqs} requests, nothing written to the buffer): is {} tracked by the adapter (not under /dev, /run, the tiers' or the socket's directory)?",
            dir.display()
        );
    }
    Ok(())
}

/// Result of [`drain`].
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub secs: f64,
    /// `flushed_bytes_total` grew by this much while draining.
    pub flushed_bytes: u64,
    /// Dirty bytes when the drain started.
    pub dirty_bytes_at_start: u64,
}

fn flush_state(socket: &Path, paths: &[String]) -> Result<FlushReply> {
    match control(
        socket,
        &ControlRequest::FlushState {
            paths: paths.to_vec(),
        },
    )? {
        ControlReply::Flush(r) => Ok(r),
        ControlReply::Error { message, .. } => bail!("FlushState refused: {message}"),
        r => bail!("unexpected reply to FlushState: {r:?}"),
    }
}

/// Asks the daemon to flush every DEFAULT file under `paths` and waits until
/// none is dirty or being flushed (errors with the daemon's flush errors if
/// they persist with nothing else left, or after `timeout`).
pub fn drain(
    socket: &Path,
    paths: &[String],
    timeout: Duration,
    mut progress: impl FnMut(&FlushReply),
) -> Result<Drain> {
    let t0 = Instant::now();
    let before = flush_state(socket, paths)?;
    match control(
        socket,
        &ControlRequest::Flush {
            paths: paths.to_vec(),
        },
    )? {
        ControlReply::Flush(_) | ControlReply::Ok => {}
        ControlReply::Error { message, .. } => bail!("Flush refused: {message}"),
        r => bail!("unexpected reply to Flush: {r:?}"),
    }
    loop {
        let st = flush_state(socket, paths)?;
        progress(&st);
        if st.dirty_files == 0 && st.flushing_files == 0 {
            return Ok(Drain {
                secs: t0.elapsed().as_secs_f64(),
                flushed_bytes: st
                    .flushed_bytes_total
                    .saturating_sub(before.flushed_bytes_total),
                dirty_bytes_at_start: before.dirty_bytes,
            });
        }
        if !st.errors.is_empty() && st.flushing_files == 0 && t0.elapsed() > Duration::from_secs(2)
        {
            let list: Vec<String> = st
                .errors
                .iter()
                .take(5)
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect();
            bail!("flush errors: {}", list.join("; "));
        }
        if t0.elapsed() > timeout {
            bail!(
                "drain: {} files / {} bytes still dirty after {timeout:?}",
                st.dirty_files,
                st.dirty_bytes
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Tiers of a [`PrivateDaemon`].
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    pub ram_bytes: u64,
    /// A dir tier: (directory, capacity).
    pub disk: Option<(PathBuf, u64)>,
    /// Appended to the generated configuration (e.g. a `flush:` section).
    pub extra_yaml: String,
}

/// A daemon with a generated configuration; stopped (and its files removed) on drop.
pub struct PrivateDaemon {
    pub socket: PathBuf,
    pub config: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

static DAEMON_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl PrivateDaemon {
    pub fn start(spec: &DaemonSpec) -> Result<PrivateDaemon> {
        let seq = DAEMON_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let base = std::env::temp_dir();
        let dir = base.join(format!("strata-bench-d{pid}-{seq}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let socket = dir.join("daemon.sock");
        let config = dir.join("strata.yaml");
        let mut yaml = format!(
            "daemon:\n  socket: {}\n  shm_prefix: strata-bench-{pid}-{seq}\n  log: warn\ndevices:\n  - name: ram\n    kind: ram\n    capacity: {}MiB\n",
            socket.display(),
            spec.ram_bytes.div_ceil(1 << 20)
        );
        if let Some((path, cap)) = &spec.disk {
            std::fs::create_dir_all(path)
                .with_context(|| format!("cannot create tier dir {}", path.display()))?;
            yaml.push_str(&format!(
                "  - name: disk\n    kind: dir\n    path: {}\n    capacity: {}MiB\n",
                path.display(),
                cap.div_ceil(1 << 20)
            ));
        }
        yaml.push_str(&spec.extra_yaml);
        std::fs::write(&config, yaml)?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let mut cmd = Command::new(crate::strata_exe()?);
        WorkerEnv::Direct { socket: None }.apply(&mut cmd);
        cmd.arg("--config")
            .arg(&config)
            .args(["daemon", "start", "--foreground"]);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().context("cannot spawn a private daemon")?;
        let mut d = PrivateDaemon {
            socket,
            config,
            dir,
            child: Some(child),
        };
        let t0 = Instant::now();
        loop {
            if ping(&d.socket) {
                return Ok(d);
            }
            if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                d.child = None;
                let tail = std::fs::read_to_string(d.dir.join("daemon.log")).unwrap_or_default();
                let tail: Vec<&str> = tail.lines().rev().take(8).collect();
                bail!(
                    "private daemon exited at start ({st}):\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "private daemon did not answer within 60 s (log: {})",
                    d.dir.join("daemon.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn status(&self) -> Result<strata_proto::control::StatusReply> {
        strata_client::status(&self.socket).map_err(|e| anyhow!("{e}"))
    }

    /// Stops the daemon (it drains what is left) and waits for it.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = control(&self.socket, &ControlRequest::Stop);
        let t0 = Instant::now();
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("private daemon did not stop within 120 s; killed");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(())
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("strata bench: warning: {e:#}");
        }
    }
}

/// Is `path` on a tmpfs?
pub fn is_tmpfs(path: &Path) -> bool {
    let Ok(c) = cpath(path) else { return false };
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated, s is valid.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    rc == 0 && s.f_type as i64 == libc::TMPFS_MAGIC
}

/// Is `path` the root of a mount (its device differs from its parent's)?
pub fn is_mountpoint(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Some(parent)) = (std::fs::metadata(path), path.parent()) else {
        return false;
    };
    match std::fs::metadata(parent) {
        Ok(b) => a.dev() != b.dev() || a.ino() == b.ino(),
        Err(_) => false,
    }
}

/// Median, min and max of a non-empty sample.
pub fn median_min_max(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

/// Every key=value of the environment relevant to a report (for the JSON).
pub fn env_summary() -> HashMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("STRATA_"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median_min_max(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_min_max(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
        assert!(median_min_max(&[]).0.is_nan());
    }

    #[test]
    fn raw_io_roundtrip() {
        let dir = std::env::temp_dir().join(format!("strata-bench-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = cpath(&dir.join("f")).unwrap();
        // SAFETY: plain POSIX calls on a private file.
        unsafe {
            let fd = libc::open(
                p.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                0o644,
            );
            assert!(fd >= 0);
            write_all(fd, &[7u8; 10000]).unwrap();
            libc::close(fd);
            let fd = libc::open(p.as_ptr(), libc::O_RDONLY);
            let mut b = vec![0u8; 12000];
            assert_eq!(read_full(fd, &mut b).unwrap(), 10000);
            libc::close(fd);
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(mono_ns() > 0);
    }
}
