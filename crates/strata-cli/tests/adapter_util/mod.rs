//! Helpers for the adapter tests: building libstrata_posix.so next to the
//! `strata` binary, compiling C test programs, running commands under
//! `strata run` (with a hang guard, never a timed assertion), requiring
//! external programs, and comparing directory trees byte for byte.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::{strata_bin, TestDaemon};

/// A generous limit for one command: only a guard against hangs.
pub const HANG_LIMIT: Duration = Duration::from_secs(900);

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn adapter_src(name: &str) -> PathBuf {
    workspace_root().join("tests/adapter").join(name)
}

/// Builds `strata-posix` with the profile of the `strata` binary under test
/// (cargo puts libstrata_posix.so next to it, where `strata run` looks) and
/// returns the library's path.
pub fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| built_lib("strata-posix", "libstrata_posix.so"))
}

/// Builds `libstrata_h5fd.so` (the HDF5 driver) like [`preload_lib`].
pub fn h5fd_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| built_lib("strata-h5fd", "libstrata_h5fd.so"))
}

/// `cargo build -p PACKAGE` with the profile of the `strata` binary under
/// test; the path of its library `file` next to that binary.
fn built_lib(package: &str, file: &str) -> PathBuf {
    let bin = strata_bin();
    let dir = bin
        .parent()
        .expect("strata binary has a directory")
        .to_path_buf();
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root())
        .args(["build", "-p", package]);
    if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run cargo build -p {package}: {e}"));
    assert!(
        out.status.success(),
        "cargo build -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = dir.join(file);
    assert!(
        lib.exists(),
        "{} missing after building {package}",
        lib.display()
    );
    lib
}

/// Whether the test may skip when a program is missing.
pub fn allow_missing() -> bool {
    std::env::var("STRATA_TEST_ALLOW_MISSING").is_ok_and(|v| v == "1")
}

pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Fails (or, with STRATA_TEST_ALLOW_MISSING=1, returns false so the caller
/// skips) when `program` is not installed.
pub fn require(program: &str, package: &str) -> bool {
    if which(program).is_some() {
        return true;
    }
    if allow_missing() {
        eprintln!(
            "SKIPPED: {program} not installed (install {package}); STRATA_TEST_ALLOW_MISSING=1"
        );
        return false;
    }
    panic!("{program} not found: install {package} (apt-get install {package}), or set STRATA_TEST_ALLOW_MISSING=1 to skip");
}

/// Compiles a C program from tests/adapter with the system compiler.
pub fn compile_c(src: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let o = Command::new(&cc)
        .args([
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-g",
            "-o",
        ])
        .arg(out)
        .arg(src)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler {cc}: {e}"));
    assert!(
        o.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_path_buf()
}

/// The result of a command.
pub struct Ran {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub what: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    /// Panics with everything we know unless the command succeeded.
    pub fn assert_ok(&self, ctx: &str) -> &Ran {
        assert!(
            self.ok(),
            "{ctx}: `{}` failed (exit {:?}, signal {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.code,
            self.signal,
            tail(&self.stdout_str(), 200),
            tail(&self.stderr, 200)
        );
        self
    }
}

pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    let from = v.len().saturating_sub(lines);
    v[from..].join("\n")
}

/// Runs `cmd` to completion with stdout/stderr captured through files (no
/// pipe deadlocks), killing it after [`HANG_LIMIT`].
pub fn run_cmd(mut cmd: Command, scratch: &Path) -> Ran {
    use std::os::unix::process::ExitStatusExt;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_path = scratch.join(format!(".out-{}-{n}", std::process::id()));
    let err_path = scratch.join(format!(".err-{}-{n}", std::process::id()));
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > HANG_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} still running after {HANG_LIMIT:?}: hung\n--- stderr ---\n{}",
                tail(&std::fs::read_to_string(&err_path).unwrap_or_default(), 100)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = std::fs::read(&out_path).unwrap_or_default();
    let stderr =
        String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    Ran {
        code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        what,
    }
}

/// A mode of the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Scratch,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Scratch => "scratch",
        }
    }
}

/// `strata --config <daemon> run --mode M --include <include> -- argv…` in `cwd`.
pub fn strata_run_cmd(
    d: &TestDaemon,
    mode: Mode,
    include: &Path,
    cwd: &Path,
    argv: &[&OsStr],
) -> Command {
    preload_lib();
    let mut c = Command::new(strata_bin());
    c.current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env_remove("STRATA_MODE")
        .env_remove("STRATA_INCLUDE")
        .env_remove("STRATA_EXCLUDE")
        .env_remove("STRATA_PRELOAD_LIB")
        .env("STRATA_SOCKET", &d.socket)
        .env("LC_ALL", "C")
        .arg("--config")
        .arg(&d.config)
        .args(["run", "--mode", mode.as_str(), "--include"])
        .arg(include)
        .arg("--")
        .args(argv);
    c
}

pub fn strata_run(d: &TestDaemon, mode: Mode, include: &Path, cwd: &Path, argv: &[&str]) -> Ran {
    let a: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
    run_cmd(strata_run_cmd(d, mode, include, cwd, &a), d.path())
}

/// The same command without strata (the reference run).
pub fn plain_run(cwd: &Path, argv: &[&str], scratch: &Path) -> Ran {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..])
        .current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env("LC_ALL", "C");
    run_cmd(c, scratch)
}

/// `strata flush --wait PATH` against the test daemon.
pub fn flush_wait(d: &TestDaemon, path: &Path) -> Ran {
    let mut c = d.cmd();
    c.args(["flush", "--wait"]).arg(path);
    run_cmd(c, d.path())
}

/// Every regular file under `root` (relative path → bytes), plus directories
/// (relative path → None), read directly from the file system.
pub fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else if ft.is_file() {
                out.insert(
                    rel,
                    Some(std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Asserts two trees are identical (names, kinds, bytes), ignoring names
/// for which `ignore` returns true.
pub fn assert_same_tree(
    got_root: &Path,
    want_root: &Path,
    ignore: &dyn Fn(&str) -> bool,
    ctx: &str,
) {
    let got = tree(got_root);
    let want = tree(want_root);
    let mut problems = Vec::new();
    for (name, w) in &want {
        if ignore(name) {
            continue;
        }
        match got.get(name) {
            None => problems.push(format!("{name}: missing (want {})", describe(w))),
            Some(g) if g != w => problems.push(format!(
                "{name}: got {}, want {}{}",
                describe(g),
                describe(w),
                first_diff(g, w)
            )),
            _ => {}
        }
    }
    for (name, g) in &got {
        if !ignore(name) && !want.contains_key(name) {
            problems.push(format!("{name}: unexpected ({})", describe(g)));
        }
    }
    assert!(
        problems.is_empty(),
        "{ctx}: {} differences between {} and the reference {}:\n  {}",
        problems.len(),
        got_root.display(),
        want_root.display(),
        problems.join("\n  ")
    );
}

fn describe(e: &Option<Vec<u8>>) -> String {
    match e {
        None => "a directory".into(),
        Some(b) => format!("{} bytes", b.len()),
    }
}

fn first_diff(a: &Option<Vec<u8>>, b: &Option<Vec<u8>>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => match a.iter().zip(b.iter()).position(|(x, y)| x != y) {
            Some(i) => format!(" (first difference at offset {i})"),
            None => String::new(),
        },
        _ => String::new(),
    }
}

/// Deterministic bytes (splitmix64).
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        v.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Writes the same file under both roots (at the destination, before the
/// adapter sees it), with the same modification time.
pub fn seed_both(roots: &[&Path], rel: &str, data: &[u8]) {
    for r in roots {
        let p = r.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&p, data).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .unwrap();
    }
}

/// Files under `root` at the destination that are not in `allowed` (name →
/// expected bytes) and hold data: what SCRATCH mode must never produce.
pub fn scratch_leaks(root: &Path, allowed: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut leaks = Vec::new();
    for (name, e) in tree(root) {
        let Some(data) = e else { continue };
        match allowed.get(&name) {
            Some(want) if *want == data => {}
            Some(want) => leaks.push(format!(
                "{name}: a pre-existing file changed at the destination ({} bytes, was {})",
                data.len(),
                want.len()
            )),
            None if data.is_empty() => {}
            None => leaks.push(format!(
                "{name}: {} bytes written at the destination",
                data.len()
            )),
        }
    }
    leaks
}

/// Open MPI refuses to run as root without these; set on the command only.
pub fn mpi_env(c: &mut Command) -> &mut Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    c
}

/// A config with a private socket (in its own directory, outside the tracked
/// one: the adapter never buffers the socket's directory) and small tiers;
/// no daemon is running for it.
pub fn private_config(dir: &Path) -> (PathBuf, PathBuf) {
    let ddir = dir.join("daemon");
    std::fs::create_dir_all(&ddir).unwrap();
    let socket = ddir.join("daemon.sock");
    let tag: String = dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let yaml = format!(
        "daemon:\n  socket: {sock}\n  shm_prefix: strata-mpi{pid}x{tag}\n  log: warn\nplacement:\n  lease_size: 1MiB\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 128MiB\n  - name: disk\n    kind: dir\n    path: {disk}\n    capacity: 256MiB\n",
        sock = socket.display(),
        pid = std::process::id(),
        disk = ddir.join("disk").display()
    );
    let config = dir.join("strata.yaml");
    std::fs::write(&config, yaml).unwrap();
    (config, socket)
}
