//! Issue 12, small CLI items: a closed stdout ends the command quietly
//! (item 16), the daemon log has no colour codes (item 17).

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

mod common;
use common::{strata_bin, TestDaemon};

/// A pipe whose read end is already closed: the first write gets EPIPE.
fn closed_pipe() -> OwnedFd {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a live [c_int; 2] that pipe fills.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is the pipe's read end, opened above and owned by nobody else.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is the pipe's write end, opened above; ownership moves to the OwnedFd.
    unsafe { OwnedFd::from_raw_fd(fds[1]) }
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let d = TestDaemon::start();
    for args in [
        vec!["config", "default"],
        vec!["status"],
        vec!["drain", "status"],
    ] {
        let out = Command::new(strata_bin())
            .arg("--config")
            .arg(&d.config)
            .args(&args)
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn the_daemon_log_has_no_colour_codes() {
    // `log: info` so the daemon logs its start line into <socket>.log.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("run/daemon.sock");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, format!("daemon:\n  socket: {}\n  shm_prefix: strata-ansi{}\n  log: info\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 32MiB\n", sock.display(), std::process::id())).unwrap();
    // STRATA_LOG (set to warn by scripts/test.sh) would override the config.
    let st = Command::new(strata_bin())
        .arg("--config")
        .arg(&cfg)
        .env("STRATA_LOG", "info")
        .args(["daemon", "start"])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new(strata_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["daemon", "stop"])
        .status()
        .unwrap();
    assert!(st.success());
    let log = std::fs::read_to_string(sock.with_extension("log")).unwrap();
    assert!(log.contains("strata daemon ready"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape in daemon.log: {log:?}"
    );
}

/// Item 12: a native bucket named like a file path is refused with a clear
/// error (it made that file's open fail with EEXIST).
#[test]
fn native_buckets_cannot_take_file_paths() {
    let d = TestDaemon::start();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let e = d
        .client()
        .bucket(p.to_str().unwrap())
        .err()
        .expect("refused");
    assert_eq!(e.errno, strata_proto::Errno::Name, "{e}");
    assert!(e.to_string().contains("files buffered"), "{e}");
    let out = d
        .cmd()
        .args(["put"])
        .arg(&p)
        .args(["blob", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    // The file itself is untouched and can be created through the file model.
    let c = d.client();
    let fl = strata_client::file::OpenFlags {
        read: true,
        write: true,
        create: true,
        excl: true,
        trunc: false,
    };
    let a = c
        .file_open(
            p.to_str().unwrap(),
            fl,
            0o644,
            strata_client::file::Persist::Scratch,
            1 << 20,
        )
        .expect("file create");
    c.file_close(a.id).unwrap();
    // Opening the existing file's bucket (inspection) still works.
    assert!(c.bucket_open(p.to_str().unwrap()).is_ok());
}
