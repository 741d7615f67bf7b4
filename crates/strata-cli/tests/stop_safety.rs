//! Issue 12 item 8: `strata daemon stop` never drops unpersisted data
//! without being asked. What the destination does not take is kept on a
//! non-volatile tier through the journal (exit 2, files named) and the next
//! daemon flushes it; with nowhere to keep it the stop is refused (exit 1,
//! the daemon serves on) until `--discard`.

use std::path::Path;
use std::time::{Duration, Instant};

use strata_client::file::{OpenFlags, Persist};

mod common;
use common::{TestDaemon, Tiers};

/// No background flush before the test breaks the destination.
const GIVE_UP: &str = "flush:\n  interval: 1h\n  stop_give_up: 1s\n";

/// Writes a DEFAULT file through the daemon (flushed later).
fn write_file(d: &TestDaemon, path: &Path, data: &[u8]) {
    let c = d.client();
    let fl = OpenFlags {
        read: false,
        write: true,
        create: true,
        excl: false,
        trunc: true,
    };
    let a = c
        .file_open(path.to_str().unwrap(), fl, 0o644, Persist::Default, 1 << 20)
        .unwrap();
    c.file_write(a.id, 0, data).unwrap();
    c.file_close(a.id).unwrap();
}

/// A daemon with a RAM tier only (nowhere non-volatile to keep data) and
/// an empty destination directory `pfs` in a fresh temporary directory.
fn ram_only_daemon(
    extra_yaml: &'static str,
) -> (TestDaemon, tempfile::TempDir, std::path::PathBuf) {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml,
    });
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("pfs");
    std::fs::create_dir(&dir).unwrap();
    (d, base, dir)
}

/// The destination directory becomes a regular file: every open fails (ENOTDIR).
fn break_destination(dir: &Path) -> std::path::PathBuf {
    let away = dir.with_extension("away");
    std::fs::rename(dir, &away).unwrap();
    std::fs::write(dir, b"not a directory").unwrap();
    away
}

fn wait_exit(child: &mut std::process::Child) {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the daemon did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn unpersistable_data_is_kept_in_the_journal_and_flushed_by_the_next_daemon() {
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: GIVE_UP,
    });
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("pfs");
    std::fs::create_dir(&dir).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let f = dir.join("checkpoint");
    write_file(&d, &f, &data);
    let away = break_destination(&dir);
    let out = d.cmd().args(["daemon", "stop"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout {} stderr {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains(f.to_str().unwrap()) && err.contains("kept"),
        "{err}"
    );
    wait_exit(d.child.as_mut().unwrap());
    d.child = None;
    // The destination comes back; the next daemon flushes the kept data.
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&away, &dir).unwrap();
    d.spawn();
    let out = d
        .cmd()
        .args(["drain", "wait", "--timeout", "120"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&f).unwrap(),
        data,
        "every byte arrived after the restart"
    );
}

#[test]
fn with_nowhere_to_keep_it_the_stop_is_refused_until_discard() {
    let (mut d, _base, dir) = ram_only_daemon(GIVE_UP);
    let f = dir.join("only-in-ram");
    write_file(&d, &f, b"precious");
    let _away = break_destination(&dir);
    let out = d.cmd().args(["daemon", "stop"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("did not stop")
            && err.contains(f.to_str().unwrap())
            && err.contains("--discard"),
        "{err}"
    );
    // Still serving, the data still there.
    let c = d.client();
    let a = c
        .file_stat_path(f.to_str().unwrap())
        .unwrap()
        .expect("the record is still there");
    let mut buf = [0u8; 8];
    assert_eq!(c.file_read(a.id, 0, &mut buf).unwrap(), 8);
    assert_eq!(&buf, b"precious");
    drop(c);
    let out = d
        .cmd()
        .args(["daemon", "stop", "--discard"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("discarded") && err.contains(f.to_str().unwrap()),
        "{err}"
    );
    wait_exit(d.child.as_mut().unwrap());
    d.child = None;
}

#[test]
fn a_clean_stop_reports_nothing_and_exits_zero() {
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: GIVE_UP,
    });
    let base = tempfile::tempdir().unwrap();
    let f = base.path().join("fine");
    write_file(&d, &f, b"fine");
    let out = d.cmd().args(["daemon", "stop"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "strata daemon stopped"
    );
    wait_exit(d.child.as_mut().unwrap());
    d.child = None;
    assert_eq!(std::fs::read(&f).unwrap(), b"fine");
}

/// `strata flush --wait` after the destination was put right judges by a
/// fresh attempt: the failure a previous flush recorded is not its verdict
/// (it stopped at that stale error before the retry ran).
#[test]
fn flush_wait_after_the_destination_is_put_right_succeeds() {
    let (d, _base, dir) = ram_only_daemon("flush:\n  interval: 1h\n");
    let f = dir.join("later");
    write_file(&d, &f, b"persisted once possible");
    let away = break_destination(&dir);
    for round in 0..3 {
        let out = d.cmd().args(["flush", "--wait"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
        assert!(err.contains(f.to_str().unwrap()), "round {round}: {err}");
    }
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&away, &dir).unwrap();
    let out = d.cmd().args(["flush", "--wait"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&f).unwrap(), b"persisted once possible");
}
