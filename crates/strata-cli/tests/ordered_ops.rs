//! Per-file destination operations happen in program order: a sequence of
//! creates, writes, truncates, renames and unlinks run under `strata run`
//! (DEFAULT mode) ends at the destination exactly as without strata, with
//! the flusher running eagerly (1 ms interval) so that flushes interleave
//! with the namespace operations; and a file unlinked before it was flushed
//! never reaches the destination (no flush event names it, a watcher polling
//! the directory never sees it).

mod adapter_util;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use adapter_util::*;
use common::{TestDaemon, Tiers};

const OPS_PY: &str = r#"
import os, time
def w(p, data, flags=os.O_CREAT | os.O_WRONLY | os.O_TRUNC):
    fd = os.open(p, flags, 0o644); os.write(fd, data); os.close(fd)
for round in range(20):
    # write to a temporary name, then rename over the final one
    w(f"tmp.{round}", b"v%d " % round * 3000)
    time.sleep(0.002)
    os.rename(f"tmp.{round}", "final")
    # a scratch file created, written and removed
    w(f"gone.{round}", b"never persisted" * 100)
    os.unlink(f"gone.{round}")
    # truncate then write again
    w("trunc", os.urandom(1) * 200_000)
    os.truncate("trunc", 1000 + round)
    fd = os.open("trunc", os.O_WRONLY | os.O_APPEND); os.write(fd, b"tail%d" % round); os.close(fd)
    # a rename chain
    w("chain.a", b"link %d" % round)
    os.rename("chain.a", "chain.b")
    time.sleep(0.001)
    os.rename("chain.b", "chain.c")
print("ops done")
"#;

const UNLINK_PY: &str = r#"
import os
for i in range(50):
    p = f"short.{i}"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * (1 << 20))
    os.close(fd)
    if i % 2:
        # create, write, rename, unlink: neither name may ever appear
        os.rename(p, f"moved.{i}")
        p = f"moved.{i}"
    os.unlink(p)
fd = os.open("kept", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(fd, b"kept")
os.close(fd)
"#;

#[test]
fn namespace_operations_reach_the_destination_in_program_order() {
    if !require("python3", "python3") {
        return;
    }
    let d = TestDaemon::start_with(Tiers {
        ram: "256MiB",
        disk: Some("512MiB"),
        extra_yaml: "flush:\n  interval: 1ms\n",
    });
    let base = tempfile::tempdir().unwrap();
    let (tracked, twin) = (base.path().join("tracked"), base.path().join("twin"));
    std::fs::create_dir_all(&tracked).unwrap();
    std::fs::create_dir_all(&twin).unwrap();
    // os.urandom differs between runs: compare the deterministic files exactly, `trunc` by shape.
    strata_run(
        &d,
        Mode::Default,
        &tracked,
        &tracked,
        &["python3", "-c", OPS_PY],
    )
    .assert_ok("ops under strata");
    plain_run(&twin, &["python3", "-c", OPS_PY], d.path()).assert_ok("ops without strata");
    let (got, want) = (tree(&tracked), tree(&twin));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "same names at the destination"
    );
    for name in ["final", "chain.c"] {
        assert_eq!(got[name], want[name], "{name}");
    }
    let t = got["trunc"].as_ref().unwrap();
    assert_eq!(t.len(), 1019 + 6, "trunc: truncated, then appended");
    assert!(t.ends_with(b"tail19"));
}

#[test]
fn a_file_unlinked_before_its_flush_never_reaches_the_destination() {
    if !require("python3", "python3") {
        return;
    }
    // No background flush: whatever is unlinked is unlinked before any flush.
    let d = TestDaemon::start_with(Tiers {
        ram: "256MiB",
        disk: Some("512MiB"),
        extra_yaml: "flush:\n  interval: 1h\n",
    });
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    // Watch the destination directory while the program runs.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = {
        let (stop, dir) = (stop.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            // Bounded by the test: stops when asked.
            while !stop.load(Ordering::SeqCst) {
                for e in std::fs::read_dir(&dir).unwrap().flatten() {
                    seen.insert(e.file_name().to_string_lossy().into_owned());
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            seen
        })
    };
    strata_run(&d, Mode::Default, &dir, &dir, &["python3", "-c", UNLINK_PY])
        .assert_ok("unlinks under strata");
    stop.store(true, Ordering::SeqCst);
    let seen = seen.join().unwrap();
    assert!(
        seen.iter()
            .all(|n| !n.starts_with("short.") && !n.starts_with("moved.")),
        "an unlinked, never flushed file appeared at the destination: {seen:?}"
    );
    assert_eq!(std::fs::read(dir.join("kept")).unwrap(), b"kept");
    let log = std::fs::read_to_string(d.socket.with_extension("sock.drain.log"))
        .or_else(|_| std::fs::read_to_string(format!("{}.drain.log", d.socket.display())))
        .unwrap_or_default();
    assert!(
        !log.contains("short.") && !log.contains("moved."),
        "no flush event names an unlinked file:\n{log}"
    );
    assert!(
        log.contains("kept"),
        "the drain log records the kept file:\n{log}"
    );
}
