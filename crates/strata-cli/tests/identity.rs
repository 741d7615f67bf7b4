//! Issue 12, items 1, 13, 14: one identity (socket ⇔ shm prefix ⇔ tiers)
//! per daemon under one set of locks, private files, and peers checked by
//! the kernel's credentials. Every test uses its own sockets, prefixes and
//! tiers.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{strata_bin, TestDaemon};

fn is_root() -> bool {
    // SAFETY: geteuid/getuid take no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A config with its own socket under `dir` and the given prefix and tier.
fn write_config(dir: &Path, name: &str, prefix: &str, tier: &Path) -> PathBuf {
    let sock = dir.join(format!("{name}/daemon.sock"));
    let yaml = format!(
        "daemon:\n  socket: {}\n  shm_prefix: {prefix}\n  log: warn\nplacement:\n  lease_size: 1MiB\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 64MiB\n  - name: disk\n    kind: dir\n    path: {}\n    capacity: 128MiB\n",
        sock.display(),
        tier.display()
    );
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(&p, yaml).unwrap();
    p
}

/// Runs `strata --config C daemon start --foreground`; returns its exit
/// status and output when it exits within 30 s (a refused start), or kills it.
fn start_refused(config: &Path) -> (bool, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(strata_bin())
        .arg("--config")
        .arg(config)
        .args(["daemon", "start", "--foreground"])
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(out.reopen().unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        if let Some(st) = child.try_wait().unwrap() {
            return (!st.success(), std::fs::read_to_string(out.path()).unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    (false, "second daemon kept running".into())
}

fn prefix_of(d: &TestDaemon) -> String {
    let y = std::fs::read_to_string(&d.config).unwrap();
    y.lines()
        .find_map(|l| l.trim().strip_prefix("shm_prefix: "))
        .unwrap()
        .to_string()
}

#[test]
fn a_second_daemon_on_the_same_shm_prefix_is_refused_and_touches_nothing() {
    let d = TestDaemon::start();
    let c = d.client();
    let b = c.bucket("mine").unwrap();
    b.put("x", b"first daemon's bytes").unwrap();
    let prefix = prefix_of(&d);
    let other = tempfile::tempdir().unwrap();
    let cfg = write_config(other.path(), "b", &prefix, &other.path().join("disk"));
    let (refused, out) = start_refused(&cfg);
    assert!(
        refused,
        "second daemon on prefix {prefix} must be refused: {out}"
    );
    assert!(
        out.contains("shared-memory prefix") && out.contains(&d.socket.display().to_string()),
        "the refusal names the prefix and the holder: {out}"
    );
    // The first daemon's segments survived the failed start.
    assert!(Path::new(&format!("/dev/shm/{prefix}-arena")).exists());
    assert_eq!(b.get("x").unwrap(), b"first daemon's bytes");
    let c2 = d.client();
    assert_eq!(
        c2.bucket("mine").unwrap().get("x").unwrap(),
        b"first daemon's bytes"
    );
}

#[test]
fn a_second_daemon_on_the_same_tier_directory_is_refused() {
    let d = TestDaemon::start();
    let other = tempfile::tempdir().unwrap();
    let cfg = write_config(
        other.path(),
        "b",
        &format!("strata-idt{}", std::process::id()),
        &d.path().join("disk"),
    );
    let (refused, out) = start_refused(&cfg);
    assert!(
        refused,
        "second daemon on the same tier must be refused: {out}"
    );
    assert!(
        out.contains("tier directory") && out.contains("in use"),
        "{out}"
    );
    // The refused daemon took its own shared-memory prefix first: it leaves
    // no lock file behind.
    let lock = format!("/dev/shm/strata-idt{}.lock", std::process::id());
    assert!(!Path::new(&lock).exists(), "{lock} left behind");
    d.client().bucket("still").unwrap().put("ok", b"1").unwrap();
}

#[test]
fn two_daemons_with_different_sockets_get_different_automatic_prefixes() {
    let mut a = strata_config::Config::machine_default();
    let mut b = strata_config::Config::machine_default();
    a.daemon.socket = Some("/run/user/1/strata/daemon.sock".into());
    b.daemon.socket = Some("/tmp/strata-1/daemon.sock".into());
    assert_ne!(a.resolved_shm_prefix(), b.resolved_shm_prefix());
    assert_eq!(a.resolved_shm_prefix(), a.clone().resolved_shm_prefix());
}

#[test]
fn tier_files_journal_and_directories_are_private() {
    let d = TestDaemon::start();
    let c = d.client();
    c.bucket("p")
        .unwrap()
        .put("x", &vec![7u8; 1 << 20])
        .unwrap();
    let disk = d.path().join("disk");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&disk), 0o700, "tier directory");
    assert_eq!(
        mode(&disk.join("strata-tier.data")),
        0o600,
        "tier data file"
    );
    assert_eq!(mode(&disk.join("strata.journal")), 0o600, "journal");
    assert_eq!(mode(&disk.join("strata.lock")), 0o600, "tier lock");
    assert_eq!(mode(d.socket.parent().unwrap()), 0o700, "runtime directory");
}

#[test]
fn a_tier_file_left_0644_by_an_older_version_is_made_private() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(disk.join("strata-tier.data"), b"").unwrap();
    std::fs::set_permissions(
        disk.join("strata-tier.data"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let cfg = write_config(
        dir.path(),
        "a",
        &format!("strata-idl{}", std::process::id()),
        &disk,
    );
    let sock = dir.path().join("a/daemon.sock");
    let mut child = Command::new(strata_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["daemon", "start", "--foreground"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let (dm, fm) = (m(&disk), m(&disk.join("strata-tier.data")));
    // SAFETY: kill takes plain integers; a pid that is gone is an error return, not undefined behaviour.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert_eq!((dm, fm), (0o700, 0o600));
}

#[test]
fn a_runtime_directory_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to create a directory owned by another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("a");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&run, Some(65534), Some(65534)).unwrap();
    let cfg = write_config(
        dir.path(),
        "a",
        &format!("strata-idr{}", std::process::id()),
        &dir.path().join("disk"),
    );
    let (refused, out) = start_refused(&cfg);
    assert!(
        refused && out.contains("belongs to") && out.contains("65534"),
        "{out}"
    );
    assert!(!run.join("daemon.sock").exists());
}

#[test]
fn shared_memory_of_our_prefix_owned_by_another_user_is_refused_by_name() {
    if !is_root() {
        eprintln!("skipped: needs root to create a segment owned by another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("strata-ids{}", std::process::id());
    let planted = PathBuf::from(format!("/dev/shm/{prefix}-arena"));
    std::fs::write(&planted, b"").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let cfg = write_config(dir.path(), "a", &prefix, &dir.path().join("disk"));
    let (refused, out) = start_refused(&cfg);
    let _ = std::fs::remove_file(&planted);
    assert!(
        refused && out.contains(&format!("{prefix}-arena")) && out.contains("65534"),
        "{out}"
    );
}

#[test]
fn a_client_refuses_a_socket_served_by_another_user() {
    if !is_root() {
        eprintln!("skipped: needs root to listen as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("evil.sock");
    // A listener that binds, then drops to uid 65534 before listen():
    // SO_PEERCRED reports the credentials of listen().
    let py = format!(
        "import os,socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind({:?})\nos.chmod({:?},0o777)\nos.setgid(65534)\nos.setuid(65534)\ns.listen(4)\nprint('ready',flush=True)\nc,_=s.accept()\ntime.sleep(5)\n",
        sock.display().to_string(),
        sock.display().to_string()
    );
    let mut child = Command::new("python3")
        .args(["-c", &py])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let e = strata_client::Client::connect_to(&sock)
        .err()
        .expect("connect must be refused");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(e.errno, strata_proto::Errno::Perm, "{e}");
    assert!(e.to_string().contains("65534"), "{e}");
}
