//! `flush.verify` and the drain commands against a real daemon: every
//! flushed page is read back from the destination and its CRC32C compared
//! with the buffer's, and `strata drain status --json` reports `verified`
//! per persisted file; WORKFLOW files are not the flusher's business (not
//! listed, never written) until they are staged out, after which `drain
//! status` lists them and `drain wait` waits for them like DEFAULT files.
//! Background flushing is off: everything reaches the destination because a
//! command asked for it.

mod adapter_util;
mod common;

use std::path::Path;
use std::process::Command;

use adapter_util::*;
use common::{TestDaemon, Tiers};
use serde_json::Value;

const WRITER_PY: &str = r#"
import os, sys
d = sys.argv[1]
for name, n, seed in (("a", 5000, 1), ("b", 3 << 20, 2), ("c", (1 << 20) + 17, 3)):
    data = bytes((i * seed + (i >> 10)) % 253 for i in range(n))
    fd = os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)
"#;

fn expected(name: &str) -> Vec<u8> {
    let (n, seed) = match name {
        "a" => (5000usize, 1usize),
        "b" => (3 << 20, 2),
        "c" => ((1 << 20) + 17, 3),
        _ => unreachable!(),
    };
    (0..n)
        .map(|i| ((i * seed + (i >> 10)) % 253) as u8)
        .collect()
}

/// Runs the writer under the adapter in `mode`, writing a, b, c into `dir`.
fn write_files(d: &TestDaemon, dir: &Path, mode: &str) {
    let mut c = Command::new("python3");
    c.arg("-c")
        .arg(WRITER_PY)
        .arg(dir)
        .env("LD_PRELOAD", preload_lib())
        .env("STRATA_CONFIG", &d.config)
        .env("STRATA_SOCKET", &d.socket)
        .env("STRATA_INCLUDE", dir)
        .env("STRATA_MODE", mode);
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "writer ({mode}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn drain_json(d: &TestDaemon, path: &Path) -> Value {
    let out = d
        .cmd()
        .args(["drain", "status", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn drain_wait(d: &TestDaemon, path: &Path) {
    let out = d
        .cmd()
        .args(["drain", "wait", "--timeout", "300"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drain wait {}: {} {}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn paths(v: &Value) -> Vec<String> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn verified_flushes_and_staged_out_workflow_files_in_drain_status() {
    if !require("python3", "python3") {
        return;
    }
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "flush:\n  enabled: false\n  verify: true\n",
    });
    let base = tempfile::tempdir().unwrap();
    let (def, wf) = (base.path().join("default"), base.path().join("workflow"));
    std::fs::create_dir(&def).unwrap();
    std::fs::create_dir(&wf).unwrap();
    write_files(&d, &def, "default");
    write_files(&d, &wf, "workflow");

    // Only the DEFAULT files are pending; the WORKFLOW ones are not listed.
    let v = drain_json(&d, base.path());
    let want: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| def.join(n).to_str().unwrap().to_string())
        .collect();
    assert_eq!(paths(&v), want, "{v:#}");
    assert_eq!(v["dirty_files"], 3, "{v:#}");
    assert!(v["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["verified"] == false));

    // drain wait over both directories waits for the DEFAULT files only.
    drain_wait(&d, base.path());
    let v = drain_json(&d, base.path());
    for f in v["files"].as_array().unwrap() {
        assert_eq!(
            (f["state"].as_str(), f["verified"].as_bool()),
            (Some("persisted"), Some(true)),
            "{f:#}"
        );
    }
    for n in ["a", "b", "c"] {
        assert_eq!(std::fs::read(def.join(n)).unwrap(), expected(n), "{n}");
        assert!(
            !wf.join(n).exists(),
            "WORKFLOW file {n} reached the destination before stage-out"
        );
    }
    let table = d
        .cmd()
        .args(["drain", "status"])
        .arg(&def)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert_eq!(table.matches("persisted (verified)").count(), 3, "{table}");

    // Stage-out (without waiting): the WORKFLOW files join the drain status
    // and `drain wait` waits for them.
    let out = d
        .cmd()
        .args(["stage-out", "--no-wait", "-q"])
        .arg(&wf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stage-out: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = drain_json(&d, &wf);
    assert_eq!(paths(&v).len(), 3, "staged-out files are listed: {v:#}");
    drain_wait(&d, &wf);
    let v = drain_json(&d, &wf);
    assert_eq!(v["persisted_files"], 3, "{v:#}");
    for f in v["files"].as_array().unwrap() {
        assert_eq!(f["verified"], true, "{f:#}");
    }
    for n in ["a", "b", "c"] {
        assert_eq!(
            std::fs::read(wf.join(n)).unwrap(),
            expected(n),
            "{n} after stage-out"
        );
    }
    let st = d.status();
    assert_eq!(st.files.dirty_files, 0, "{:?}", st.files);
    assert_eq!(
        st.files.flush_errors_total, 0,
        "no read-back mismatch: {:?}",
        st.files
    );
}
