//! Quotas (`quotas:`) against a real daemon: a native bucket's puts past its
//! limit fail with `Quota` and change nothing; a SCRATCH program writing
//! past its prefix's limit gets EDQUOT while what it wrote before stays; a
//! DEFAULT program's writes past the limit go to the destination, whole;
//! status and the metrics show the use.

mod adapter_util;
mod common;

use adapter_util::*;
use common::{TestDaemon, Tiers};
use strata_proto::Errno;

/// A daemon with a 1 MiB quota on bucket `capped` and on two prefixes.
fn daemon(scratch: &std::path::Path, default: &std::path::Path) -> TestDaemon {
    let mut d = TestDaemon::configured(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "",
    });
    let mut yaml = std::fs::read_to_string(&d.config).unwrap();
    yaml.push_str(&format!(
        "quotas:\n  - bucket: capped\n    limit: 1MiB\n  - prefix: {}\n    limit: 1MiB\n  - prefix: {}\n    limit: 1MiB\n",
        scratch.display(),
        default.display()
    ));
    std::fs::write(&d.config, yaml).unwrap();
    d.spawn();
    d
}

fn quota_used(d: &TestDaemon, rule_end: &str) -> u64 {
    d.status()
        .quotas
        .iter()
        .find(|q| q.rule.ends_with(rule_end))
        .unwrap_or_else(|| panic!("no quota {rule_end}: {:?}", d.status().quotas))
        .used_bytes
}

#[test]
fn a_bucket_quota_refuses_growth_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = daemon(&tmp.path().join("s"), &tmp.path().join("d"));
    let c = d.client();
    let b = c.bucket("capped").unwrap();
    let kib = |n: usize| vec![7u8; n << 10];
    b.put("a", &kib(600)).unwrap();
    let e = b.put("b", &kib(600)).unwrap_err();
    assert_eq!(e.errno, Errno::Quota, "{e}");
    assert!(e.to_string().contains("quota"), "{e}");
    // Nothing was created by the refused put.
    assert!(b.get("b").is_err());
    // Appending past the limit is refused too; within it, allowed.
    let e = b.put_at("a", 600 << 10, &kib(500)).unwrap_err();
    assert_eq!(e.errno, Errno::Quota, "{e}");
    b.put_at("a", 600 << 10, &kib(400)).unwrap();
    assert_eq!(quota_used(&d, "capped"), 1000 << 10);
    // Replacing with fewer bytes needs no room; deleting gives it back.
    b.put("a", &kib(100)).unwrap();
    b.put("b", &kib(900)).unwrap();
    b.delete("a").unwrap();
    b.delete("b").unwrap();
    assert_eq!(quota_used(&d, "capped"), 0);
    b.put("c", &kib(1024)).unwrap();
    // Other buckets are not limited.
    let free = c.bucket("capped2").unwrap();
    free.put("x", &kib(4096)).unwrap();
    // The table shows it.
    let out = d.cmd().arg("status").output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("bucket capped") && table.contains("QUOTA"),
        "{table}"
    );
}

/// Writes N files of 400 KiB under argv[1]; reports the errno of the first
/// failing write and checks every file written before it.
const WRITER_PY: &str = r#"
import errno, os, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
done = 0
for i in range(6):
    data = bytes([i + 1]) * (400 << 10)
    try:
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(data)
        done += 1
    except OSError as e:
        print(f"failed at {i}: {errno.errorcode.get(e.errno, e.errno)}")
        break
for i in range(done):
    with open(os.path.join(d, f"f{i}"), "rb") as f:
        if f.read() != bytes([i + 1]) * (400 << 10):
            sys.exit(f"f{i} differs")
print(f"wrote {done}")
"#;

#[test]
fn files_past_a_prefix_quota_fail_in_scratch_and_go_through_in_default() {
    if !require("python3", "python3") {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("strata-quota-")
        .tempdir()
        .unwrap();
    let scratch = tmp.path().join("s");
    let default = tmp.path().join("d");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::create_dir_all(&default).unwrap();
    let script = tmp.path().join("writer.py");
    std::fs::write(&script, WRITER_PY).unwrap();
    let d = daemon(&scratch, &default);

    // SCRATCH: the third 400 KiB file passes 1 MiB: EDQUOT; two stay whole.
    let r = strata_run(
        &d,
        Mode::Scratch,
        &scratch,
        &scratch,
        &[
            "python3",
            script.to_str().unwrap(),
            scratch.join("out").to_str().unwrap(),
        ],
    );
    r.assert_ok("writer under SCRATCH with a 1 MiB quota");
    let out = r.stdout_str();
    assert!(out.contains("failed at 2: EDQUOT"), "{out}");
    assert!(out.contains("wrote 2"), "{out}");
    assert!(quota_used(&d, "/s") <= 1 << 20);

    // DEFAULT: all six files are written; past the quota they go to the
    // destination, and the destination holds every byte after the drain.
    let r = strata_run(
        &d,
        Mode::Default,
        &default,
        &default,
        &[
            "python3",
            script.to_str().unwrap(),
            default.join("out").to_str().unwrap(),
        ],
    );
    r.assert_ok("writer under DEFAULT with a 1 MiB quota");
    assert!(r.stdout_str().contains("wrote 6"), "{}", r.stdout_str());
    for i in 0..6u8 {
        let got = std::fs::read(default.join("out").join(format!("f{i}"))).unwrap();
        assert!(
            got == vec![i + 1; 400 << 10],
            "f{i} at the destination differs"
        );
    }
    assert!(quota_used(&d, "/d") <= 1 << 20, "{}", quota_used(&d, "/d"));
    assert!(d.status().files.write_through_bytes_total > 0);
}
