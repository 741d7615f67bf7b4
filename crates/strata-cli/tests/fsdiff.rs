//! The differential file-system tester (issue 12, "beyond the list"):
//! tests/fsdiff/fsdiff.py runs a seeded random sequence of POSIX operations
//! (open flags, read/write/pread/pwrite at random offsets and sizes,
//! truncate, fsync, rename of files and directories, unlink, mkdir/rmdir,
//! chmod, utime, listdir, stat, mmap reads, O_EXCL creates, dup, exec of a
//! written script) from two processes, in a plain directory and under
//! `strata run`; tests/fsdiff/run.py compares every result line, checks the
//! destination after a drain (DEFAULT), and shrinks a failing sequence to a
//! minimal one. A bounded run here; long runs by hand (docs/FSDIFF.md).

mod adapter_util;
mod common;

use adapter_util::*;
use common::TestDaemon;
use std::path::Path;
use std::process::Command;

fn sweep(mode: &str, seeds: &str, ops: u32) {
    if !require("python3", "python3") {
        return;
    }
    preload_lib();
    let d = TestDaemon::start();
    let work = tempfile::Builder::new().prefix("strata-fsdiff-").tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fsdiff/run.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--strata")
        .arg(common::strata_bin())
        .arg("--config")
        .arg(&d.config)
        .args(["--mode", mode, "--seeds", seeds, "--ops", &ops.to_string(), "--work"])
        .arg(work.path())
        .env("STRATA_SOCKET", &d.socket)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "differential tester ({mode}, seeds {seeds}):\n{text}\n--- daemon log ---\n{}", tail(&d.log(), 30));
}

#[test]
fn fsdiff_default_mode() {
    sweep("default", "1:40", 300);
}

#[test]
fn fsdiff_scratch_mode() {
    sweep("scratch", "1:40", 300);
}
