//! `strata drain status|wait|log` against a real daemon, with DEFAULT files
//! written through the adapter (`strata run`). Background flushing is off in
//! this daemon, so files stay dirty until something asks for a flush: the
//! states seen inside the run are deterministic. One shell script runs under
//! `strata run` (before `strata run`'s own drain at the end) and calls the
//! CLI and inspects the destination without the adapter (`LD_PRELOAD=`: the
//! adapter re-adds a *missing* LD_PRELOAD on exec, not an empty one); the
//! test then checks what it recorded.

mod adapter_util;
mod common;

use std::path::Path;

use adapter_util::*;
use common::{strata_bin, TestDaemon, Tiers};
use serde_json::Value;

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The row of `path` in a `drain status --json` answer.
fn row<'a>(v: &'a Value, path: &Path) -> &'a Value {
    let p = path.to_str().unwrap();
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == p)
        .unwrap_or_else(|| panic!("{p} not in {v:#}"))
}

#[test]
fn drain_status_wait_log_with_a_failing_then_fixed_destination() {
    let d = TestDaemon::start_with(Tiers {
        extra_yaml: "flush:\n  enabled: false\n",
        ..Tiers::default()
    });
    let tmp = tempfile::Builder::new()
        .prefix("strata-drain-")
        .tempdir()
        .unwrap();
    let work = tmp.path().join("work");
    let refs = tmp.path().join("ref");
    let out = tmp.path().join("out");
    for dir in [
        work.join("sub"),
        work.join("bad"),
        refs.clone(),
        out.clone(),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let a = bytes(1, 300_000);
    let b = bytes(2, (3 << 20) + 5);
    let c = bytes(3, 1000);
    std::fs::write(refs.join("a"), &a).unwrap();
    std::fs::write(refs.join("b"), &b).unwrap();
    std::fs::write(refs.join("c"), &c).unwrap();

    let script = format!(
        r#"S="env LD_PRELOAD= {bin} --config {cfg}"
P="env LD_PRELOAD="
cat {r}/a > a.bin
cat {r}/b > sub/b.bin
$S drain status --json {w} > {o}/s1.json
$S drain wait --quiet {w} > {o}/w1.out 2>&1; echo $? > {o}/w1.code
$P cp a.bin {o}/a.dest; $P cp sub/b.bin {o}/b.dest
$S drain status --json {w} > {o}/s2.json
cat {r}/c > bad/c.bin
# The adapter created an empty bad/c.bin at the destination; make the
# destination's parent a file (fails also for root).
$P rm -r bad; $P sh -c 'echo not-a-directory > bad'
$S drain wait --quiet {w}/bad > {o}/w2.out 2>&1; echo $? > {o}/w2.code
$S drain status --json {w} > {o}/s3.json
$S drain status {w} > {o}/s3.txt
$P rm bad; $P mkdir bad
$S drain wait {w} > {o}/w3.out 2>&1; echo $? > {o}/w3.code
$P cp bad/c.bin {o}/c.dest
$S drain status --json {w} > {o}/s4.json
$S drain log > {o}/log.path
$S drain log --tail 1000 > {o}/log.txt
"#,
        bin = strata_bin().display(),
        cfg = d.config.display(),
        r = refs.display(),
        w = work.display(),
        o = out.display()
    );
    let r = strata_run(&d, Mode::Default, &work, &work, &["sh", "-c", &script]);
    r.assert_ok("the script under strata run");

    // Written, not flushed: dirty, with every byte dirty and none flushed.
    let s1 = json(&out.join("s1.json"));
    for (p, n) in [
        (work.join("a.bin"), a.len()),
        (work.join("sub/b.bin"), b.len()),
    ] {
        let f = row(&s1, &p);
        assert_eq!(f["state"], "dirty", "{s1:#}");
        assert_eq!(
            (
                f["size_bytes"].as_u64(),
                f["dirty_bytes"].as_u64(),
                f["flushed_bytes_total"].as_u64()
            ),
            (Some(n as u64), Some(n as u64), Some(0)),
            "{s1:#}"
        );
    }
    assert_eq!(s1["dirty_files"], 2, "{s1:#}");
    assert_eq!(s1["truncated"], false);

    // `drain wait` returned 0 once the destination held the written bytes.
    assert_eq!(
        read(&out.join("w1.code")).trim(),
        "0",
        "{}",
        read(&out.join("w1.out"))
    );
    assert!(
        std::fs::read(out.join("a.dest")).unwrap() == a,
        "a.bin at the destination after drain wait"
    );
    assert!(
        std::fs::read(out.join("b.dest")).unwrap() == b,
        "sub/b.bin at the destination after drain wait"
    );
    let s2 = json(&out.join("s2.json"));
    for (p, n) in [
        (work.join("a.bin"), a.len()),
        (work.join("sub/b.bin"), b.len()),
    ] {
        let f = row(&s2, &p);
        assert_eq!(
            (
                f["state"].as_str(),
                f["dirty_bytes"].as_u64(),
                f["flushed_bytes_total"].as_u64()
            ),
            (Some("persisted"), Some(0), Some(n as u64)),
            "{s2:#}"
        );
    }

    // Parent of the destination is a file: failed, with the error; wait exits 1 naming it.
    let cpath = work.join("bad/c.bin");
    assert_eq!(
        read(&out.join("w2.code")).trim(),
        "1",
        "{}",
        read(&out.join("w2.out"))
    );
    let w2 = read(&out.join("w2.out"));
    assert!(
        w2.contains(cpath.to_str().unwrap()) && w2.contains("could not be persisted"),
        "{w2}"
    );
    let s3 = json(&out.join("s3.json"));
    let f = row(&s3, &cpath);
    assert_eq!(f["state"], "failed", "{s3:#}");
    assert!(f["error"].as_str().is_some_and(|e| !e.is_empty()), "{s3:#}");
    assert!(
        f["retry_in_ms"].as_u64().is_some() && f["failures"].as_u64() >= Some(1),
        "{s3:#}"
    );
    assert_eq!(f["dirty_bytes"].as_u64(), Some(c.len() as u64));
    assert_eq!(
        (s3["failed_files"].as_u64(), s3["persisted_files"].as_u64()),
        (Some(1), Some(2)),
        "{s3:#}"
    );
    let table = read(&out.join("s3.txt"));
    let head = table.lines().next().unwrap_or("");
    for col in ["PATH", "STATE", "SIZE", "DIRTY", "FLUSHED", "ERROR"] {
        assert!(head.contains(col), "{table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(cpath.to_str().unwrap()) && l.contains("failed")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .last()
            .unwrap()
            .starts_with("3 files: 2 persisted, 0 dirty, 0 flushing, 1 failed"),
        "{table}"
    );

    // Fixed: wait flushes it again and returns 0; everything persisted.
    assert_eq!(
        read(&out.join("w3.code")).trim(),
        "0",
        "{}",
        read(&out.join("w3.out"))
    );
    assert!(
        std::fs::read(out.join("c.dest")).unwrap() == c,
        "bad/c.bin at the destination after the fix"
    );
    let s4 = json(&out.join("s4.json"));
    assert_eq!(
        (
            s4["persisted_files"].as_u64(),
            s4["dirty_files"].as_u64(),
            s4["failed_files"].as_u64()
        ),
        (Some(3), Some(0), Some(0)),
        "{s4:#}"
    );
    let f = row(&s4, &cpath);
    assert!(
        f["error"].is_null() && f["flushed_bytes_total"].as_u64() == Some(c.len() as u64),
        "{s4:#}"
    );

    // The event log next to the socket.
    let log_path = read(&out.join("log.path")).trim().to_string();
    assert_eq!(log_path, format!("{}.drain.log", d.socket.display()));
    assert_eq!(s4["log_path"].as_str(), Some(log_path.as_str()));
    let log = read(&out.join("log.txt"));
    let kinds = |p: &Path| -> Vec<String> {
        let p = p.to_str().unwrap();
        log.lines()
            .filter(|l| l.split(' ').nth(2) == Some(p))
            .map(|l| {
                assert!(l.split(' ').next().unwrap().parse::<u128>().is_ok(), "{l}");
                l.split(' ').nth(1).unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(
        kinds(&work.join("a.bin")),
        ["ENQUEUE", "DEQUEUE", "DONE"],
        "{log}"
    );
    let kc = kinds(&cpath);
    assert_eq!(kc.first().map(String::as_str), Some("ENQUEUE"), "{log}");
    assert!(
        kc.contains(&"ERROR".to_string()) && kc.last().map(String::as_str) == Some("DONE"),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains(&format!(
            "DONE {} {}",
            work.join("sub/b.bin").display(),
            b.len()
        ))),
        "{log}"
    );
}

#[test]
fn drain_commands_without_files_and_without_a_daemon() {
    let d = TestDaemon::start();
    let mut c = d.cmd();
    c.args(["drain", "status"]);
    let r = run_cmd(c, d.path());
    r.assert_ok("drain status with no files");
    assert!(
        r.stdout_str().starts_with("0 files: 0 persisted"),
        "{}",
        r.stdout_str()
    );
    let mut c = d.cmd();
    c.args(["drain", "wait", "--timeout", "600", "/nonexistent/dir"]);
    run_cmd(c, d.path()).assert_ok("drain wait with nothing to wait for");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = std::process::Command::new(strata_bin());
    c.env("STRATA_SOCKET", tmp.path().join("none.sock"))
        .args(["drain", "status"]);
    let r = run_cmd(c, tmp.path());
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("no daemon"), "{}", r.stderr);
}
