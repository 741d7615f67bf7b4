//! Issue 12, item 15: the daemon dies (kill -9) while a program runs under
//! `strata run`. Files the program never wrote through the buffer fall
//! back to the destination (they were EIO); files it wrote fail with EIO
//! (their bytes may be only in the dead daemon's buffer: reading the
//! destination would be stale); the loss is said once; the run's summary
//! says the daemon went away instead of "0B written", and the exit status
//! is not 0.

mod adapter_util;
mod common;

use adapter_util::*;
use common::TestDaemon;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

/// Writes a.txt, says "ready", waits for a line on stdin (the test kills
/// the daemon meanwhile), then tries: reading old.txt (at the destination
/// before the run), opening a.txt, creating new.txt; then a new process
/// reads a.txt and old.txt.
const PROGRAM: &str = r#"
import os, sys
with open("a.txt", "w") as f:
    f.write("buffered\n")
print("ready", flush=True)
sys.stdin.readline()
def attempt(what, fn):
    try:
        print(what, "ok", fn(), flush=True)
    except OSError as e:
        print(what, "errno", e.errno, flush=True)
attempt("old", lambda: open("old.txt").read().strip())
attempt("a", lambda: open("a.txt").read().strip())
def create():
    with open("new.txt", "w") as f:
        f.write("after\n")
    return open("new.txt").read().strip()
attempt("new", create)
# a process started after the loss knows what the run wrote (the run's log)
import subprocess
child = "import sys\nfor n in ('a.txt', 'old.txt'):\n    try:\n        print('child', n, 'ok', open(n).read().strip())\n    except OSError as e:\n        print('child', n, 'errno', e.errno)\n"
r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
print(r.stdout.strip(), flush=True)
"#;

#[test]
fn after_the_daemon_dies_unbuffered_files_fall_back_to_the_destination() {
    if !require("python3", "python3") {
        return;
    }
    for mode in [Mode::Scratch, Mode::Default] {
        let mut d = TestDaemon::start();
        let work = tempfile::Builder::new()
            .prefix("strata-loss-")
            .tempdir()
            .unwrap();
        std::fs::write(work.path().join("old.txt"), "persisted\n").unwrap();
        let argv = [OsStr::new("python3"), OsStr::new("-c"), OsStr::new(PROGRAM)];
        let mut child = strata_run_cmd(&d, mode, work.path(), work.path(), &argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{mode:?}");
        d.kill9();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        let st = child.wait().unwrap();
        let ctx = format!("{mode:?}\nstdout:\n{rest}\nstderr:\n{err}");
        assert!(rest.contains("old ok persisted"), "{ctx}");
        assert!(
            rest.contains(&format!("a errno {}", libc::EIO)),
            "a file written through the buffer is not read stale: {ctx}"
        );
        assert!(rest.contains("new ok after"), "{ctx}");
        assert!(
            rest.contains(&format!("child a.txt errno {}", libc::EIO)),
            "a process started after the loss does not read what the run wrote stale: {ctx}"
        );
        assert!(rest.contains("child old.txt ok persisted"), "{ctx}");
        assert_eq!(
            std::fs::read_to_string(work.path().join("new.txt")).unwrap(),
            "after\n",
            "{ctx}"
        );
        assert_eq!(
            err.matches("the strata daemon went away").count(),
            1,
            "said once: {ctx}"
        );
        assert!(err.contains("no summary"), "{ctx}");
        assert!(!err.contains("0B written"), "{ctx}");
        assert_ne!(st.code(), Some(0), "{ctx}");
    }
}
