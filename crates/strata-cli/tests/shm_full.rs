//! Issue 12 item 7: a full /dev/shm must never end in SIGBUS. The arena's
//! pages are reserved (`fallocate`) before the allocator hands them out; when
//! another process takes the rest of /dev/shm the RAM tier stops growing and
//! writes spill to the next tier.
//!
//! Runs in a private mount namespace (`unshare -m`, root) with a small tmpfs
//! on /dev/shm, so the machine's /dev/shm is never filled; skipped (with a
//! message) where that is not possible.

mod common;
use common::strata_bin;
use std::process::Command;

#[test]
fn a_full_dev_shm_spills_instead_of_sigbus() {
    // SAFETY: geteuid/getuid take no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0
        || Command::new("unshare")
            .args(["-m", "true"])
            .status()
            .map(|s| !s.success())
            .unwrap_or(true)
    {
        eprintln!("skipped: needs root and unshare -m (a private /dev/shm)");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("strata-shmfull-")
        .tempdir()
        .unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("rt")).unwrap();
    std::fs::create_dir_all(d.join("tracked")).unwrap();
    let cfg = d.join("strata.yaml");
    std::fs::write(
        &cfg,
        format!(
            "daemon:\n  socket: {sock}\n  shm_prefix: strata-shmfull-test\n  log: info\nplacement:\n  lease_size: 1MiB\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 2800MiB\n  - name: disk\n    kind: dir\n    path: {tier}\n    capacity: 2GiB\n",
            sock = d.join("rt/daemon.sock").display(),
            tier = d.join("tier").display()
        ),
    )
    .unwrap();
    let script = r#"
set -eu
mount -t tmpfs -o size=3000m tmpfs /dev/shm
S="$STRATA --config $CFG"
$S daemon start --foreground > "$D/daemon.out" 2>&1 &
i=0; while [ ! -S "$D/rt/daemon.sock" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
# the reserver reserves the first 2 GiB at once (then ahead of use); another
# process takes most of what is left
fallocate -l 900M /dev/shm/hog
head -c 2300M /dev/urandom > "$D/in.bin"
$S run --quiet --mode scratch --include "$D/tracked" -- cp "$D/in.bin" "$D/tracked/out.bin"
$S run --quiet --mode scratch --include "$D/tracked" -- sha256sum "$D/tracked/out.bin" | cut -d' ' -f1
sha256sum "$D/in.bin" | cut -d' ' -f1
$S status > "$D/status.out" 2>&1 || true
$S daemon stop --discard > /dev/null 2>&1 || true
wait
"#;
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("STRATA", strata_bin())
        .env("CFG", &cfg)
        .env("D", d)
        .env("STRATA_LOG", "info")
        .env_remove("STRATA_SOCKET")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(d.join("daemon.out")).unwrap_or_default();
    let status = std::fs::read_to_string(d.join("status.out")).unwrap_or_default();
    let ctx = format!("exit {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}\n--- daemon ---\n{log}\n--- status ---\n{status}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{ctx}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{ctx}");
    assert_eq!(
        lines[0], lines[1],
        "bytes read back through strata differ from the input\n{ctx}"
    );
    assert!(
        log.contains("/dev/shm is full"),
        "the daemon should say the RAM tier stopped growing\n{ctx}"
    );
}
