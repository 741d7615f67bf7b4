//! Issue 12 item 5: files changed outside strata while a daemon outlives
//! the runs that use it. A clean record is checked against the destination
//! (inode, device, size, mtime) before it is served; a dirty one whose
//! destination file was replaced keeps both versions and is reported.

mod adapter_util;
mod common;

use std::path::Path;

use adapter_util::*;
use common::{TestDaemon, Tiers};
use strata_client::file::{OpenFlags, Persist};

fn sh(d: &TestDaemon, dir: &Path, script: &str) -> String {
    strata_run(d, Mode::Default, dir, dir, &["sh", "-c", script])
        .assert_ok(script)
        .stdout_str()
}

/// Open for reading and writing, no create.
const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: false,
    excl: false,
    trunc: false,
};

/// A daemon without background flushes (writes stay dirty until `flush
/// --wait`) and a directory for the test's files.
fn dirty_daemon(prefix: &str) -> (TestDaemon, tempfile::TempDir) {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "flush:\n  interval: 1h\n",
    });
    let tmp = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    (d, tmp)
}

#[test]
fn edits_replacements_and_removals_outside_strata_are_seen_by_the_next_run() {
    let d = TestDaemon::start();
    let tmp = tempfile::Builder::new()
        .prefix("strata-outside-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("pfs");
    std::fs::create_dir(&dir).unwrap();
    sh(
        &d,
        &dir,
        "seq 1 1000 > same-size && echo original > replaced && echo doomed > removed && seq 1 5000 > kept && chmod 600 kept",
    );
    // Each file now has a clean record in the daemon (the run drained).
    assert_eq!(d.status().files.dirty_files, 0);
    let kept_before = d.status().files.read_hit_bytes_total;
    assert_eq!(
        sh(&d, &dir, "cat kept | wc -c"),
        format!("{}\n", std::fs::read(dir.join("kept")).unwrap().len())
    );
    assert!(
        d.status().files.read_hit_bytes_total > kept_before,
        "an unchanged file should be served from the buffer"
    );

    // Outside strata: an in-place edit of the same size, a replacement by
    // rename, a removal, a chmod.
    let same = std::fs::read(dir.join("same-size")).unwrap();
    let mut edited = same.clone();
    edited[0] = b'X';
    std::thread::sleep(std::time::Duration::from_millis(20)); // a later mtime
    std::fs::write(dir.join("same-size"), &edited).unwrap();
    std::fs::write(dir.join("replaced.tmp"), b"replaced outside\n").unwrap();
    std::fs::rename(dir.join("replaced.tmp"), dir.join("replaced")).unwrap();
    std::fs::remove_file(dir.join("removed")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("kept"), std::fs::Permissions::from_mode(0o640)).unwrap();
    }

    let out = sh(
        &d,
        &dir,
        "head -c 5 same-size; echo; cat replaced; cat removed 2>/dev/null || echo removed: gone; ls; stat -c %a kept; echo appended >> replaced; echo appended >> same-size",
    );
    assert_eq!(
        out,
        "X\n2\n3\nreplaced outside\nremoved: gone\nkept\nreplaced\nsame-size\n640\n"
    );
    // What the runs wrote went on top of the outside versions.
    assert_eq!(
        std::fs::read(dir.join("replaced")).unwrap(),
        b"replaced outside\nappended\n"
    );
    let mut want = edited.clone();
    want.extend_from_slice(b"appended\n");
    assert_eq!(std::fs::read(dir.join("same-size")).unwrap(), want);
    assert!(!dir.join("removed").exists());
    let f = d.status().files;
    assert!(
        f.outside_changes_total >= 3,
        "three cached copies should have been dropped: {f:?}"
    );
    assert_eq!(f.conflicts_total, 0);
}

#[test]
fn a_dirty_file_replaced_outside_keeps_both_versions_and_is_reported() {
    let (d, tmp) = dirty_daemon("strata-conflict-");
    let f = tmp.path().join("data");
    std::fs::write(&f, b"0123456789\n").unwrap();
    let c = d.client();
    let fl = RW;
    let p = f.to_str().unwrap();
    let a = c
        .file_open(p, fl, 0o644, Persist::Default, 1 << 20)
        .unwrap();
    c.file_write(a.id, 0, b"AB").unwrap();
    // Replaced outside (an editor's save: write aside, rename over) while
    // strata holds an unflushed write.
    let aside = tmp.path().join("data.new");
    std::fs::write(&aside, b"edited outside\n").unwrap();
    std::fs::rename(&aside, &f).unwrap();
    c.file_close(a.id).unwrap();
    flush_wait(&d, tmp.path()).assert_ok("flush --wait");
    let kept: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("data.strata-outside-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::read(tmp.path().join(&kept[0])).unwrap(),
        b"edited outside\n",
        "the outside version is kept intact"
    );
    // strata's version of the file (its page, filled from what the
    // destination held at the open, then written) lands at the path.
    assert_eq!(std::fs::read(&f).unwrap(), b"AB23456789\n");
    let st = d.status().files;
    assert_eq!(st.conflicts_total, 1, "{st:?}");
    let log = std::fs::read_to_string(d.path().join("daemon.log")).unwrap_or_default();
    assert!(
        log.contains("CONFLICT") && log.contains(&kept[0]),
        "daemon.log should name both versions:\n{log}"
    );
}

#[test]
fn a_dirty_file_edited_in_place_outside_keeps_both_versions_and_is_reported() {
    let (d, tmp) = dirty_daemon("strata-inplace-");
    let c = d.client();
    let fl = RW;
    // "grown": appended to outside; "same-size": one byte changed outside
    // (same inode, same size, a later mtime).
    for name in ["grown", "same-size"] {
        let f = tmp.path().join(name);
        std::fs::write(&f, b"0123456789\n").unwrap();
        let a = c
            .file_open(f.to_str().unwrap(), fl, 0o644, Persist::Default, 1 << 20)
            .unwrap();
        c.file_write(a.id, 0, b"AB").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20)); // a later mtime
        {
            use std::io::{Seek, Write};
            let mut o = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
            if name == "grown" {
                o.seek(std::io::SeekFrom::End(0)).unwrap();
                o.write_all(b"outside\n").unwrap();
            } else {
                o.seek(std::io::SeekFrom::Start(5)).unwrap();
                o.write_all(b"X").unwrap();
            }
        }
        c.file_close(a.id).unwrap();
    }
    flush_wait(&d, tmp.path()).assert_ok("flush --wait");
    let mut kept: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".strata-outside-"))
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept[0].starts_with("grown.") && kept[1].starts_with("same-size."));
    assert_eq!(
        std::fs::read(tmp.path().join(&kept[0])).unwrap(),
        b"0123456789\noutside\n"
    );
    assert_eq!(
        std::fs::read(tmp.path().join(&kept[1])).unwrap(),
        b"01234X6789\n"
    );
    // strata's version (its page, as read at the open, then written).
    assert_eq!(
        std::fs::read(tmp.path().join("same-size")).unwrap(),
        b"AB23456789\n"
    );
    assert_eq!(d.status().files.conflicts_total, 2);
}

#[test]
fn times_set_through_strata_are_not_a_conflict() {
    // A flushed file whose times are set through strata, then written
    // again: the destination's new mtime is strata's own.
    let (d, tmp) = dirty_daemon("strata-ours-");
    let dir = tmp.path();
    let script = r#"
import os
with open("timed", "w") as f:
    f.write("x" * 10000); f.flush(); os.fsync(f.fileno())
    os.utime("timed", (1000000, 2000000))
    f.write("more\n"); f.flush(); os.fsync(f.fileno())
    os.utime(f.fileno(), (3000000, 4000000))
    f.write("end\n")
"#;
    strata_run(&d, Mode::Default, dir, dir, &["python3", "-c", script]).assert_ok("python");
    flush_wait(&d, dir).assert_ok("flush --wait");
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["timed"]);
    assert_eq!(d.status().files.conflicts_total, 0);
    let mut want = vec![b'x'; 10000];
    want.extend_from_slice(b"more\nend\n");
    assert_eq!(std::fs::read(dir.join("timed")).unwrap(), want);
}
