//! `strata doctor` against a real daemon and configurations with faults.

mod common;

use common::{TestDaemon, Tiers};

fn doctor(_d: &TestDaemon, config: &std::path::Path) -> (bool, serde_json::Value) {
    let out = std::process::Command::new(common::strata_bin())
        .env_remove("STRATA_SOCKET")
        .env_remove("STRATA_CONFIG")
        .arg("--config")
        .arg(config)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.success(), v)
}

fn find<'a>(v: &'a serde_json::Value, check: &str) -> Vec<&'a serde_json::Value> {
    v.as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

#[test]
fn doctor_checks_a_running_daemon_and_names_what_is_wrong() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: "",
    });
    let (ok, v) = doctor(&d, &d.config);
    assert!(ok, "{v:#}");
    assert_eq!(find(&v, "config")[0]["verdict"], "ok", "{v:#}");
    let daemon = find(&v, "daemon")[0];
    assert_eq!(daemon["verdict"], "ok", "{v:#}");
    assert!(daemon["detail"].as_str().unwrap().contains("answers"));
    let tier = find(&v, "tier disk");
    assert!(
        tier.iter()
            .any(|f| f["detail"].as_str().unwrap().contains("fdatasync")),
        "the tier directory's sync was timed: {v:#}"
    );
    assert!(!find(&v, "/dev/shm").is_empty());
    assert!(!find(&v, "io_uring").is_empty());
    assert!(!find(&v, "clock").is_empty());

    // A dir tier on tmpfs that claims to be non-volatile is a warning with
    // advice; a socket nobody answers on is a failure.
    let shm_dir = tempfile::Builder::new()
        .prefix("strata-doctor-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let cfg = d.path().join("tmpfs-tier.yaml");
    let dead = d.path().join("dead.sock");
    // A socket file with no listener behind it.
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    std::fs::write(
        &cfg,
        format!(
            "daemon:\n  socket: {}\n  shm_prefix: strata-doctor-x\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 16MiB\n  - name: fake\n    kind: dir\n    path: {}\n    capacity: 16MiB\n",
            dead.display(),
            shm_dir.path().display()
        ),
    )
    .unwrap();
    let (ok, v) = doctor(&d, &cfg);
    assert!(!ok, "a daemon socket that does not answer fails: {v:#}");
    assert_eq!(find(&v, "daemon")[0]["verdict"], "fail", "{v:#}");
    let fake = find(&v, "tier fake");
    assert!(
        fake.iter().any(|f| f["verdict"] == "warn"
            && f["detail"].as_str().unwrap().contains("tmpfs")
            && f["todo"].as_str().unwrap().contains("volatile")),
        "{v:#}"
    );

    // cluster.tls with files that are missing fails, naming the file and
    // how to make them; valid ones pass.
    let tls_dir = d.path().join("tls");
    let tls_cfg = d.path().join("tls.yaml");
    std::fs::write(
        &tls_cfg,
        format!(
            "daemon:\n  socket: {}\n  shm_prefix: strata-doctor-y\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 16MiB\ncluster:\n  secret_file: {}\n  tls: true\n",
            d.socket.display(),
            tls_dir.join("cluster.secret").display()
        ),
    )
    .unwrap();
    let (ok, v) = doctor(&d, &tls_cfg);
    assert!(!ok, "{v:#}");
    let t = find(&v, "cluster tls")[0];
    assert_eq!(t["verdict"], "fail", "{v:#}");
    assert!(
        t["detail"].as_str().unwrap().contains("cluster-tls.crt"),
        "{v:#}"
    );
    assert!(
        t["todo"].as_str().unwrap().contains("cluster start"),
        "{v:#}"
    );
    strata_net::tls::generate(&strata_net::tls::TlsFiles::auto_beside(
        &tls_dir.join("cluster.secret"),
    ))
    .unwrap();
    let (_, v) = doctor(&d, &tls_cfg);
    assert_eq!(find(&v, "cluster tls")[0]["verdict"], "ok", "{v:#}");

    // A configuration error names its key and line.
    let bad = d.path().join("bad.yaml");
    std::fs::write(&bad, "daemon:\n  metrics: somewhere\n").unwrap();
    let (ok, v) = doctor(&d, &bad);
    assert!(!ok);
    let c = find(&v, "config")[0];
    assert_eq!(c["verdict"], "fail");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("daemon.metrics") && detail.contains(":2"),
        "{detail}"
    );
}
