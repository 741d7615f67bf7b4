//! Two Unix users, each with a daemon on this machine: neither can connect
//! to, map, or read (tiers, journal, log, trace) the other's; a group named
//! in `daemon.group` shares one daemon with its members only.
//!
//! Needs root (it creates users and groups, and runs commands as them with
//! `setpriv`); CI runs as root. Elsewhere it says so and does nothing.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn strata_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Users and a group made for this test, removed when dropped.
struct Accounts {
    users: Vec<String>,
    group: String,
    base: PathBuf,
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            // Their daemons go with them.
            let _ = run(Command::new("pkill").args(["-KILL", "-u", u]));
            let _ = run(Command::new("userdel").arg(u));
        }
        let _ = run(Command::new("groupdel").arg(&self.group));
        let _ = std::fs::remove_dir_all(&self.base);
        // Segments a killed daemon left behind.
        if let Ok(rd) = std::fs::read_dir("/dev/shm") {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("strata-iso-") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// A command run as `user` (its uid, gid and supplementary groups), with a
/// clean environment.
fn as_user(acc: &Accounts, user: &str, prog: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={user}"),
        &format!("--regid={user}"),
        "--init-groups",
        "--",
    ])
    .arg(prog)
    .env_clear()
    .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    .env("HOME", acc.base.join(user));
    c
}

fn strata_as(acc: &Accounts, user: &str, cfg: &Path) -> Command {
    let mut c = as_user(acc, user, &acc.base.join("bin/strata"));
    c.arg("--config").arg(cfg);
    c
}

fn cat_as(acc: &Accounts, user: &str, file: &Path) -> Output {
    let mut c = as_user(acc, user, Path::new("/bin/cat"));
    c.arg(file);
    run(&mut c)
}

/// A private home for `user` with a configuration: socket, shared memory,
/// a dir tier, the I/O log.
fn setup_user(acc: &Accounts, user: &str, tag: &str, group: Option<&str>) -> PathBuf {
    let home = acc.base.join(user);
    std::fs::create_dir_all(&home).unwrap();
    ok(Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(&home));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = home.join(format!("{tag}.yaml"));
    let group_line = group.map_or(String::new(), |g| format!("  group: {g}\n"));
    std::fs::write(
        &cfg,
        format!(
            "daemon:\n  socket: {home}/{tag}-run/daemon.sock\n  shm_prefix: strata-iso-{tag}-{pid}\n{group_line}devices:\n  - name: ram\n    kind: ram\n    capacity: 32MiB\n  - name: disk\n    kind: dir\n    path: {home}/{tag}-tier\n    capacity: 64MiB\ntrace:\n  enabled: true\n  path: {home}/{tag}-trace/io.log\n",
            home = home.display(),
            pid = std::process::id(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    cfg
}

fn secret_put(acc: &Accounts, user: &str, cfg: &Path, secret: &str) {
    let home = acc.base.join(user);
    std::fs::create_dir_all(&home).unwrap();
    ok(Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(&home));
    let file = home.join("secret.txt");
    std::fs::write(&file, secret).unwrap();
    ok(Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(&file));
    ok(strata_as(acc, user, cfg).args(["put", "s", "k"]).arg(&file));
}

/// Every file a daemon keeps (tier file, journal, log, trace): each must be
/// unreadable to others by its own mode, not only by its directory.
fn private_files(home: &Path, tag: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        home.join(format!("{tag}-tier")),
        home.join(format!("{tag}-run")),
        home.join(format!("{tag}-trace")),
    ] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.file_type().unwrap().is_file() {
                files.push(e.path());
            }
        }
    }
    files
}

#[test]
fn two_users_cannot_reach_each_others_daemon_and_a_group_shares_one() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("isolation: skipped, needs root to create users (CI runs it as root)");
        return;
    }
    let pid = std::process::id();
    let (a, b, c) = (
        format!("siso-a{pid}"),
        format!("siso-b{pid}"),
        format!("siso-c{pid}"),
    );
    let g = format!("siso-g{pid}");
    let base = PathBuf::from(format!("/tmp/strata-iso-{pid}"));
    let acc = Accounts {
        users: vec![a.clone(), b.clone(), c.clone()],
        group: g.clone(),
        base: base.clone(),
    };
    ok(Command::new("groupadd").arg(&g));
    for u in [&a, &b, &c] {
        ok(Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", "-U"])
            .arg(u));
    }
    // a and c are members of g; b is not.
    for u in [&a, &c] {
        ok(Command::new("usermod").args(["-aG", &g, u]));
    }
    std::fs::create_dir_all(base.join("bin")).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(base.join("bin"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(strata_bin(), base.join("bin/strata")).unwrap();
    std::fs::set_permissions(
        base.join("bin/strata"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // A world-reachable place where root puts hard links to the others'
    // files: what protects them then is their own mode and the daemon's
    // peer check.
    let world = base.join("world");
    std::fs::create_dir_all(&world).unwrap();
    std::fs::set_permissions(&world, std::fs::Permissions::from_mode(0o755)).unwrap();

    // ---- two private daemons ----------------------------------------
    let cfg_a = setup_user(&acc, &a, "a", None);
    let cfg_b = setup_user(&acc, &b, "b", None);
    ok(strata_as(&acc, &a, &cfg_a).args(["daemon", "start"]));
    ok(strata_as(&acc, &b, &cfg_b).args(["daemon", "start"]));
    secret_put(&acc, &a, &cfg_a, "secret of a");
    secret_put(&acc, &b, &cfg_b, "secret of b");
    // Each reads its own.
    let out = ok(strata_as(&acc, &a, &cfg_a).args(["get", "s", "k"]));
    assert_eq!(out.stdout, b"secret of a");

    for (me, other, other_cfg, tag) in [(&b, &a, &cfg_a, "a"), (&a, &b, &cfg_b, "b")] {
        let home = base.join(other.as_str());
        // Cannot connect: neither through the configured path ...
        let out = run(strata_as(&acc, me, other_cfg).args(["get", "s", "k"]));
        assert!(!out.status.success(), "{me} read {other}'s blob");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("secret"));
        // ... nor through a link to the socket that the file system lets
        // through: the daemon refuses by the kernel's peer credentials.
        let sock = home.join(format!("{tag}-run/daemon.sock"));
        let link_dir = world.join(format!("{tag}-sock"));
        std::fs::create_dir_all(&link_dir).unwrap();
        std::fs::set_permissions(&link_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let linked = link_dir.join("daemon.sock");
        let _ = std::fs::remove_file(&linked);
        std::fs::hard_link(&sock, &linked).unwrap();
        std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o777)).unwrap();
        let cfg_link = world.join(format!("{tag}-link.yaml"));
        std::fs::write(
            &cfg_link,
            format!(
                "daemon:\n  socket: {}\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 16MiB\n",
                linked.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&cfg_link, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = run(strata_as(&acc, me, &cfg_link).args(["get", "s", "k"]));
        assert!(
            !out.status.success(),
            "{me} used {other}'s daemon through a link"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("uid") || err.contains("denied") || err.contains("refus"),
            "{err}"
        );
        let out = run(strata_as(&acc, me, &cfg_link).arg("status"));
        assert!(!out.status.success(), "{me} saw {other}'s status");

        // Cannot map the shared memory (mode 0600 by the daemon).
        let prefix = format!("strata-iso-{tag}-{pid}");
        let mut segs = 0;
        for e in std::fs::read_dir("/dev/shm").unwrap().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&prefix) && !n.ends_with(".lock") {
                segs += 1;
                let md = e.metadata().unwrap();
                assert_eq!(md.mode() & 0o077, 0, "{n} is open to others");
                let out = cat_as(&acc, me, &e.path());
                assert!(!out.status.success(), "{me} read /dev/shm/{n}");
            }
        }
        assert!(segs >= 2, "arena and control segments of {other}");

        // Cannot read its tier file, journal, log or trace, even through a
        // hard link in a directory it may enter.
        let files = private_files(&home, tag);
        assert!(
            files.iter().any(|f| f.to_string_lossy().ends_with(".log")),
            "{files:?}"
        );
        assert!(files.len() >= 4, "tier, journal, log, trace: {files:?}");
        for f in &files {
            let md = std::fs::metadata(f).unwrap();
            assert_eq!(md.mode() & 0o077, 0, "{} is open to others", f.display());
            assert_eq!(md.uid(), rustix::fs::stat(&home).unwrap().st_uid);
            let link = world.join(format!(
                "{tag}-{}",
                f.file_name().unwrap().to_string_lossy()
            ));
            let _ = std::fs::remove_file(&link);
            std::fs::hard_link(f, &link).unwrap();
            let out = cat_as(&acc, me, &link);
            assert!(!out.status.success(), "{me} read {}", f.display());
        }
    }

    // ---- a daemon shared with a group ---------------------------------
    let cfg_s = setup_user(&acc, &a, "s", Some(&g));
    ok(strata_as(&acc, &a, &cfg_s).args(["daemon", "start"]));
    // The owner and a member use it; they see each other's blobs.
    secret_put(&acc, &a, &cfg_s, "team data");
    let out = ok(strata_as(&acc, &c, &cfg_s).args(["get", "s", "k"]));
    assert_eq!(
        out.stdout, b"team data",
        "a member reads the group's daemon"
    );
    secret_put(&acc, &c, &cfg_s, "from c");
    let out = ok(strata_as(&acc, &a, &cfg_s).args(["get", "s", "k"]));
    assert_eq!(out.stdout, b"from c");
    // A member may not stop it.
    let out = run(strata_as(&acc, &c, &cfg_s).args(["daemon", "stop"]));
    assert!(!out.status.success(), "a member stopped the owner's daemon");
    ok(strata_as(&acc, &c, &cfg_s).arg("status"));
    // A member follows the drain too: the event log is the group's (0640).
    ok(strata_as(&acc, &c, &cfg_s).args(["drain", "log", "--tail", "5"]));
    // A non-member reaches neither the socket nor, through a link, the daemon.
    let out = run(strata_as(&acc, &b, &cfg_s).args(["get", "s", "k"]));
    assert!(
        !out.status.success(),
        "a non-member used the group's daemon"
    );
    let sock = base.join(&a).join("s-run/daemon.sock");
    let linked = world.join("s-sock");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::hard_link(&sock, linked.join("daemon.sock")).unwrap();
    std::fs::set_permissions(
        linked.join("daemon.sock"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let cfg_link = world.join("s-link.yaml");
    std::fs::write(
        &cfg_link,
        format!(
            "daemon:\n  socket: {}\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 16MiB\n",
            linked.join("daemon.sock").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg_link, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(strata_as(&acc, &b, &cfg_link).args(["get", "s", "k"]));
    assert!(
        !out.status.success(),
        "a non-member used the group's daemon through a link"
    );
    // The group's segments are 0660 and the group's; the rest stays private.
    let prefix = format!("strata-iso-s-{pid}");
    for e in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with(&prefix) && !n.ends_with(".lock") {
            let md = e.metadata().unwrap();
            assert_eq!(md.mode() & 0o777, 0o660, "{n}");
            assert_eq!(md.mode() & 0o007, 0, "{n} is open to others");
            let out = cat_as(&acc, &b, &e.path());
            assert!(!out.status.success(), "a non-member read /dev/shm/{n}");
        }
    }
    for f in private_files(&base.join(&a), "s") {
        let md = std::fs::metadata(&f).unwrap();
        assert_eq!(md.mode() & 0o007, 0, "{} is open to others", f.display());
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if name == "strata-tier.data" || name.ends_with(".drain.log") {
            // Members' clients read the tier file directly, and members
            // follow the drain's event log; read-only.
            assert_eq!(md.mode() & 0o777, 0o640, "{}", f.display());
        } else {
            assert_eq!(md.mode() & 0o077, 0, "{} is open to the group", f.display());
        }
        let out = cat_as(&acc, &b, &f);
        assert!(!out.status.success(), "a non-member read {}", f.display());
    }

    for (u, cfg) in [(&a, &cfg_a), (&b, &cfg_b), (&a, &cfg_s)] {
        ok(strata_as(&acc, u, cfg).args(["daemon", "stop"]));
    }
}
