//! Issue 12, item 17: `STRATA_INCLUDE=rel` means what `strata run --include
//! rel` means (it was refused): the directory below the current one, and a
//! child started in another directory agrees (it gets the absolute path).

mod adapter_util;
mod common;

use adapter_util::*;
use common::TestDaemon;
use std::process::Command;

#[test]
fn a_relative_strata_include_is_taken_from_the_current_directory() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-env-")
        .tempdir()
        .unwrap();
    std::fs::create_dir(work.path().join("sub")).unwrap();
    let f = work.path().join("sub/f");
    // SCRATCH: the file lives only in the buffer; `cat`, started in `/`,
    // finds it only if it tracks the same directory.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo hi > sub/f && cd / && cat {} && echo \"$STRATA_INCLUDE\"",
            f.display()
        ))
        .current_dir(work.path())
        .env("LD_PRELOAD", preload_lib())
        .env("STRATA_SOCKET", &d.socket)
        .env("STRATA_MODE", "scratch")
        .env("STRATA_INCLUDE", "sub")
        .env_remove("STRATA_EXCLUDE")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("hi"), "{text}");
    assert_eq!(
        lines.next().map(std::path::PathBuf::from),
        Some(std::fs::canonicalize(work.path()).unwrap().join("sub")),
        "{text}"
    );
    assert!(!f.exists(), "SCRATCH data reached the destination: {text}");
}
