//! Three in-process daemons joined in a cluster, each talking through its
//! own seeded fault-injecting transport (delays, refused connects): they
//! agree all are up; a partition between two of them makes each see the
//! other `down` while both still see the third `up`; after it heals all are
//! `up` again; a Stop call ends every daemon. Deterministic faults, no
//! timed assertion (every wait is a generous guard).

use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use strata_net::faults::{FaultPlan, FaultyTransport};
use strata_net::{pb, rpc, Secret, TcpTransport, Transport};

fn config(dir: &Path, name: &str, secret: &Path) -> strata_config::Config {
    let rt = dir.join(name);
    std::fs::create_dir_all(&rt).unwrap();
    std::fs::set_permissions(&rt, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let yaml = format!(
        "daemon:\n  socket: {}\n  shm_prefix: strata-cf{}-{name}\n  log: warn\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 32MiB\ncluster:\n  secret_file: {}\n  call_timeout: 1s\n  heartbeat_interval: 100ms\n",
        rt.join("d.sock").display(),
        std::process::id(),
        secret.display()
    );
    strata_config::Config::from_yaml_str(&yaml, "test").unwrap()
}

/// Peer states as node `i` reports them in its status.
fn peers(socket: &Path) -> Vec<String> {
    strata_client::status(socket)
        .ok()
        .and_then(|s| s.cluster)
        .map(|c| c.peers.into_iter().map(|p| p.state).collect())
        .unwrap_or_default()
}

fn wait(what: &str, ok: impl Fn() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: never reached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn partition_marks_peers_down_within_the_deadline_and_healing_brings_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let secret_path = dir.path().join("secret");
    let secret = Secret::generate();
    secret.save(&secret_path).unwrap();
    let net = 100 + (std::process::id() % 100) as u8;
    let addrs: Vec<String> = (1..=3).map(|i| format!("127.{net}.77.{i}")).collect();
    let names = ["a", "b", "c"];
    let hosts = names
        .iter()
        .zip(&addrs)
        .map(|(n, a)| format!("{n}={a}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut transports = Vec::new();
    let mut sockets = Vec::new();
    let mut threads = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let cfg = config(dir.path(), name, &secret_path);
        sockets.push(cfg.resolved_socket_path());
        let args = strata_daemon::cluster::Args {
            hosts: Some(hosts.clone()),
            hostfile: None,
            node: Some(name.to_string()),
        };
        let mut setup = strata_daemon::cluster::Setup::from_args(&cfg, &args).unwrap();
        assert_eq!(setup.me, i as u32);
        // Each node's own view of the network: a few delays and refused connects.
        let t = Arc::new(FaultyTransport::new(
            Arc::new(TcpTransport),
            FaultPlan {
                seed: 1000 + i as u64,
                delay_prob: 0.1,
                delay_max: Duration::from_millis(5),
                reset_prob: 0.0,
                connect_fail_prob: 0.05,
            },
        ));
        setup.transport = t.clone();
        transports.push(t);
        let (tx, rx) = mpsc::channel();
        threads.push(std::thread::spawn(move || {
            strata_daemon::run_with(cfg, Some(setup), move |_| tx.send(()).unwrap())
        }));
        rx.recv_timeout(Duration::from_secs(60))
            .expect("daemon ready");
    }
    let all_up = |s: &[String]| s.len() == 3 && s.iter().all(|x| x == "up");
    wait("all up", || sockets.iter().all(|s| all_up(&peers(s))));

    // Cut a <-> c (both directions), b untouched.
    transports[0].partition(&addrs[2]);
    transports[2].partition(&addrs[0]);
    wait("a and c see each other down", || {
        let (a, b, c) = (peers(&sockets[0]), peers(&sockets[1]), peers(&sockets[2]));
        a == ["up", "up", "down"] && c == ["down", "up", "up"] && all_up(&b)
    });

    transports[0].heal(&addrs[2]);
    transports[2].heal(&addrs[0]);
    wait("all up again", || sockets.iter().all(|s| all_up(&peers(s))));

    // Hostile or malformed bulk frames from a member get errors; the
    // daemon keeps serving. A stranger without the secret is refused.
    {
        use std::io::{Read, Write};
        use strata_proto::bulk::{self as frame, Kind};
        use strata_transport_shm::{Op, RequestRecord, ResponseRecord};
        let bulk = format!("{}:7708", addrs[1]);
        let t = TcpTransport;
        let dial =
            || strata_net::bulk::dial(&t, &bulk, 0, &secret, Duration::from_secs(5)).unwrap();
        let reply = |s: &mut std::net::TcpStream| -> (frame::Header, Vec<u8>) {
            let h = frame::read_header(s).unwrap();
            let mut body =
                vec![0u8; h.record_len as usize + h.arg_len as usize + h.data_len as usize];
            s.read_exact(&mut body).unwrap();
            (h, body)
        };
        // Not a frame at all; a record of the wrong size: an error frame, then closed.
        for bad in [b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec(), {
            let mut v = Vec::new();
            frame::write_frame(&mut v, Kind::Request, &[1, 2, 3], &[], &[]).unwrap();
            v
        }] {
            let mut s = dial();
            s.write_all(&bad).unwrap();
            let (h, _) = reply(&mut s);
            assert_eq!(h.kind, Kind::Error);
            let mut rest = Vec::new();
            // Closed after the error.
            match s.read_to_end(&mut rest) {
                Ok(n) => assert_eq!(n, 0),
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            }
        }
        // Wrong secret: refused before any frame.
        let e = strata_net::bulk::dial(&t, &bulk, 0, &Secret::generate(), Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        // Well-formed frames with garbage records: error replies, same connection.
        let mut s = dial();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for op in [
            Op::ChannelOpen as u32,
            Op::Lease as u32,
            Op::Put as u32,
            Op::Get as u32,
            9999,
        ] {
            for _ in 0..50 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let rec = RequestRecord {
                    op,
                    flags: (rng & 0xff) as u32,
                    bucket: rng,
                    offset: rng >> 3,
                    len: rng >> 5,
                    name_len: (rng % 64) as u32,
                    name2_len: (rng % 7) as u32,
                    ..RequestRecord::default()
                };
                let arg: Vec<u8> = (0..(rng % 300) as usize)
                    .map(|i| (rng >> (i % 56)) as u8)
                    .collect();
                frame::write_frame(&mut s, Kind::Request, &rec.to_wire(), &[&arg], &[]).unwrap();
                let (h, body) = reply(&mut s);
                assert_eq!(h.kind, Kind::Reply);
                let resp = ResponseRecord::from_wire(&body[..h.record_len as usize]).unwrap();
                assert_ne!(resp.status, 0, "garbage for op {op} was accepted");
            }
        }
    }
    assert!(
        strata_client::status(&sockets[1]).is_ok(),
        "the daemon still serves"
    );

    // Stop every daemon through the cluster service.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t: Arc<dyn Transport> = Arc::new(TcpTransport);
        for a in &addrs {
            let mut c = rpc::connect(
                t.clone(),
                &format!("{a}:7707"),
                &secret,
                Duration::from_secs(5),
            )
            .await
            .unwrap();
            c.stop(pb::StopRequest { drain: true }).await.unwrap();
        }
    });
    for t in threads {
        t.join().unwrap().unwrap();
    }
}
