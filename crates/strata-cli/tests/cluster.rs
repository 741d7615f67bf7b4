//! Many nodes on one machine (tests/cluster_util: network namespaces, else
//! 127.x addresses): `strata cluster start` through a launcher template,
//! agreement, `status`, a node killed with SIGKILL seen `down` by the
//! others, its restart alone with `daemon start --cluster`, a stranger
//! without the secret refused, and `cluster stop`.

mod adapter_util;
mod cluster_util;
mod common;

use cluster_util::{Bed, BedExt};

fn ok(o: &std::process::Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn states(s: &[serde_json::Value]) -> Vec<String> {
    s.iter()
        .map(|r| r["state"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// What node `viewer` says of node `of`.
fn peer_state(s: &[serde_json::Value], viewer: usize, of: u64) -> String {
    s[viewer]["peers"]
        .as_array()
        .and_then(|p| p.iter().find(|x| x["node"].as_u64() == Some(of)))
        .and_then(|x| x["state"].as_str())
        .unwrap_or("?")
        .to_string()
}

#[test]
fn start_status_kill_restart_stop() {
    let bed = cluster_util::bed(3, "128MiB", Some("256MiB"), "60s");
    eprintln!("cluster test on {}", bed.kind);
    let o = bed.run_cli(&["cluster", "start", "--launcher", bed.launcher()]);
    ok(&o, "cluster start");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches(" up ").count(), 3, "{out}");
    assert!(bed.secret_path().exists(), "cluster start wrote the secret");

    // Every node answers, and every node sees every other up.
    let s = bed.statuses();
    assert_eq!(states(&s), ["up", "up", "up"]);
    for v in 0..3 {
        for of in 0..3u64 {
            assert_eq!(peer_state(&s, v, of), "up", "node {v} on node {of}: {s:#?}");
        }
    }
    // The local status of a member shows its cluster.
    let o = std::process::Command::new(cluster_util::strata_bin())
        .arg("--config")
        .arg(&bed.nodes[0].config)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["cluster"]["peers"].as_array().unwrap().len(), 3);
    assert_eq!(st["node_id"], 0);
    // Every peer seen up has a measured heartbeat round trip (the
    // network latency placement will weigh).
    for p in st["cluster"]["peers"].as_array().unwrap() {
        if p["node"] != 0 {
            assert!(p["rtt_us"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    for row in &s {
        for p in row["peers"].as_array().unwrap() {
            if p["node"] != row["node"] {
                assert!(p["rtt_us"].as_f64().is_some_and(|r| r > 0.0), "{row}");
            }
        }
    }

    // SIGKILL node 1: the others see it down (within the call deadline;
    // polled, not timed), the table says so and exits 1.
    let pid = bed.pid(1).expect("node 1 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let s = bed.wait_for("node 1 seen down", |s| {
        s[1]["state"] == "down" && peer_state(s, 0, 1) == "down" && peer_state(s, 2, 1) == "down"
    });
    assert_eq!(states(&s), ["up", "down", "up"]);
    let o = bed.run_cli(&["cluster", "status"]);
    assert_eq!(o.status.code(), Some(1));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("down") && table.contains(&bed.nodes[1].addr),
        "{table}"
    );

    // Node 1 restarts alone and rejoins.
    ok(&bed.start(1), "daemon start --cluster");
    bed.wait_for("node 1 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 1) == "up")
    });

    // Stop: drains, stops every daemon; their sockets go away.
    let o = bed.run_cli(&["cluster", "stop"]);
    ok(&o, "cluster stop");
    for n in &bed.nodes {
        // The process may still be exiting (a generous guard, not a timing check).
        let started = std::time::Instant::now();
        while n.socket.exists() && started.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!n.socket.exists(), "{} still has a socket", n.name);
    }
}

#[test]
fn without_the_secret_nothing_answers() {
    let bed = started(2, "64MiB", None, "60s");
    // A client with another secret: refused by every node, named.
    let other = bed.dir.path().join("other.secret");
    strata_net::Secret::generate().save(&other).unwrap();
    let env = [("STRATA_CLUSTER_SECRET_FILE", other.display().to_string())];
    for e in stranger_status(&bed, &env) {
        assert!(e.contains("secret"), "{e}");
    }
    // The daemons logged the refusals and still serve the real members.
    assert_eq!(states(&bed.statuses()), ["up", "up"]);
    let log = std::fs::read_to_string(bed.nodes[0].socket.with_extension("log")).unwrap();
    assert!(log.contains("cluster connection refused"), "{log}");
    // One member stopped alone while its peer still holds connections to it:
    // its stop returns (a graceful end of the cluster service is bounded).
    for (i, n) in bed.nodes.iter().enumerate() {
        let pid = bed.pid(i).expect("running");
        let o = std::process::Command::new(cluster_util::strata_bin())
            .arg("--config")
            .arg(&n.config)
            .args(["daemon", "stop"])
            .output()
            .unwrap();
        ok(&o, "daemon stop of one member");
        // The process ends (a generous guard, not a timing check).
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        let started = std::time::Instant::now();
        while proc_dir.exists() && started.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            !proc_dir.exists(),
            "{} (pid {pid}) still runs after its stop",
            n.name
        );
    }
}

#[test]
fn a_start_that_cannot_agree_names_the_missing_node() {
    let bed = cluster_util::bed(2, "64MiB", None, "3s");
    eprintln!("cluster test on {}", bed.kind);
    // Only node 0 comes up; the launcher given for the start runs nothing.
    strata_net::Secret::generate()
        .save(&bed.secret_path())
        .unwrap();
    ok(&bed.start(0), "node 0 alone");
    let o = bed.run_cli(&["cluster", "start", "--launcher", "true {name} {cmd}"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let (n0, n1) = (&bed.nodes[0].name, &bed.nodes[1].name);
    assert!(err.contains("did not come up"), "{err}");
    // Node 1 never answered; node 0 answers but does not see node 1.
    let line = |n: &str| {
        err.lines()
            .find(|l| l.trim_start().starts_with(&format!("{n} (")))
            .unwrap_or_else(|| panic!("no line for {n}: {err}"))
            .to_string()
    };
    assert!(
        line(n1).contains("connect") || line(n1).contains("answer"),
        "{err}"
    );
    assert!(line(n0).contains("sees 1/2 nodes up"), "{err}");
}

/// A bed of `n` nodes with its cluster started (the test says which bed ran).
/// `cluster status --json` of the bed's hosts by a client with `env` set
/// (another secret, no TLS, another CA): exit 1 and every node down; the
/// reason each gives.
fn stranger_status(bed: &Bed, env: &[(&str, String)]) -> Vec<String> {
    let mut c = std::process::Command::new(cluster_util::strata_bin());
    c.arg("--config")
        .arg(&bed.config_template)
        .args(["cluster", "status", "--json", "--hosts", &bed.hosts]);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    rows.iter()
        .map(|r| {
            assert_eq!(r["state"], "down", "{r}");
            r["error"].as_str().unwrap().to_string()
        })
        .collect()
}

fn started(n: usize, ram: &str, disk: Option<&str>, start_timeout: &str) -> Bed {
    started_with(cluster_util::bed(n, ram, disk, start_timeout))
}

/// `bed`'s cluster, started.
fn started_with(bed: Bed) -> Bed {
    eprintln!("cluster test on {}", bed.kind);
    ok(
        &bed.run_cli(&["cluster", "start", "--launcher", bed.launcher()]),
        "cluster start",
    );
    bed
}

/// A client on every node of `bed`.
fn clients_of(bed: &Bed) -> Vec<strata_client::Client> {
    bed.nodes
        .iter()
        .map(|n| strata_client::Client::connect_to(&n.socket).unwrap())
        .collect()
}

/// The first bucket name `PREFIX<k>` that node `n` owns.
fn bucket_owned_by(c: &strata_client::Client, prefix: &str, n: u32) -> String {
    (0..10_000)
        .map(|k| format!("{prefix}{k}"))
        .find(|b| c.owner_of_bucket(b) == n)
        .unwrap()
}

fn checksum(b: &[u8]) -> u64 {
    // FNV-1a over the bytes (equality of contents, not security).
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ *x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The native API from every node on every node's data: names spread over
/// the owners, puts and gets of 0 B … 20 MiB from any node, renames,
/// deletes and listings seen everywhere, concurrent writers, and a killed
/// owner turning the calls that need it into `NodeDown` while the rest
/// works on.
#[test]
fn native_api_from_every_node_on_every_nodes_data() {
    use strata_proto::Errno;
    let bed = started(3, "256MiB", None, "60s");
    let clients = clients_of(&bed);
    let sizes = [0usize, 1, 4096, 1 << 20, 9 << 20, 20 << 20];
    // Bucket i is owned by node i % 3: the nodes' names (hence the ring) are
    // new in every bed, so fixed names could all land on one node.
    let names: Vec<String> = (0..sizes.len())
        .map(|i| bucket_owned_by(&clients[0], &format!("b{i}-"), (i % 3) as u32))
        .collect();
    for (i, size) in sizes.iter().enumerate() {
        let data = pattern(*size, i as u64 + 1);
        let writer = &clients[i % 3];
        writer
            .bucket(&names[i])
            .unwrap()
            .put("blob", &data)
            .unwrap();
        for (j, c) in clients.iter().enumerate() {
            let got = c.bucket_open(&names[i]).unwrap().get("blob").unwrap();
            assert_eq!(
                (got.len(), checksum(&got)),
                (data.len(), checksum(&data)),
                "size {size} written on node {} read on node {j}",
                i % 3
            );
        }
    }
    // The buckets spread over the nodes (each daemon holds its own share).
    let held: Vec<u64> = bed
        .nodes
        .iter()
        .map(|n| {
            let o = std::process::Command::new(cluster_util::strata_bin())
                .arg("--config")
                .arg(&n.config)
                .args(["status", "--json"])
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v["buckets"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(held, vec![2, 2, 2], "each daemon holds the buckets it owns");
    // Listings merge every node, the same from each.
    let want: Vec<String> = names.clone();
    for c in &clients {
        assert_eq!(c.bucket_names().unwrap(), want);
    }
    // put_at, stat, rename, delete: seen from the other nodes.
    let b0 = clients[0].bucket("shared").unwrap();
    b0.put("x", b"hello world").unwrap();
    clients[1]
        .bucket_open("shared")
        .unwrap()
        .put_at("x", 6, b"WORLD")
        .unwrap();
    assert_eq!(
        clients[2].bucket_open("shared").unwrap().get("x").unwrap(),
        b"hello WORLD"
    );
    assert_eq!(
        clients[2]
            .bucket_open("shared")
            .unwrap()
            .stat("x")
            .unwrap()
            .size,
        11
    );
    clients[2]
        .bucket_open("shared")
        .unwrap()
        .rename_blob("x", "y", false)
        .unwrap();
    let e = clients[0]
        .bucket_open("shared")
        .unwrap()
        .get("x")
        .unwrap_err();
    assert_eq!(e.errno, Errno::NoBlob);
    assert_eq!(
        clients[1].bucket_open("shared").unwrap().get("y").unwrap(),
        b"hello WORLD"
    );
    clients[1]
        .bucket_open("shared")
        .unwrap()
        .delete("y")
        .unwrap();
    assert_eq!(
        clients[0]
            .bucket_open("shared")
            .unwrap()
            .get("y")
            .unwrap_err()
            .errno,
        Errno::NoBlob
    );
    // Concurrent writers from every node to one name and to their own.
    std::thread::scope(|s| {
        for (i, c) in clients.iter().enumerate() {
            s.spawn(move || {
                let b = c.bucket("race").unwrap();
                for k in 0..20u8 {
                    b.put("same", &[i as u8; 4096]).unwrap();
                    b.put(&format!("own{i}"), &[k; 1000]).unwrap();
                }
            });
        }
    });
    let same: Vec<Vec<u8>> = clients
        .iter()
        .map(|c| c.bucket_open("race").unwrap().get("same").unwrap())
        .collect();
    assert!(
        same.iter().all(|v| *v == same[0]),
        "every node reads the same last write"
    );
    assert!(
        same[0].iter().all(|b| *b == same[0][0]) && same[0][0] < 3,
        "one whole write"
    );
    for i in 0..clients.len() {
        for other in &clients {
            assert_eq!(
                other
                    .bucket_open("race")
                    .unwrap()
                    .get(&format!("own{i}"))
                    .unwrap(),
                vec![19u8; 1000]
            );
        }
    }

    // Kill the owner of one bucket: calls that need it fail with NodeDown
    // (naming the node), the other nodes' data stays readable.
    let victim_bucket = names
        .iter()
        .find(|n| {
            let b = clients[0].bucket_open(n).unwrap();
            b.id() >> 48 != 0
        })
        .cloned()
        .expect("some bucket is not on node 0");
    let owner = (clients[0].bucket_open(&victim_bucket).unwrap().id() >> 48) as usize;
    let pid = bed.pid(owner).unwrap();
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let viewer = (owner + 1) % 3;
    let e = match clients[viewer].bucket_open(&victim_bucket) {
        Err(e) => e,
        Ok(_) => panic!("{victim_bucket} opened on a dead node"),
    };
    assert_eq!(e.errno, Errno::NodeDown, "{e}");
    assert!(e.to_string().contains(&bed.nodes[owner].name), "{e}");
    for (i, size) in sizes.iter().enumerate() {
        let name = &names[i];
        match clients[viewer].bucket_open(name) {
            Ok(b) => {
                assert_ne!((b.id() >> 48) as usize, owner);
                assert_eq!(
                    checksum(&b.get("blob").unwrap()),
                    checksum(&pattern(*size, i as u64 + 1))
                );
            }
            Err(e) => assert_eq!(e.errno, Errno::NodeDown, "{name}: {e}"),
        }
    }
}

/// A node killed with SIGKILL while it owns durable blobs (flushed to its
/// dir tier from another node) and a volatile one: the other nodes get
/// `NodeDown` for it and keep their own data; restarted alone, it replays
/// its journal and rejoins — the durable blobs read back from every node,
/// the volatile one is gone (as on one node).
#[test]
fn a_restarted_owner_replays_its_journaled_blobs() {
    use strata_client::Client;
    use strata_proto::Errno;
    let bed = started(3, "64MiB", Some("256MiB"), "60s");
    let c1 = Client::connect_to(&bed.nodes[1].socket).unwrap();
    // A bucket owned by node 0, another by node 2, written from node 1.
    let owned_by = |n: u32| bucket_owned_by(&c1, "dur", n);
    let (on0, on2) = (owned_by(0), owned_by(2));
    let blobs: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("b{i}"), pattern(1000 + i * 700_000, i as u64 + 7)))
        .collect();
    let b0 = c1.bucket(&on0).unwrap();
    for (k, v) in &blobs {
        b0.put(k, v).unwrap();
    }
    b0.flush(true).unwrap();
    b0.put("volatile", b"RAM only").unwrap();
    let b2 = c1.bucket(&on2).unwrap();
    b2.put("mine", b"on node 2").unwrap();

    let pid = bed.pid(0).expect("node 0 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let e = b0.get("b0").unwrap_err();
    assert_eq!(e.errno, Errno::NodeDown, "{e}");
    assert!(e.to_string().contains(&bed.nodes[0].name), "{e}");
    assert_eq!(b2.get("mine").unwrap(), b"on node 2");

    ok(&bed.start(0), "node 0 restarts alone");
    bed.wait_for("node 0 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 0) == "up")
    });
    // Pooled connections to the old process are replaced on their own.
    for node in [1usize, 2, 0] {
        let c = Client::connect_to(&bed.nodes[node].socket).unwrap();
        let b = c.bucket_open(&on0).unwrap();
        for (k, v) in &blobs {
            let got = b.get(k).unwrap();
            assert_eq!(
                (got.len(), checksum(&got)),
                (v.len(), checksum(v)),
                "{k} read on node {node} after node 0's restart"
            );
        }
        assert_eq!(b.get("volatile").unwrap_err().errno, Errno::NoBlob);
    }
    assert_eq!(b0.get("b1").unwrap().len(), blobs[1].1.len());
}

/// A 1 GiB blob crosses nodes both ways (put from a non-owner, read back on
/// every node), in the pieces the bulk path carries.
#[test]
fn a_gibibyte_blob_crosses_nodes() {
    let bed = started(3, "1280MiB", None, "60s");
    let clients = clients_of(&bed);
    let name = bucket_owned_by(&clients[0], "big", 1);
    // 1 GiB of a 1 MiB pattern shifted per MiB (cheap to make and to check
    // in a debug build).
    let unit = pattern(1 << 20, 42);
    let mut data = vec![0u8; 1 << 30];
    for (i, chunk) in data.chunks_mut(1 << 20).enumerate() {
        chunk.copy_from_slice(&unit);
        chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    clients[0].bucket(&name).unwrap().put("g", &data).unwrap();
    for (n, c) in clients.iter().enumerate() {
        let b = c.bucket_open(&name).unwrap();
        assert_eq!(b.stat("g").unwrap().size, 1 << 30);
        let got = b.get("g").unwrap();
        assert!(got == data, "1 GiB read on node {n} differs");
    }
    // Pieces side by side (the bulk layer's pipelining): a put_at larger
    // than one frame at an odd offset over the blob, and a get_at whose
    // buffer runs past the blob's end, from another node than the writer.
    let piece = strata_proto::control::FORWARD_DATA_BYTES_MAX;
    let patch = pattern(3 * piece + 12_345, 7);
    let at = (1u64 << 30) - 5 * piece as u64 - 777;
    let size = clients[2]
        .bucket_open(&name)
        .unwrap()
        .put_at("g", at, &patch)
        .unwrap();
    assert_eq!(size, 1 << 30, "a put_at inside the blob keeps its size");
    data[at as usize..at as usize + patch.len()].copy_from_slice(&patch);
    let tail_at = (1u64 << 30) - 2 * piece as u64 - 99;
    let mut buf = vec![0u8; 4 * piece];
    let b = clients[0].bucket_open(&name).unwrap();
    let n = b.get_at("g", tail_at, &mut buf).unwrap();
    assert_eq!(
        n,
        2 * piece + 99,
        "a get_at past the end is short by exactly that"
    );
    assert!(
        buf[..n] == data[tail_at as usize..],
        "the blob's tail read in pieces differs"
    );
    assert!(b.get("g").unwrap() == data, "the patched blob differs");
}

/// A hung owner (SIGSTOP: it holds its connections and answers nothing, as
/// behind a partition): calls that need it end with `NodeDown` at the call
/// deadline — on a pooled bulk connection and on a new one — the caller's
/// own data stays readable, and after SIGCONT the same client works again.
#[test]
fn a_hung_owner_gives_node_down_at_the_deadline_then_recovers() {
    use strata_client::Client;
    use strata_proto::Errno;
    let bed = started(2, "64MiB", None, "60s");
    let c1 = Client::connect_to(&bed.nodes[1].socket).unwrap();
    let owned_by = |n: u32| bucket_owned_by(&c1, "hang", n);
    let (remote, local) = (
        c1.bucket(&owned_by(0)).unwrap(),
        c1.bucket(&owned_by(1)).unwrap(),
    );
    remote.put("r", b"remote bytes").unwrap();
    local.put("l", b"local bytes").unwrap();
    let pid = bed.pid(0).expect("node 0 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Pooled connection: the request is sent, no answer comes.
        let e = remote.get("r").unwrap_err();
        assert_eq!(e.errno, Errno::NodeDown, "{e}");
        assert!(e.to_string().contains(&bed.nodes[0].name), "{e}");
        // A new client: its daemon's dial gets no handshake.
        let fresh = Client::connect_to(&bed.nodes[1].socket).unwrap();
        let e = fresh.bucket_open(&owned_by(0)).map(|_| ()).unwrap_err();
        assert_eq!(e.errno, Errno::NodeDown, "{e}");
        assert_eq!(local.get("l").unwrap(), b"local bytes");
    }));
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    assert_eq!(remote.get("r").unwrap(), b"remote bytes");
    remote.put("r2", b"after").unwrap();
    assert_eq!(remote.get("r2").unwrap(), b"after");
}

/// `strata status --json` of node `i`.
fn node_status(bed: &Bed, i: usize) -> serde_json::Value {
    let o = std::process::Command::new(cluster_util::strata_bin())
        .arg("--config")
        .arg(&bed.nodes[i].config)
        .args(["status", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Node `i`'s tier named `name` in its status.
fn tier_of(status: &serde_json::Value, name: &str) -> serde_json::Value {
    status["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tier {name} in {status}"))
        .clone()
}

/// Capacity pressure across nodes: when a node's own tiers are full, its
/// blobs go to memory the other nodes lend it (remote tiers, node-local
/// first), are read back from every node, and a lender's death and
/// restart turn into errors and reported losses — never wrong bytes — while
/// everything else stays intact and new puts use the new lender.
#[test]
fn a_full_node_spills_onto_remote_tiers_and_a_lenders_restart_is_never_silent() {
    use strata_proto::Errno;
    let bed = started_with(cluster_util::bed_lending(
        3,
        "16MiB",
        Some("16MiB"),
        "60s",
        Some("48MiB"),
        false,
    ));
    let clients = clients_of(&bed);
    let on0 = bucket_owned_by(&clients[0], "spill", 0);
    // 80 MiB into node 0's 32 MiB of tiers, from node 0 and from node 1.
    let blobs: Vec<Vec<u8>> = (0..40).map(|i| pattern(2 << 20, i + 100)).collect();
    for (i, data) in blobs.iter().enumerate() {
        clients[i % 2]
            .bucket(&on0)
            .unwrap()
            .put(&format!("k{i}"), data)
            .unwrap();
    }
    let s0 = node_status(&bed, 0);
    let (n1, n2) = (&bed.nodes[1].name, &bed.nodes[2].name);
    let used = |s: &serde_json::Value, n: &str| {
        tier_of(s, &format!("remote:{n}"))["used_bytes"]
            .as_u64()
            .unwrap()
    };
    assert!(
        used(&s0, n1) + used(&s0, n2) >= 40 << 20,
        "the remote tiers took what node 0 could not: {s0}"
    );
    assert!(used(&s0, n2) > 0, "node 2 lends some: {s0}");
    assert_eq!(
        tier_of(&s0, "disk")["spilled_bytes"].as_u64().unwrap(),
        0,
        "the remote tiers had room: the local disk did not grow"
    );
    assert_eq!(tier_of(&s0, &format!("remote:{n1}"))["kind"], "remote");
    // Every node reads every blob back (node 0's clients from the lenders
    // directly, the others through node 0).
    for (j, c) in clients.iter().enumerate() {
        let b = c.bucket_open(&on0).unwrap();
        for (i, data) in blobs.iter().enumerate() {
            let got = b.get(&format!("k{i}")).unwrap();
            assert_eq!(checksum(&got), checksum(data), "k{i} read on node {j}");
        }
    }

    // Node 2 dies: what it held is an error, never wrong bytes; the rest reads.
    let pid = bed.pid(2).expect("node 2 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut failed = 0;
    for c in &clients[..2] {
        let b = c.bucket_open(&on0).unwrap();
        for (i, data) in blobs.iter().enumerate() {
            match b.get(&format!("k{i}")) {
                Ok(got) => assert_eq!(checksum(&got), checksum(data), "k{i}"),
                Err(e) => {
                    assert!(matches!(e.errno, Errno::NodeDown | Errno::Io), "k{i}: {e}");
                    failed += 1;
                }
            }
        }
    }
    assert!(failed > 0, "the bytes node 2 held are unreachable");

    // It restarts: node 0 sees another process there and reports the loss.
    ok(&bed.start(2), "node 2 restarts");
    bed.wait_for("node 2 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 2) == "up")
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let lost = loop {
        let t = tier_of(&node_status(&bed, 0), &format!("remote:{n2}"));
        let lost = t["lost_blobs"].as_u64().unwrap();
        if lost > 0 {
            break lost;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no loss reported: {t}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut gone = 0;
    for (j, c) in clients.iter().enumerate().take(2) {
        let b = c.bucket_open(&on0).unwrap();
        gone = 0;
        for (i, data) in blobs.iter().enumerate() {
            match b.get(&format!("k{i}")) {
                Ok(got) => assert_eq!(checksum(&got), checksum(data), "k{i} on node {j}"),
                Err(e) => {
                    assert_eq!(e.errno, Errno::NoBlob, "k{i} on node {j}: {e}");
                    gone += 1;
                }
            }
        }
    }
    assert_eq!(gone, lost, "every dropped blob was counted, no other one");
    assert!(gone < blobs.len() as u64, "the rest is intact");
    // Their space is freed once the readers' pins are released (the
    // clients' next requests above did).
    bed.wait_for("the lost donation freed", |_| {
        used(&node_status(&bed, 0), n2) == 0
    });
    // The new node 2 lends again: new puts past node 0's capacity work.
    let b = clients[1].bucket_open(&on0).unwrap();
    for i in 0..gone {
        let data = pattern(2 << 20, 1000 + i);
        b.put(&format!("again{i}"), &data).unwrap();
        assert_eq!(
            checksum(&b.get(&format!("again{i}")).unwrap()),
            checksum(&data)
        );
    }
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// The organizer moves a blob toward the node that reads it: after a few
/// reads from node 1 of a blob node 0 owns, its bytes live in the memory
/// node 1 lends node 0, node 1's readers read them there (only the answer
/// crosses the network), every other node still reads it through node 0,
/// and overwrites and deletes work as before.
#[test]
fn a_blob_moves_toward_the_node_that_reads_it() {
    use strata_proto::Errno;
    let bed = started_with(cluster_util::bed_lending(
        3,
        "128MiB",
        None,
        "60s",
        Some("64MiB"),
        true,
    ));
    let clients = clients_of(&bed);
    let on0 = bucket_owned_by(&clients[0], "near", 0);
    let data = pattern(5 << 20, 77);
    clients[2].bucket(&on0).unwrap().put("hot", &data).unwrap();
    let n1 = bed.nodes[1].name.clone();
    let lent_used = || {
        tier_of(&node_status(&bed, 0), &format!("remote:{n1}"))["used_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(lent_used(), 0, "placed on node 0's own RAM first");
    let b1 = clients[1].bucket_open(&on0).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Bounded by the deadline: node 1 keeps reading until the move shows.
    while lent_used() < 5 << 20 {
        assert_eq!(checksum(&b1.get("hot").unwrap()), checksum(&data));
        assert!(
            std::time::Instant::now() < deadline,
            "never moved toward node 1: {}",
            node_status(&bed, 0)["organizer"]
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let org = &node_status(&bed, 0)["organizer"];
    assert!(org["moved_toward_readers"].as_u64().unwrap() >= 1, "{org}");
    // Read everywhere: node 1 from its own memory, the others through node 0.
    for (j, c) in clients.iter().enumerate() {
        let b = c.bucket_open(&on0).unwrap();
        for _ in 0..3 {
            assert_eq!(
                checksum(&b.get("hot").unwrap()),
                checksum(&data),
                "node {j}"
            );
        }
        let mut part = vec![0u8; 100_000];
        assert_eq!(b.get_at("hot", 4 << 20, &mut part).unwrap(), part.len());
        assert_eq!(part, data[4 << 20..(4 << 20) + 100_000], "node {j}");
    }
    // Overwritten from node 2, read on node 1: the new bytes.
    let new = pattern(3 << 20, 78);
    clients[2]
        .bucket_open(&on0)
        .unwrap()
        .put("hot", &new)
        .unwrap();
    assert_eq!(checksum(&b1.get("hot").unwrap()), checksum(&new));
    clients[0].bucket_open(&on0).unwrap().delete("hot").unwrap();
    assert_eq!(b1.get("hot").unwrap_err().errno, Errno::NoBlob);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// The first path `DIR/PREFIX<k>` whose owner is node `n`.
fn path_owned_by(bed: &Bed, prefix: &str, n: u32) -> String {
    let names: Vec<String> = bed.nodes.iter().map(|x| x.name.clone()).collect();
    let ring = strata_meta::Ring::new(&names).unwrap();
    (0..10_000)
        .map(|k| format!("{}/{prefix}{k}", bed.dest.display()))
        .find(|p| strata_meta::owner_of(p.as_bytes(), &ring) == n)
        .unwrap()
}

/// Files at their path's owner (`cluster.files_at_owner`), through the
/// file API the adapters use, from every node: a file created on one node
/// is seen by `stat` and read on the others; `O_EXCL` from two nodes lets
/// exactly one win; `O_APPEND` from three nodes never overlaps; an N-1
/// file written in unaligned disjoint ranges from three nodes reads back
/// the same everywhere and reaches the shared destination whole; listings
/// merge the nodes; a rename between two owners answers EXDEV, one within
/// an owner is seen everywhere; an unlink too.
#[test]
fn files_live_at_their_owner_one_namespace_on_every_node() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let clients = clients_of(&bed);
    let rw_create = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page = 64 << 10;
    let open = |c: &strata_client::Client, p: &str, fl: OpenFlags| {
        c.file_open(p, fl, 0o644, Persist::Default, page)
    };

    // Created on node 1, owned by node 0: stat and read on node 2.
    let p0 = path_owned_by(&bed, "made-on-1-", 0);
    let a = open(&clients[1], &p0, rw_create).unwrap();
    assert_eq!(
        a.id >> strata_meta::NODE_SHIFT,
        0,
        "the record is at the owner"
    );
    assert_eq!(
        clients[1].file_stat(a.id).unwrap().holders,
        1,
        "one client holds it"
    );
    let again = open(&clients[1], &p0, rw_create).unwrap();
    assert_eq!(
        clients[2].file_stat(again.id).unwrap().holders,
        1,
        "the same client, once"
    );
    let other = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    open(&other, &p0, rw_create).unwrap();
    assert_eq!(
        clients[2].file_stat(a.id).unwrap().holders,
        2,
        "two clients of node 1"
    );
    drop(other);
    // Its node tells the owner it is gone (in the background).
    let t0 = std::time::Instant::now();
    while clients[2].file_stat(a.id).unwrap().holders != 1 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "a gone client's hold stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    clients[1]
        .file_write(a.id, 0, b"written on node 1")
        .unwrap();
    clients[1].file_close(a.id).unwrap();
    let st = clients[2]
        .file_stat_path(&p0)
        .unwrap()
        .expect("seen on node 2");
    assert_eq!(st.size, 17);
    let b = open(
        &clients[2],
        &p0,
        OpenFlags {
            read: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 64];
    let n = clients[2].file_read(b.id, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"written on node 1");
    clients[2].file_close(b.id).unwrap();

    // O_EXCL from two nodes at once: exactly one wins.
    let px = path_owned_by(&bed, "excl-", 2);
    let excl = OpenFlags {
        excl: true,
        ..rw_create
    };
    let wins: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = [0usize, 1]
            .iter()
            .map(|&i| {
                let (c, px) = (&clients[i], &px);
                s.spawn(move || match open(c, px, excl) {
                    Ok(a) => {
                        c.file_close(a.id).unwrap();
                        true
                    }
                    Err(e) => {
                        assert_eq!(e.os_errno(), libc::EEXIST, "{e}");
                        false
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "{wins:?}");

    // O_APPEND from three nodes: 3 × 50 records of 999 bytes, none torn.
    let pa = path_owned_by(&bed, "append-", 1);
    std::thread::scope(|s| {
        for (i, c) in clients.iter().enumerate() {
            let pa = &pa;
            s.spawn(move || {
                let a = open(c, pa, rw_create).unwrap();
                for _ in 0..50 {
                    c.file_append(a.id, &[b'a' + i as u8; 999]).unwrap();
                }
                c.file_close(a.id).unwrap();
            });
        }
    });
    let a = open(&clients[0], &pa, rw_create).unwrap();
    let mut all = vec![0u8; 3 * 50 * 999 + 10];
    let n = clients[0].file_read(a.id, 0, &mut all).unwrap();
    assert_eq!(n, 3 * 50 * 999);
    let mut per = [0usize; 3];
    for rec in all[..n].chunks(999) {
        assert!(rec.iter().all(|b| *b == rec[0]), "a torn append record");
        per[(rec[0] - b'a') as usize] += 1;
    }
    assert_eq!(per, [50, 50, 50]);
    clients[0].file_close(a.id).unwrap();

    // N-1: node i writes [i·L, (i+1)·L), L unaligned to the page, then fsyncs.
    let pn = path_owned_by(&bed, "n-to-1-", 2);
    let l = 3 * page as usize + 12_345;
    let expect: Vec<u8> = (0..3).flat_map(|i| pattern(l, 100 + i)).collect();
    std::thread::scope(|s| {
        for (i, c) in clients.iter().enumerate() {
            let (pn, expect) = (&pn, &expect);
            s.spawn(move || {
                let a = open(c, pn, rw_create).unwrap();
                c.file_write(a.id, (i * l) as u64, &expect[i * l..(i + 1) * l])
                    .unwrap();
                c.file_sync(a.id).unwrap();
                c.file_close(a.id).unwrap();
            });
        }
    });
    for (i, c) in clients.iter().enumerate() {
        let a = open(
            c,
            &pn,
            OpenFlags {
                read: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut got = vec![0u8; expect.len() + 1];
        let n = c.file_read(a.id, 0, &mut got).unwrap();
        assert!(
            n == expect.len() && got[..n] == expect[..],
            "N-1 file read on node {i} differs"
        );
        c.file_close(a.id).unwrap();
    }

    // Listings merge every node's records.
    let names = clients[1]
        .file_list_dir(&bed.dest.display().to_string())
        .unwrap();
    for p in [&p0, &px, &pa, &pn] {
        let name = p.rsplit('/').next().unwrap();
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }

    // Renames: between owners EXDEV (nothing moved), within one owner seen everywhere.
    let other = path_owned_by(&bed, "renamed-", 1);
    let e = clients[2].file_rename(&p0, &other, false).unwrap_err();
    assert_eq!(e.os_errno(), libc::EXDEV, "{e}");
    assert!(clients[0].file_stat_path(&p0).unwrap().is_some());
    let same = path_owned_by(&bed, "renamed-", 0);
    assert!(clients[2].file_rename(&p0, &same, false).unwrap());
    assert_eq!(clients[1].file_stat_path(&same).unwrap().unwrap().size, 17);
    assert!(clients[1].file_stat_path(&p0).unwrap().is_none());
    // Unlinked on node 1, gone on node 0.
    assert!(clients[1].file_unlink(&px).unwrap());
    let _ = std::fs::remove_file(&px);
    assert!(clients[0].file_stat_path(&px).unwrap().is_none());

    // `strata flush --wait` on node 1 asks every node: a hung node 2 makes
    // it fail naming that node (after the 2 s call deadline), never report
    // its files clean; once node 2 answers again, the flush drains the
    // files every node holds and the destination has them whole.
    let n1 = &bed.nodes[1];
    let flush = || {
        let mut f = bed.in_node(1, &bed.strata);
        f.arg("--config")
            .arg(&n1.config)
            .args(["flush", "--wait"])
            .arg(&bed.dest);
        f.output().unwrap()
    };
    let pid = bed.pid(2).expect("node 2 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let hung = flush();
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let said = String::from_utf8_lossy(&hung.stderr).into_owned();
    assert!(
        !hung.status.success(),
        "a flush with node 2 hung succeeded: {said}"
    );
    assert!(said.contains(&bed.nodes[2].name), "{said}");
    ok(&flush(), "strata flush --wait on node 1");
    // `strata drain status` on node 1 lists the files every node holds.
    let mut ds = bed.in_node(1, &bed.strata);
    ds.arg("--config")
        .arg(&n1.config)
        .args(["drain", "status", "--json"])
        .arg(&bed.dest);
    let ds = ds.output().unwrap();
    ok(&ds, "strata drain status on node 1");
    let v: serde_json::Value = serde_json::from_slice(&ds.stdout).unwrap();
    let listed: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for p in [&pn, &pa, &same] {
        assert!(
            listed.contains(&p.as_str()),
            "drain status on node 1 misses {p}: {listed:?}"
        );
    }
    assert_eq!(v["dirty_files"].as_u64(), Some(0), "{v}");
    assert!(
        std::fs::read(&pn).unwrap() == expect,
        "N-1 file at the destination differs"
    );
    assert_eq!(std::fs::read(&same).unwrap(), b"written on node 1");
    assert_eq!(std::fs::read(&pa).unwrap().len(), 3 * 50 * 999);
    drop(clients);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// `strata ARGS` inside node `i`, with its config; its output (unchecked).
fn strata_on(bed: &Bed, i: usize, args: &[&str]) -> std::process::Output {
    let mut c = bed.in_node(i, &bed.strata);
    c.arg("--config").arg(&bed.nodes[i].config).args(args);
    c.output().unwrap()
}

/// `kill -9` of node `i`'s daemon, returning once the process has ended
/// (gone, or a zombie: its locks are released), so that a restart does not
/// find its instance lock still held (a generous guard, not a timing check).
fn kill9_node(bed: &Bed, i: usize) {
    let pid = bed.pid(i).expect("the node runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let stat = format!("/proc/{pid}/stat");
    let ended = || {
        std::fs::read_to_string(&stat)
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    };
    let started = std::time::Instant::now();
    while !ended() && started.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        ended(),
        "node {i}'s daemon (pid {pid}) still runs after kill -9"
    );
}

/// `bed` with `key: value` added to the cluster section of every node's
/// config (before it starts).
fn with_cluster_key(bed: Bed, key_value: &str) -> Bed {
    for node in &bed.nodes {
        let y = std::fs::read_to_string(&node.config).unwrap();
        let y = y.replacen(
            "  pages_where_written:",
            &format!("  {key_value}\n  pages_where_written:"),
            1,
        );
        assert!(
            y.contains(key_value),
            "no cluster section in {}",
            node.config.display()
        );
        std::fs::write(&node.config, y).unwrap();
    }
    bed
}

/// `strata run -- sh -c SCRIPT` inside node `i` (its namespace, its daemon),
/// buffering the shared destination; its output.
fn run_on(bed: &Bed, i: usize, script: &str) -> std::process::Output {
    run_on_mode(bed, i, "default", script)
}

/// [`run_on`] in persist mode `mode`.
fn run_on_mode(bed: &Bed, i: usize, mode: &str, script: &str) -> std::process::Output {
    let n = &bed.nodes[i];
    let mut c = bed.in_node(i, &bed.strata);
    c.arg("--config")
        .arg(&n.config)
        .args(["run", "--mode", mode, "--include"])
        .arg(&bed.dest)
        .args(["--", "sh", "-c", script])
        .current_dir(&bed.dest)
        .env("STRATA_SOCKET", &n.socket)
        .env_remove("LD_PRELOAD")
        .env("LC_ALL", "C");
    let o = c.output().expect("strata run");
    if !o.status.success() {
        print_daemon_logs(bed);
    }
    ok(&o, &format!("node {i}: {script}"));
    o
}

/// Real, unmodified programs under `strata run` on one node, their outputs
/// read by real programs on the others, with files at their path's owner:
/// the bytes are the ones the writer wrote, never the destination's stale
/// (or absent) ones, `ls` on another node lists files only buffered so
/// far, and after `cluster stop` the destination holds them all.
#[test]
fn real_programs_on_one_node_read_on_another() {
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let d = bed.dest.display().to_string();
    run_on(
        &bed,
        1,
        &format!(
            "set -e; seq 1 200000 > {d}/seq.txt; mkdir -p {d}/tree; \
             for i in 1 2 3 4 5 6 7 8; do seq $i 5000 > {d}/tree/part$i; done; \
             cp {d}/seq.txt {d}/tree/copy.txt"
        ),
    );
    // tar in a run of its own: while the flusher creates the new files of
    // `tree` at the destination, the directory's ctime moves and GNU tar
    // reports "file changed as we read it" (exit 1) — a known gap of the
    // background drain (docs/ARCHITECTURE.md, known gaps), not what this test is
    // about; the first run's final drain has finished it.
    run_on(&bed, 1, &format!("tar -C {d} -cf {d}/tree.tar tree"));
    let expect_seq: String = (1..=200000).map(|i| format!("{i}\n")).collect();
    let out = run_on(&bed, 2, &format!("cat {d}/seq.txt"));
    assert!(
        out.stdout == expect_seq.as_bytes(),
        "seq.txt read on node 2 differs"
    );
    let out = run_on(&bed, 0, &format!("ls {d} {d}/tree"));
    let listing = String::from_utf8_lossy(&out.stdout);
    for name in ["seq.txt", "tree.tar", "part1", "part8", "copy.txt"] {
        assert!(
            listing.contains(name),
            "ls on node 0 misses {name}: {listing}"
        );
    }
    let out = run_on(
        &bed,
        0,
        &format!(
            "set -e; cd {d}; mkdir x; tar -C x -xf tree.tar; cat x/tree/part3 x/tree/copy.txt"
        ),
    );
    let part3: String = (3..=5000).map(|i| format!("{i}\n")).collect();
    assert!(
        out.stdout == format!("{part3}{expect_seq}").as_bytes(),
        "a tar made on node 1, unpacked on node 0, differs"
    );
    // Mapped on another node than the writer's (python's mmap, shared and
    // private), read and written: the same bytes as read(2) gives.
    if has_python() {
        let py = format!(
            "import mmap; f = open('{d}/tree/part1', 'r+b'); m = mmap.mmap(f.fileno(), 0); \
             assert m[:4] == b'1\\n2\\n', m[:4]; m[0:1] = b'X'; m.flush(); m.close(); f.close(); \
             g = open('{d}/tree/part1', 'rb'); assert g.read(4) == b'X\\n2\\n'; print('mapped')"
        );
        let out = run_on(&bed, 2, &format!("python3 -c \"{py}\""));
        assert_eq!(out.stdout, b"mapped\n");
        let out = run_on(&bed, 0, &format!("head -c 4 {d}/tree/part1"));
        assert_eq!(
            out.stdout, b"X\n2\n",
            "a write through a mapping on node 2, read on node 0"
        );
    }
    // Moves between two owners' names (the file is handed to the
    // destination, then moved there): mv and ln on node 1, a directory
    // renamed on node 0, all read on node 2.
    let src = path_owned_by(&bed, "mv-src-", 0);
    let dst = path_owned_by(&bed, "mv-dst-", 2);
    let lnk = path_owned_by(&bed, "ln-", 1);
    run_on(
        &bed,
        1,
        &format!("set -e; seq 7 70000 > {src}; mv {src} {dst}; ln {dst} {lnk}; echo more >> {lnk}"),
    );
    let moved: String = (7..=70000).map(|i| format!("{i}\n")).collect::<String>() + "more\n";
    let out = run_on(&bed, 2, &format!("cat {dst}; test ! -e {src} && echo gone"));
    assert!(
        out.stdout == format!("{moved}gone\n").as_bytes(),
        "mv + ln across owners, read on node 2"
    );
    // Renamed between owners by the process that holds it open: its
    // descriptor follows the file, as with the kernel.
    let (held, held2) = (
        path_owned_by(&bed, "held-", 0),
        path_owned_by(&bed, "held2-", 2),
    );
    if has_python() {
        let py = format!(
            "import os; f = open('{held}', 'a'); f.write('x'); f.flush(); os.rename('{held}', '{held2}'); \
             f.write('y'); f.close(); print(open('{held2}').read())"
        );
        let out = run_on(&bed, 1, &format!("python3 -c \"{py}\""));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "xy\n");
    }
    // Renamed by another process (mv) while a shell holds it open: EXDEV,
    // so mv copies and unlinks, as between two file systems; nothing the
    // file held before the move is lost.
    let (h3, h4) = (
        path_owned_by(&bed, "held3-", 0),
        path_owned_by(&bed, "held4-", 2),
    );
    let out = run_on(
        &bed,
        1,
        &format!("set -e; exec 3>>{h3}; echo x >&3; mv {h3} {h4}; exec 3>&-; cat {h4}; test ! -e {h3} && echo gone"),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\ngone\n");
    run_on(
        &bed,
        0,
        &format!("set -e; mv {d}/tree {d}/tree2; echo new > {d}/tree2/part9"),
    );
    let out = run_on(
        &bed,
        2,
        &format!("cat {d}/tree2/part8 {d}/tree2/part9; test ! -e {d}/tree && echo gone"),
    );
    let part8: String = (8..=5000).map(|i| format!("{i}\n")).collect();
    assert!(
        out.stdout == format!("{part8}new\ngone\n").as_bytes(),
        "a directory renamed on node 0, read on node 2"
    );
    // Appending from node 2 to a file node 1 wrote: node 0 sees both.
    run_on(&bed, 2, &format!("echo tail >> {d}/seq.txt"));
    let out = run_on(&bed, 0, &format!("tail -n 2 {d}/seq.txt"));
    assert_eq!(out.stdout, b"200000\ntail\n");
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
    let at_dest = std::fs::read(bed.dest.join("seq.txt")).unwrap();
    assert!(
        at_dest == format!("{expect_seq}tail\n").as_bytes(),
        "seq.txt at the destination differs"
    );
    assert_eq!(
        std::fs::read(bed.dest.join("tree2/part8")).unwrap(),
        part8.as_bytes()
    );
    assert_eq!(
        std::fs::read(bed.dest.join("tree2/part9")).unwrap(),
        b"new\n"
    );
    assert!(std::fs::read(&dst).unwrap() == moved.as_bytes());
    assert!(std::fs::read(&lnk).unwrap() == moved.as_bytes());
    let part1 = std::fs::read(bed.dest.join("tree2/part1")).unwrap();
    let py_ran = has_python();
    let first: &[u8] = if py_ran { b"X\n2\n" } else { b"1\n2\n" };
    assert!(
        part1.starts_with(first),
        "part1 at the destination: {:?}",
        &part1[..8]
    );
    assert_eq!(
        std::fs::read(bed.dest.join("x/tree/part8")).unwrap(),
        part8.as_bytes()
    );
}

/// Seed 000's checkpoint and restart under a job launcher, across 4
/// namespace nodes: `mpirun -np 8 --map-by ppr:2:node` over a hostfile of
/// the node addresses (`Bed::mpirun`), each rank under `strata run` with
/// its node's daemon (STRATA_CONFIG of the node it runs on), running the
/// IOR-like tests/adapter/mpi_ckpt.c: N-N (a file per rank) and N-1 (one
/// shared file, IOR's segmented layout, blocks not page-aligned), each
/// written with fsync + close and read back one node further (IOR -C),
/// every byte checked by the program; in DEFAULT and SCRATCH modes. The
/// DEFAULT files at the destination equal a plain run's byte for byte;
/// the SCRATCH ones never reach it and read back on another node.
#[test]
fn an_mpi_checkpoint_on_four_nodes_restarts_one_node_further() {
    if !(adapter_util::require("mpirun", "openmpi-bin")
        && adapter_util::require("mpicc", "libopenmpi-dev"))
    {
        return;
    }
    adapter_util::preload_lib();
    let bed = started_with(cluster_util::bed_with_files(4, "512MiB", None));
    if bed.kind != "netns" {
        // On 127.x addresses every "node" has this machine's host name, and
        // Open MPI's TCP transport between ranks of different "nodes" is
        // unreliable there (CI saw "unable to complete a TCP connection").
        eprintln!(
            "mpirun across nodes needs network namespaces: skipped on {}",
            bed.kind
        );
        return;
    }
    let exe = bed.dir.path().join("mpi_ckpt");
    let cc = std::process::Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(adapter_util::adapter_src("mpi_ckpt.c"))
        .output()
        .unwrap();
    ok(&cc, "mpicc mpi_ckpt.c");
    // 1 MiB + 4097 bytes per block: rank boundaries fall inside pages.
    let (block, xfer, segs) = ("1052673", "262144", "3");
    let layouts = ["nn", "n1"];
    // POSIX calls, and collective MPI-IO calls through the MPI-IO adapter
    // (strata run preloads it for an MPI program): the same bytes
    let apis = [("", ""), ("coll", "-coll")];
    let reference = bed.dir.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    for (l, (_, suffix)) in layouts.into_iter().flat_map(|l| apis.map(|a| (l, a))) {
        let mut c = std::process::Command::new("mpirun");
        c.args(["--oversubscribe", "-np", "8"])
            .arg(&exe)
            .arg(l)
            .arg(reference.join(format!("ck-{l}{suffix}")))
            .args([block, xfer, segs])
            .env_remove("LD_PRELOAD");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        ok(&c.output().unwrap(), "mpi_ckpt without strata");
    }
    for mode in ["default", "scratch"] {
        let dir = bed.dest.join(mode);
        std::fs::create_dir_all(&dir).unwrap();
        for (l, (api, suffix)) in layouts.into_iter().flat_map(|l| apis.map(|a| (l, a))) {
            let mut c = bed.mpirun(2).expect("mpirun across the bed");
            c.arg(&bed.strata)
                .args(["run", "--mode", mode, "--include"])
                .arg(&bed.dest)
                .arg("--")
                .arg(&exe)
                .arg(l)
                .arg(dir.join(format!("ck-{l}{suffix}")))
                .args([block, xfer, segs])
                .args((!api.is_empty()).then_some(api))
                // the restart read three times: the third pass reads the
                // pages each node read twice from its replicas
                .arg("reads=3")
                .current_dir(&dir)
                .env("LC_ALL", "C");
            let out = c.output().unwrap();
            if !out.status.success() {
                print_daemon_logs(&bed);
            }
            ok(
                &out,
                &format!(
                    "mpirun ({}) strata run --mode {mode} -- mpi_ckpt {l} {api}",
                    bed.kind
                ),
            );
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                said.starts_with(&format!("ok {l} ranks=8 per_node=2 ")),
                "{mode} {l}: {said}"
            );
        }
    }
    let replicated: u64 = (0..bed.nodes.len())
        .map(|i| {
            node_status(&bed, i)["files"]["replica_read_bytes_total"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert!(replicated > 0, "the third read passes read replicas");
    // DEFAULT: every rank's `strata run` drained the cluster at its end.
    adapter_util::assert_same_tree(
        &bed.dest.join("default"),
        &reference,
        &|_| false,
        "mpi_ckpt across 4 nodes (DEFAULT, at the destination)",
    );
    // SCRATCH: nothing at the destination; the buffer still has them, on any node.
    let left: Vec<_> = std::fs::read_dir(bed.dest.join("scratch"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "SCRATCH files at the destination: {left:?}"
    );
    let sums = |dir: &std::path::Path, i: usize| {
        let script = format!(
            "cd {}; cksum ck-n1 ck-nn.0 ck-nn.7 ck-n1-coll ck-nn-coll.3",
            dir.display()
        );
        if dir.starts_with(&bed.dest) {
            String::from_utf8(run_on_mode(&bed, i, "scratch", &script).stdout).unwrap()
        } else {
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .output()
                .unwrap();
            String::from_utf8(o.stdout).unwrap()
        }
    };
    let want = sums(&reference, 0);
    assert_eq!(sums(&bed.dest.join("scratch"), 3), want);

    // Every MPI-IO call of the adapter across the nodes (shared file
    // pointers and atomic mode on the sidecar's record locks, views,
    // collectives), compared call by call with ROMIO on untracked twins.
    let calls = bed.dir.path().join("mpiio_calls");
    let cc = std::process::Command::new("mpicc")
        .args(["-O1", "-o"])
        .arg(&calls)
        .arg(adapter_util::adapter_src("mpiio_calls.c"))
        .output()
        .unwrap();
    ok(&cc, "mpicc mpiio_calls.c");
    let (buf, twin) = (bed.dest.join("mpiio"), bed.dir.path().join("mpiio-twin"));
    std::fs::create_dir_all(&buf).unwrap();
    std::fs::create_dir_all(&twin).unwrap();
    let mut c = bed.mpirun(2).expect("mpirun across the bed");
    c.args(["--mca", "io", "romio321"])
        .arg(&bed.strata)
        .args(["run", "--mode", "default", "--include"])
        .arg(&bed.dest)
        .arg("--")
        .arg(&calls)
        .arg(&buf)
        .arg(&twin)
        .current_dir(&buf)
        .env("LC_ALL", "C");
    let out = c.output().unwrap();
    ok(&out, "mpirun strata run -- mpiio_calls across 4 nodes");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("ok ") && said.contains("buffered=1"),
        "mpiio_calls across nodes: {said}"
    );
    adapter_util::assert_same_tree(
        &buf,
        &twin,
        &|_| false,
        "MPI-IO files across 4 nodes (DEFAULT, drained) vs ROMIO's",
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// The `srun` form of the job-launcher workflow: Slurm across the 4
/// namespace nodes (`Bed::slurm`: a slurmd in each node, the controller on
/// the bridge), `srun -N 4 --ntasks-per-node=2 strata run -- writer` — every
/// task reaches its own node's daemon (the node-local config a TaskProlog
/// exports, as on real nodes), writes its checkpoint file, and a second
/// step reads the file of the rank one node further (IOR `-C`) and checks
/// every byte; DEFAULT files are at the destination after the steps (each
/// `strata run` drains cluster-wide), SCRATCH files are not, and still read
/// back shifted.
#[test]
fn srun_ranks_use_their_nodes_daemons_and_restart_one_node_further() {
    if !(adapter_util::require("srun", "slurm-client")
        && adapter_util::require("slurmd", "slurmd")
        && adapter_util::require("slurmctld", "slurmctld")
        && adapter_util::require("munged", "munge")
        && has_python())
    {
        return;
    }
    adapter_util::preload_lib();
    let bed = started_with(cluster_util::bed_with_files(4, "512MiB", None));
    if bed.kind != "netns" {
        eprintln!(
            "srun across nodes needs network namespaces: skipped on {}",
            bed.kind
        );
        return;
    }
    let slurm = bed.slurm().expect("Slurm across the bed");
    let job = bed.dir.path().join("ckpt_job.py");
    std::fs::write(
        &job,
        r#"import hashlib, os, sys
phase, d, per_node = sys.argv[1], sys.argv[2], int(sys.argv[3])
def data(k):  # 1 MiB + 4097 bytes: page-unaligned
    return (hashlib.sha256(b"rank%d" % k).digest() * 33000)[: (1 << 20) + 4097]
if phase == "check":  # outside strata: the destination's files
    bad = [k for k in range(8) if open(os.path.join(d, "ck.%d" % k), "rb").read() != data(k)]
    print("checked", "bad", bad)
    sys.exit(1 if bad else 0)
r, n = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
where = "%s %s" % (os.environ["SLURMD_NODENAME"], os.environ.get("STRATA_SOCKET"))
if phase == "write":
    with open(os.path.join(d, "ck.%d" % r), "wb") as f:
        f.write(data(r))
    print("wrote", r, where)
else:
    k = (r + per_node) % n
    with open(os.path.join(d, "ck.%d" % k), "rb") as f:
        same = f.read() == data(k)
    print("read", r, k, "same" if same else "DIFFERENT", where)
"#,
    )
    .unwrap();
    let socket_of: std::collections::HashMap<String, String> = bed
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.socket.display().to_string()))
        .collect();
    for mode in ["default", "scratch"] {
        let dir = bed.dest.join(format!("srun-{mode}"));
        std::fs::create_dir_all(&dir).unwrap();
        for phase in ["write", "read"] {
            let mut c = slurm.srun(2);
            c.arg(&bed.strata)
                .args(["run", "--quiet", "--mode", mode, "--include"])
                .arg(&bed.dest)
                .args(["--", "python3"])
                .arg(&job)
                .arg(phase)
                .arg(&dir)
                .arg("2")
                .current_dir(&dir);
            let out = c.output().unwrap();
            if !out.status.success() {
                print_daemon_logs(&bed);
                eprintln!("{}", slurm.logs());
            }
            ok(
                &out,
                &format!("srun strata run --mode {mode} -- ckpt_job {phase}"),
            );
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            let said_word = if phase == "write" { "wrote " } else { "read " };
            let lines: Vec<&str> = said.lines().filter(|l| l.starts_with(said_word)).collect();
            assert_eq!(lines.len(), 8, "{mode} {phase}: 8 ranks answer: {said}");
            let mut per_node: std::collections::HashMap<&str, usize> = Default::default();
            for l in &lines {
                let w: Vec<&str> = l.split_whitespace().collect();
                let (node, socket) = (w[w.len() - 2], w[w.len() - 1]);
                // each rank used its own node's daemon
                assert_eq!(socket_of.get(node).map(String::as_str), Some(socket), "{l}");
                *per_node.entry(node).or_default() += 1;
                if phase == "read" {
                    assert!(l.contains(" same "), "{mode}: {l}");
                }
            }
            assert_eq!(
                per_node.len(),
                4,
                "{mode} {phase}: 2 ranks on each node: {said}"
            );
            assert!(per_node.values().all(|&k| k == 2), "{said}");
        }
        let at_dest = std::fs::read_dir(&dir).unwrap().flatten().count();
        match mode {
            // every strata run drained the cluster at its end
            "default" => {
                assert_eq!(at_dest, 8, "DEFAULT files at the destination");
                let chk = std::process::Command::new("python3")
                    .arg(&job)
                    .args(["check"])
                    .arg(&dir)
                    .arg("2")
                    .env_remove("LD_PRELOAD")
                    .output()
                    .unwrap();
                ok(&chk, "the destination's bytes (outside strata)");
            }
            _ => assert_eq!(at_dest, 0, "SCRATCH files never reach the destination"),
        }
    }
    drop(slurm);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// A node killed with SIGKILL while its files are dirty (written and
/// fsync'ed from other nodes, journaled on its dir tier, not yet drained:
/// its background flusher is off): `strata drain status` and `flush
/// --wait` elsewhere name it instead of calling anything clean, reads of
/// its files answer EIO (the file API and `cat` under `strata run`), other
/// nodes' files stay readable; restarted alone, it replays its journal and
/// a cluster-wide `flush --wait` completes the files at the destination.
#[test]
fn a_node_killed_with_dirty_files_is_named_and_its_restart_completes_them() {
    use strata_client::file::{OpenFlags, Persist};
    // Pages at the owner (`cluster.pages_where_written: false`), where the
    // other nodes' fsync'ed writes live in node 2's journal; with pages
    // where written, see `a_killed_owner_gets_its_map_…` and
    // `a_killed_holders_journaled_pages_…`.
    let bed = cluster_util::bed_with_files_pages(3, "128MiB", Some("256MiB"), false);
    let cfg2 = bed.nodes[2].config.clone();
    let base = std::fs::read_to_string(&cfg2).unwrap();
    std::fs::write(&cfg2, format!("{base}flush:\n  enabled: false\n")).unwrap();
    let bed = started_with(bed);
    let clients = clients_of(&bed);
    let rw_create = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page = 64 << 10;
    // N-1 from nodes 0 and 1 into a file owned by node 2, unaligned, fsync'ed.
    let p2 = path_owned_by(&bed, "dirty-", 2);
    let l = 5 * page + 777;
    let expect: Vec<u8> = (0..2).flat_map(|i| pattern(l, 40 + i)).collect();
    for (i, c) in clients[..2].iter().enumerate() {
        let a = c
            .file_open(&p2, rw_create, 0o644, Persist::Default, page as u64)
            .unwrap();
        c.file_write(a.id, (i * l) as u64, &expect[i * l..(i + 1) * l])
            .unwrap();
        c.file_sync(a.id).unwrap();
        c.file_close(a.id).unwrap();
    }
    // A file owned by node 1, the control.
    let p1 = path_owned_by(&bed, "alive-", 1);
    let a = clients[0]
        .file_open(&p1, rw_create, 0o644, Persist::Default, page as u64)
        .unwrap();
    clients[0]
        .file_write(a.id, 0, b"node 1 keeps this")
        .unwrap();
    clients[0].file_sync(a.id).unwrap();
    clients[0].file_close(a.id).unwrap();
    assert!(!std::path::Path::new(&p2).exists(), "drained too early");

    let on1 = |args: &[&str]| strata_on(&bed, 1, args);
    let read_only = OpenFlags {
        read: true,
        ..Default::default()
    };
    let dest = bed.dest.display().to_string();
    let pid = bed.pid(2).expect("node 2 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let name2 = &bed.nodes[2].name;

    let st = on1(&["drain", "status", "--json", &dest]);
    ok(&st, "drain status on node 1 with node 2 dead");
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let named = v["files"].as_array().unwrap().iter().any(|f| {
        f["state"] == "failed"
            && f["error"]
                .as_str()
                .is_some_and(|e| e.contains(name2.as_str()))
    });
    assert!(named && v["failed_files"].as_u64() >= Some(1), "{v:#}");
    let fl = on1(&["flush", "--wait", &dest]);
    let said = String::from_utf8_lossy(&fl.stderr);
    assert!(
        !fl.status.success(),
        "flush --wait with a dead node: {said}"
    );
    assert!(said.contains(name2.as_str()), "{said}");

    // Reads of node 2's file: EIO, through the API and for a real program.
    let e = clients[1]
        .file_open(&p2, read_only, 0, Persist::Default, page as u64)
        .unwrap_err();
    assert_eq!(e.os_errno(), libc::EIO, "{e}");
    let mut cat = bed.in_node(0, &bed.strata);
    cat.arg("--config")
        .arg(&bed.nodes[0].config)
        .args([
            "run",
            "-q",
            "--mode",
            "default",
            "--include",
            &dest,
            "--",
            "cat",
            &p2,
        ])
        .env_remove("LD_PRELOAD");
    let cat = cat.output().unwrap();
    let said = String::from_utf8_lossy(&cat.stderr);
    assert!(
        !cat.status.success() && cat.stdout.is_empty(),
        "cat of a dead node's file: {said}"
    );
    assert!(said.contains("Input/output error"), "{said}");
    // Node 1's file is untouched by node 2's death.
    let b = clients[0]
        .file_open(&p1, read_only, 0, Persist::Default, page as u64)
        .unwrap();
    let mut buf = [0u8; 64];
    let n = clients[0].file_read(b.id, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"node 1 keeps this");
    clients[0].file_close(b.id).unwrap();
    assert!(
        !std::path::Path::new(&p2).exists(),
        "persisted while its node was dead"
    );

    // Node 2 restarts (background flushing on again) and replays its journal.
    std::fs::write(&cfg2, &base).unwrap();
    ok(&bed.start(2), "node 2 restarts alone");
    bed.wait_for("node 2 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 2) == "up")
    });
    ok(
        &on1(&["flush", "--wait", &dest]),
        "flush --wait after node 2's restart",
    );
    assert!(
        std::fs::read(&p2).unwrap() == expect,
        "node 2's file at the destination"
    );
    assert_eq!(std::fs::read(&p1).unwrap(), b"node 1 keeps this");
    let c = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let b = c
        .file_open(&p2, read_only, 0, Persist::Default, page as u64)
        .unwrap();
    let mut got = vec![0u8; expect.len() + 1];
    let n = c.file_read(b.id, 0, &mut got).unwrap();
    assert!(
        n == expect.len() && got[..n] == expect[..],
        "read on node 1 after the restart"
    );
    drop(clients);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// `strata stage-in` and `stage-out` across nodes (files at their owner):
/// a tree staged in from node 1 is buffered at each file's owner (node 2
/// reads it without the destination), WORKFLOW changes made on node 2 stay
/// off the destination, and `stage-out --evict` on node 0 writes every
/// node's files there and drops them from the buffer — then `drain
/// status` on node 1 lists none of them dirty.
#[test]
fn stage_in_and_out_cover_every_node() {
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let tree = bed.dest.join("inputs");
    std::fs::create_dir_all(&tree).unwrap();
    let names: Vec<String> = (0..3)
        .map(|n| {
            let p = path_owned_by(&bed, "inputs/in-", n);
            std::fs::write(&p, format!("input owned by node {n}\n")).unwrap();
            p
        })
        .collect();
    let cli = |i: usize, args: &[&str]| {
        let o = strata_on(&bed, i, args);
        ok(&o, &format!("node {i}: strata {}", args.join(" ")));
        o
    };
    let t = tree.display().to_string();
    cli(1, &["stage-in", "-q", "--mode", "workflow", &t]);
    // Buffered at their owners: each node holds a record, and reading them
    // on node 2 reads no node's destination.
    let files = |n: usize| node_status(&bed, n)["files"].clone();
    let from_dest: Vec<u64> = (0..3)
        .map(|n| {
            let f = files(n);
            assert!(
                f["files"].as_u64() >= Some(1),
                "node {n} holds no staged file: {f}"
            );
            f["read_dest_bytes_total"].as_u64().unwrap()
        })
        .collect();
    let out = run_on_mode(&bed, 2, "workflow", &format!("cat {}", names.join(" ")));
    let want: String = (0..3)
        .map(|n| format!("input owned by node {n}\n"))
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        want,
        "staged files read on node 2"
    );
    for (n, before) in from_dest.iter().enumerate() {
        assert_eq!(
            files(n)["read_dest_bytes_total"].as_u64(),
            Some(*before),
            "node {n} read a staged file from the destination"
        );
    }
    let appends: String = names
        .iter()
        .map(|p| format!("echo changed >> {p}; "))
        .collect();
    run_on_mode(&bed, 2, "workflow", &appends);
    for (n, p) in names.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(p).unwrap(),
            format!("input owned by node {n}\n"),
            "a WORKFLOW change reached the destination before stage-out"
        );
    }
    let o = cli(0, &["stage-out", "-q", "--evict", &t]);
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    for (n, p) in names.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(p).unwrap(),
            format!("input owned by node {n}\nchanged\n"),
            "{p} after stage-out on node 0"
        );
    }
    let ds = cli(1, &["drain", "status", "--json", &t]);
    let v: serde_json::Value = serde_json::from_slice(&ds.stdout).unwrap();
    assert_eq!(v["dirty_files"].as_u64(), Some(0), "{v:#}");
    assert_eq!(v["failed_files"].as_u64(), Some(0), "{v:#}");
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// A file renamed between two owners' names by the process that holds it
/// open stays one file (the differential tester's seed 46 across nodes):
/// the moved descriptor writes the destination file itself, so the new
/// name is held *direct* until the process ends — a second open of it sees
/// the moved descriptor's writes and the other way round, an `O_TRUNC`
/// open truncates that very file, and the drain leaves no "changed outside
/// strata" copy.
#[test]
fn a_file_renamed_between_owners_while_open_stays_one_file() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let (x, y) = (
        path_owned_by(&bed, "open-", 0),
        path_owned_by(&bed, "moved-", 2),
    );
    let py = format!(
        "import os\n\
         f = open('{x}', 'w+b'); f.write(b'a' * 1000); f.flush()\n\
         os.rename('{x}', '{y}')\n\
         g = open('{y}', 'r+b')\n\
         f.write(b'b' * 10); f.flush()\n\
         got = g.read(); assert got == b'a' * 1000 + b'b' * 10, len(got)\n\
         g.seek(0); g.write(b'c'); g.flush()\n\
         f.seek(0); assert f.read(1) == b'c'\n\
         open('{y}', 'wb').close()\n\
         assert os.stat('{y}').st_size == 0\n\
         f.seek(0); f.write(b'after'); f.flush()\n\
         g.seek(0); assert g.read() == b'after'\n\
         print('one file')\n"
    );
    let out = run_on(&bed, 1, &format!("python3 -c \"{py}\""));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one file\n");
    let out = run_on(&bed, 0, &format!("cat {y}"));
    assert_eq!(out.stdout, b"after", "read on node 0");
    // A hard link between two owners' names, then a truncation by path:
    // the destination file (two names) is the file, and every stat sees
    // the truncation at once (it stayed in a buffered record the stats
    // did not read: the differential tester's seed 31 with links).
    let (b, l) = (
        path_owned_by(&bed, "linked-", 2),
        path_owned_by(&bed, "link-", 0),
    );
    let py = format!(
        "import os\n\
         open('{b}', 'wb').write(b'x' * 4097)\n\
         os.link('{b}', '{l}')\n\
         os.truncate('{b}', 4095)\n\
         sizes = (os.stat('{b}').st_size, os.stat('{l}').st_size, len(open('{l}', 'rb').read()))\n\
         assert sizes == (4095, 4095, 4095), sizes\n\
         print('truncated')\n"
    );
    let out = run_on(&bed, 1, &format!("python3 -c \"{py}\""));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "truncated\n");
    let out = run_on(&bed, 2, &format!("stat -c %s {l} {b}"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "4095\n4095\n",
        "on node 2"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
    assert_eq!(std::fs::read(&y).unwrap(), b"after");
    assert_eq!(std::fs::read(&l).unwrap(), vec![b'x'; 4095]);
    let copies: Vec<_> = std::fs::read_dir(&bed.dest)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("strata-outside"))
        .map(|e| e.file_name())
        .collect();
    assert!(copies.is_empty(), "conflict copies: {copies:?}");
}

/// A DEFAULT file another process holds open — on another node — renamed
/// between two owners' names: the log-rotation pattern (`mv log log.1`
/// while the logger appends). The holder moves its descriptor onto the
/// destination file at its next write (the rename made the file direct and
/// told every node), so `mv` goes on instead of answering `EXDEV` — which
/// made mv copy the file and unlink it, and the logger's later lines went
/// to the unlinked copy, lost. Every line ends in the new name, in order,
/// on every node and at the destination; the old name is gone.
#[test]
fn a_file_another_node_holds_open_follows_a_rename_between_owners() {
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let (x, y) = (
        path_owned_by(&bed, "app.log-", 0),
        path_owned_by(&bed, "app.log.1-", 2),
    );
    // The logger on node 1: appends ticks until it sees the new name (at
    // most 1500 of them), then 5 lines more on the same descriptor.
    let logger = format!(
        "exec 3>>{x}; i=0; \
         while [ ! -e {y} ] && [ $i -lt 1500 ]; do echo tick $i >&3; i=$((i+1)); sleep 0.02; done; \
         for j in 1 2 3 4 5; do echo after $j >&3; done; exec 3>&-; echo $i"
    );
    // The rotation on node 2, once the log has a few lines.
    let rotate = format!(
        "n=0; while [ \"$(stat -c %s {x} 2>/dev/null || echo 0)\" -lt 40 ] && [ $n -lt 1500 ]; \
         do sleep 0.02; n=$((n+1)); done; mv {x} {y} && echo moved"
    );
    let (ticks, moved) = std::thread::scope(|s| {
        let w = s.spawn(|| run_on(&bed, 1, &logger));
        let m = run_on(&bed, 2, &rotate);
        (w.join().unwrap(), m)
    });
    assert_eq!(String::from_utf8_lossy(&moved.stdout), "moved\n");
    let ticks: usize = String::from_utf8_lossy(&ticks.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(ticks < 1500, "the logger never saw {y}");
    let mut want = String::new();
    for i in 0..ticks {
        want.push_str(&format!("tick {i}\n"));
    }
    for j in 1..=5 {
        want.push_str(&format!("after {j}\n"));
    }
    for n in 0..3 {
        let out = run_on(&bed, n, &format!("cat {y}; test ! -e {x} && echo gone"));
        assert!(
            String::from_utf8_lossy(&out.stdout) == format!("{want}gone\n"),
            "node {n} reads {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
    assert_eq!(std::fs::read_to_string(&y).unwrap(), want);
    assert!(!std::path::Path::new(&x).exists());
}

/// A shared writable mapping on one node of a DEFAULT file a process on
/// another node holds open: that process's descriptors move onto the
/// destination file too (the mapper's node tells every node,
/// `DirectNotice`), so its next read sees what the mapping wrote — it read
/// the owner's buffered pages, stale, while only the owner's own clients
/// were told.
#[test]
fn a_shared_mapping_on_one_node_is_seen_by_a_holder_on_another() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let (x, mark) = (
        path_owned_by(&bed, "mapped-", 0),
        path_owned_by(&bed, "mapped-mark-", 0),
    );
    let holder = format!(
        "import os, time\n\
         f = open('{x}', 'w+b'); f.write(b'a' * 8192); f.flush()\n\
         n = 0\n\
         while not os.path.exists('{mark}') and n < 1500:\n    time.sleep(0.02); n += 1\n\
         f.seek(0); print(f.read(6).decode())\n"
    );
    let mapper = format!(
        "import os, time, mmap\n\
         n = 0\n\
         while (not os.path.exists('{x}') or os.stat('{x}').st_size < 8192) and n < 1500:\n    time.sleep(0.02); n += 1\n\
         fd = os.open('{x}', os.O_RDWR)\n\
         m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)\n\
         m[0:4] = b'MMMM'; m.flush()\n\
         open('{mark}', 'w').close()\n\
         print('mapped')\n"
    );
    let (read, mapped) = std::thread::scope(|s| {
        let h = s.spawn(|| run_on(&bed, 1, &format!("python3 -c \"{holder}\"")));
        let m = run_on(&bed, 2, &format!("python3 -c \"{mapper}\""));
        (h.join().unwrap(), m)
    });
    assert_eq!(String::from_utf8_lossy(&mapped.stdout), "mapped\n");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        "MMMMaa\n",
        "read on node 1"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
    let got = std::fs::read(&x).unwrap();
    assert!(
        got.len() == 8192 && got.starts_with(b"MMMMa"),
        "at the destination"
    );
}

/// Read-ahead of remote pages (`cluster.remote_read_ahead`, issue 15 build
/// 3): a process on node 2 reading a file sequentially whose pages node 1
/// holds (owner node 0) hints node 2's daemon, whose read-ahead worker
/// copies the next pieces into node 2's replicas; the reader's next reads
/// — still its first pass over the file — are served from them, every
/// byte right; a rewrite on the holder meanwhile is read at once (the
/// replica read ahead is of the old generation: never served). Without
/// the hint a first read copies nothing (the test above).
#[test]
fn a_first_sequential_read_of_remote_pages_is_read_ahead_into_replicas() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = cluster_util::bed_with_files_pages(3, "512MiB", None, true);
    let bed = started_with(with_cluster_key(bed, "remote_read_ahead: true"));
    let clients = clients_of(&bed);
    assert!(
        clients[2].hello().remote_read_ahead,
        "on in this test's config"
    );
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let (page, piece): (u64, usize) = (64 << 10, 1 << 20);
    let counter =
        |i: usize, name: &str| -> u64 { node_status(&bed, i)["files"][name].as_u64().unwrap_or(0) };
    let p = path_owned_by(&bed, "ahead-", 0);
    let mut data = pattern(16 << 20, 9);
    let w = clients[1]
        .file_open(&p, rw, 0o644, Persist::Scratch, page)
        .unwrap();
    for (k, chunk) in data.chunks(piece).enumerate() {
        clients[1]
            .file_write(w.id, (k * piece) as u64, chunk)
            .unwrap();
    }
    let r = clients[2]
        .file_open(&p, rw, 0o644, Persist::Scratch, page)
        .unwrap();
    let mut buf = vec![0u8; piece];
    let mut read_piece = |k: usize, data: &[u8]| {
        let n = clients[2]
            .file_read(r.id, (k * piece) as u64, &mut buf)
            .unwrap();
        assert_eq!(n, piece);
        assert!(buf[..] == data[k * piece..(k + 1) * piece], "piece {k}");
    };
    // piece 0 hints pieces 1 and 2; wait (bounded) until the worker copied them
    read_piece(0, &data);
    let mut copied = 0;
    for _ in 0..2000 {
        copied = counter(2, "replica_write_bytes_total");
        if copied >= 2 * piece as u64 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        copied >= 2 * piece as u64,
        "node 2 read nothing ahead ({copied} bytes)"
    );
    assert!(
        counter(2, "read_ahead_hints_total") >= 1,
        "status counts the hints"
    );
    let served = counter(2, "replica_read_bytes_total");
    read_piece(1, &data);
    read_piece(2, &data);
    assert!(
        counter(2, "replica_read_bytes_total") >= served + 2 * piece as u64,
        "the pieces read ahead were not served from node 2's replica"
    );
    // Piece 4 is rewritten on the holder after it may have been read ahead:
    // the reader gets the new bytes.
    read_piece(3, &data);
    let new = pattern(piece, 10);
    clients[1]
        .file_write(w.id, (4 * piece) as u64, &new)
        .unwrap();
    data[4 * piece..5 * piece].copy_from_slice(&new);
    for k in 4..16 {
        read_piece(k, &data);
    }
    clients[1].file_close(w.id).unwrap();
    clients[2].file_close(r.id).unwrap();
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// A SCRATCH file renamed between two owners' names moves (copied to the
/// new name's owner, `Client::file_move_node`) instead of answering EXDEV:
/// the checkpoint pattern "write a temporary name, close, rename it into
/// place" under `strata run`, bytes (holes included), mode and mtime kept,
/// replacing an existing file at the target; read on every node; the old
/// name gone everywhere; the renaming process's own descriptors follow
/// (offset kept, writes land in the moved file); a file another process
/// holds open answers EXDEV and keeps its name; nothing reaches the
/// destination. With and without pages where
/// written (the copy reads the writer's pages through their holder).
#[test]
fn scratch_files_move_between_owners_by_rename() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    for pages in [false, true] {
        let bed = started_with(cluster_util::bed_with_files_pages(3, "256MiB", None, pages));
        let (tmp, fin) = (
            path_owned_by(&bed, "ckpt.tmp-", 0),
            path_owned_by(&bed, "ckpt-", 2),
        );
        let other = path_owned_by(&bed, "held-to-", 0);
        let (dir, dir2) = (
            format!("{}/ckpt-dir", bed.dest.display()),
            format!("{}/ckpt-dir-final", bed.dest.display()),
        );
        let py = format!(
            "import os, errno, hashlib\n\
             data = bytes(range(256)) * 12289\n\
             open('{fin}', 'wb').write(b'old checkpoint')\n\
             f = open('{tmp}', 'wb'); f.write(data); f.seek(9 << 20); f.write(b'end'); f.close()\n\
             os.chmod('{tmp}', 0o640); os.utime('{tmp}', ns=(1_000_000_000, 2_000_000_000))\n\
             os.rename('{tmp}', '{fin}')\n\
             assert not os.path.exists('{tmp}')\n\
             st = os.stat('{fin}')\n\
             assert (st.st_size, st.st_mode & 0o777, st.st_mtime_ns) == ((9 << 20) + 3, 0o640, 2_000_000_000), st\n\
             got = open('{fin}', 'rb').read()\n\
             assert got[:len(data)] == data and got[-3:] == b'end' and got[len(data):-3] == bytes(len(got) - len(data) - 3)\n\
             import subprocess, sys\n\
             h = subprocess.Popen([sys.executable, '-c', 'import time; f = open(\\'{fin}\\', \\'rb\\'); f.read(1); print(1, flush=True); time.sleep(60)'], stdout=subprocess.PIPE)\n\
             assert h.stdout.readline() == b'1\\n'\n\
             try:\n    os.rename('{fin}', '{other}'); raise SystemExit('moved while another process holds it')\n\
             except OSError as e:\n    assert e.errno == errno.EXDEV, e\n\
             h.kill(); h.wait()\n\
             g = open('{fin}', 'r+b'); g.seek(5)\n\
             os.rename('{fin}', '{other}')\n\
             assert g.read(3) == data[5:8]\n\
             g.seek(0); g.write(b'X'); g.close()\n\
             os.rename('{other}', '{fin}')\n\
             got = b'X' + got[1:]\n\
             os.mkdir('{dir}')\n\
             for i in range(8): open('{dir}/f%d' % i, 'wb').write(bytes([i + 1]) * (70000 * i + 1))\n\
             os.rename('{dir}', '{dir2}')\n\
             assert not os.path.exists('{dir}') and sorted(os.listdir('{dir2}')) == ['f%d' % i for i in range(8)]\n\
             for i in range(8): assert open('{dir2}/f%d' % i, 'rb').read() == bytes([i + 1]) * (70000 * i + 1), i\n\
             print(hashlib.sha256(got).hexdigest())\n"
        );
        let out = run_on_mode(&bed, 1, "scratch", &format!("python3 -c \"{py}\""));
        let sum = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(
            sum.len(),
            64,
            "node 1: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for n in [0, 2] {
            let out = run_on_mode(
                &bed,
                n,
                "scratch",
                &format!(
                    "sha256sum < {fin} | cut -d' ' -f1; ls {tmp} 2>/dev/null | wc -l; \
                     ls {dir2} | tr '\\n' ' '; cat {dir2}/f7 | wc -c"
                ),
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("{sum}\n0\nf0 f1 f2 f3 f4 f5 f6 f7 490001\n"),
                "node {n} (pages where written: {pages})"
            );
        }
        // nothing was left at either owner under a hidden name
        for (n, c) in clients_of(&bed).iter().enumerate() {
            let left = c.file_list_dir(strata_client::file::MOVING_DIR).unwrap();
            assert!(left.is_empty(), "node {n} keeps {left:?}");
        }
        ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
        // SCRATCH: the old checkpoint the program wrote first was SCRATCH too
        assert!(!std::path::Path::new(&fin).exists() && !std::path::Path::new(&tmp).exists());
    }
}

/// Read-ahead for a reader on another node: a 24 MiB destination file owned
/// by node 2, read sequentially by `cat` under `strata run` on node 0, is
/// read ahead by node 2's prefetcher (its counters move, and the pages it
/// read ahead are used), and the bytes are the destination's.
#[test]
fn read_ahead_serves_a_reader_on_another_node() {
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let p = path_owned_by(&bed, "big-", 2);
    let data = pattern(24 << 20, 77);
    std::fs::write(&p, &data).unwrap();
    let prefetch = |n: usize| node_status(&bed, n)["prefetch"].clone();
    let before = prefetch(2);
    let out = run_on(&bed, 0, &format!("cat {p}"));
    assert!(out.stdout == data, "the file read on node 0 differs");
    let after = prefetch(2);
    let moved = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    assert!(
        moved("readahead_bytes_total") > 0 && moved("used_bytes_total") > 0,
        "node 2 read nothing ahead for node 0's reader: before {before}, after {after}"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// Name operations racing across nodes, files at their owner: `mv` of one
/// file from two nodes at once and `rm` from three — exactly one wins,
/// the file ends under one name with its bytes; `O_EXCL` creates of the
/// same 40 names from three nodes — one winner each; `stat` on one node
/// while another appends — sizes only grow, by whole records; listings on
/// one node while another creates — each a subset of the final one, which
/// has every name.
#[test]
fn name_operations_race_across_nodes() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = started_with(cluster_util::bed_with_files(3, "256MiB", None));
    let page = 64 << 10;
    // Real programs: mv from nodes 1 and 2, rm from all three.
    let x = path_owned_by(&bed, "race-", 0);
    let (y1, y2) = (
        path_owned_by(&bed, "to1-", 0),
        path_owned_by(&bed, "to2-", 0),
    );
    let z = path_owned_by(&bed, "gone-", 1);
    run_on(&bed, 0, &format!("seq 1 1000 > {x}; echo z > {z}"));
    let race = |cmds: Vec<(usize, String)>| -> Vec<bool> {
        std::thread::scope(|s| {
            let hs: Vec<_> = cmds
                .into_iter()
                .map(|(i, cmd)| {
                    let bed = &bed;
                    s.spawn(move || {
                        let n = &bed.nodes[i];
                        let mut c = bed.in_node(i, &bed.strata);
                        c.arg("--config")
                            .arg(&n.config)
                            .args(["run", "-q", "--mode", "default", "--include"])
                            .arg(&bed.dest)
                            .args(["--", "sh", "-c", &cmd])
                            .env_remove("LD_PRELOAD");
                        c.output().unwrap().status.success()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let won = race(vec![
        (1, format!("mv -T {x} {y1}")),
        (2, format!("mv -T {x} {y2}")),
    ]);
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "mv from two nodes: {won:?}"
    );
    let winner = if won[0] { &y1 } else { &y2 };
    let loser = if won[0] { &y2 } else { &y1 };
    let seq: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    let out = run_on(
        &bed,
        2,
        &format!("cat {winner}; test ! -e {x} && test ! -e {loser} && echo one-name"),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{seq}one-name\n")
    );
    let won = race((0..3).map(|i| (i, format!("rm {z}"))).collect());
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "rm from three nodes: {won:?}"
    );

    // The file API: O_EXCL, stat during appends, listings during creates.
    let clients = clients_of(&bed);
    let rw_create = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let excl = OpenFlags {
        excl: true,
        ..rw_create
    };
    let wins = std::sync::Mutex::new(vec![0u32; 40]);
    std::thread::scope(|s| {
        for c in &clients {
            let (bed, wins) = (&bed, &wins);
            s.spawn(move || {
                for k in 0..40 {
                    let p = format!("{}/excl-{k}", bed.dest.display());
                    match c.file_open(&p, excl, 0o644, Persist::Default, page) {
                        Ok(a) => {
                            c.file_close(a.id).unwrap();
                            wins.lock().unwrap()[k] += 1;
                        }
                        Err(e) => assert_eq!(e.os_errno(), libc::EEXIST, "{e}"),
                    }
                }
            });
        }
    });
    assert!(
        wins.lock().unwrap().iter().all(|w| *w == 1),
        "{:?}",
        wins.lock().unwrap()
    );

    let pa = path_owned_by(&bed, "grows-", 2);
    let a = clients[0]
        .file_open(&pa, rw_create, 0o644, Persist::Default, page)
        .unwrap();
    let dir = bed.dest.join("made");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (sizes, listings) = std::thread::scope(|s| {
        let done = &done;
        let stats = s.spawn(|| {
            let mut seen = Vec::new();
            // Bounded by the writer: at most one stat per 100 µs of appending.
            while !done.load(std::sync::atomic::Ordering::SeqCst) && seen.len() < 100_000 {
                if let Some(st) = clients[1].file_stat_path(&pa).unwrap() {
                    seen.push(st.size);
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            seen
        });
        let lists = s.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) && seen.len() < 10_000 {
                seen.push(clients[2].file_list_dir(&d).unwrap());
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            seen
        });
        for k in 0..200 {
            clients[0].file_append(a.id, &[b'r'; 333]).unwrap();
            if k % 2 == 0 {
                let f = clients[0]
                    .file_open(
                        &format!("{d}/f{k}"),
                        rw_create,
                        0o644,
                        Persist::Default,
                        page,
                    )
                    .unwrap();
                clients[0].file_close(f.id).unwrap();
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (stats.join().unwrap(), lists.join().unwrap())
    });
    clients[0].file_close(a.id).unwrap();
    assert!(
        sizes.windows(2).all(|w| w[0] <= w[1]),
        "a size went back: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|s| s % 333 == 0),
        "a torn append seen by stat: {sizes:?}"
    );
    let all: std::collections::BTreeSet<String> =
        (0..200).step_by(2).map(|k| format!("f{k}")).collect();
    for l in &listings {
        assert!(
            l.iter().all(|n| all.contains(n)),
            "a listing with names never made: {l:?}"
        );
    }
    let last: std::collections::BTreeSet<String> =
        clients[1].file_list_dir(&d).unwrap().into_iter().collect();
    assert_eq!(last, all, "the final listing on node 1");
    assert_eq!(
        clients[2].file_stat_path(&pa).unwrap().unwrap().size,
        200 * 333
    );
    drop(clients);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// The differential tester (tests/fsdiff) under `strata run` on node 1 of
/// a 3-node bed with files at their path's owner: most of its files live
/// on the other nodes; every result line, and the destination after a
/// cluster-wide drain, must match a plain run. One worker process: a file
/// renamed between two owners' names while another process holds it open
/// answers EXDEV (its descriptors could not follow; README), which a plain
/// run never does. By hand for now (`--ignored`; `FSDIFF_CLUSTER_SEEDS`,
/// `FSDIFF_CLUSTER_OPS`, `FSDIFF_CLUSTER_MODES`): which node owns which
/// path depends on the bed's random directory, so a seed passes or fails
/// by chance while the gaps in docs/FILES-ACROSS-NODES.md ("found by the
/// differential tester") are open — CI would be flaky.
#[test]
#[ignore]
fn the_differential_tester_agrees_with_files_at_their_owner() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    // FSDIFF_CLUSTER_PAGES_AT_OWNER: cluster.pages_where_written off (the
    // default is on since 2026-11-28)
    let pages = std::env::var("FSDIFF_CLUSTER_PAGES_AT_OWNER").is_err();
    let bed = started_with(cluster_util::bed_with_files_pages(3, "512MiB", None, pages));
    let seeds = std::env::var("FSDIFF_CLUSTER_SEEDS").unwrap_or_else(|_| "1:10".into());
    let ops = std::env::var("FSDIFF_CLUSTER_OPS").unwrap_or_else(|_| "200".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fsdiff/run.py");
    let n1 = &bed.nodes[1];
    let modes = std::env::var("FSDIFF_CLUSTER_MODES").unwrap_or_else(|_| "default".into());
    let procs = std::env::var("FSDIFF_CLUSTER_PROCS").unwrap_or_else(|_| "1".into());
    for mode in modes.split(',') {
        let mut extra: Vec<&str> = Vec::new();
        if std::env::var("FSDIFF_CLUSTER_LINKS").is_ok() {
            extra.push("--links");
        }
        if std::env::var("FSDIFF_CLUSTER_NO_RENAMES").is_ok() {
            extra.push("--no-renames");
        }
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg("--strata")
            .arg(&bed.strata)
            .arg("--config")
            .arg(&n1.config)
            .args([
                "--mode", mode, "--seeds", &seeds, "--ops", &ops, "--procs", &procs, "--work",
            ])
            .arg(bed.dest.join(format!("fsdiff-{mode}")))
            .args(&extra)
            .env("STRATA_SOCKET", &n1.socket)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            print_daemon_logs(&bed);
        }
        eprintln!("{text}");
        assert!(
            out.status.success(),
            "differential tester ({mode}, seeds {seeds}) across nodes:\n{text}"
        );
    }
    for i in 0..bed.nodes.len() {
        let f = &node_status(&bed, i)["files"];
        eprintln!(
            "node {i}: {} pages published here by other nodes, {} bytes written",
            f["published_pages_total"], f["write_bytes_total"]
        );
    }
}

/// What a SCRATCH rename between two owners' names costs (it copies the
/// file, `Client::file_move_node`), next to a rename within one owner and
/// to `cp` of the same file: `RENAME_COST_MIB` (default 1024) MiB written
/// under `strata run` on node 1 at a name node 0 owns, renamed to a name
/// node 2 owns, and back to one node 0 owns; three repeats, seconds and
/// MiB/s printed. By hand (`--ignored rename_cost --nocapture`): timings,
/// not assertions; the figures are in BENCHMARKS.md.
#[test]
#[ignore]
fn rename_cost_between_owners() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    let mib: u64 = std::env::var("RENAME_COST_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let bed = started_with(cluster_util::bed_with_files(3, "4GiB", None));
    let (a, b, c) = (
        path_owned_by(&bed, "cost-a-", 0),
        path_owned_by(&bed, "cost-b-", 2),
        path_owned_by(&bed, "cost-c-", 0),
    );
    let py = format!(
        "import os, time, shutil\n\
         chunk = os.urandom(1 << 20)\n\
         for r in range(3):\n\
         \x20   with open('{a}', 'wb') as f:\n\
         \x20       for i in range({mib}): f.write(chunk)\n\
         \x20   t = time.perf_counter(); os.rename('{a}', '{b}'); cross = time.perf_counter() - t\n\
         \x20   t = time.perf_counter(); shutil.copyfile('{b}', '{a}'); cp = time.perf_counter() - t\n\
         \x20   os.unlink('{a}')\n\
         \x20   t = time.perf_counter(); os.rename('{b}', '{c}'); back = time.perf_counter() - t\n\
         \x20   t = time.perf_counter(); os.rename('{c}', '{a}'); same = time.perf_counter() - t\n\
         \x20   os.unlink('{a}')\n\
         \x20   print('repeat %d: rename across owners %.3f s (%.0f MiB/s), back %.3f s, within one owner %.6f s, cp across %.3f s (%.0f MiB/s)' % (r, cross, {mib} / cross, back, same, cp, {mib} / cp))\n"
    );
    let out = run_on_mode(&bed, 1, "scratch", &format!("python3 -c \"{py}\""));
    println!(
        "{mib} MiB SCRATCH file, 3 nodes:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// A 3-node bed with files at their owner, kept up for `BED_SECONDS`
/// (default 600) for experiments by hand: prints each node's config,
/// socket and namespace. `cargo test --test cluster -- --ignored bed_for_hand --nocapture`.
#[test]
#[ignore]
fn bed_for_hand() {
    let bed = started_with(cluster_util::bed_with_files(3, "512MiB", None));
    for n in &bed.nodes {
        println!(
            "node {} config={} socket={} netns={:?}",
            n.name,
            n.config.display(),
            n.socket.display(),
            n.netns
        );
    }
    println!("dest={}", bed.dest.display());
    let secs: u64 = std::env::var("BED_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    std::thread::sleep(std::time::Duration::from_secs(secs));
}

/// True when python3 runs here (the python cases are skipped without it).
fn has_python() -> bool {
    std::process::Command::new("python3")
        .arg("-c")
        .arg("1")
        .status()
        .is_ok_and(|s| s.success())
}

/// Prints the tail of every node's daemon log (after a failure).
fn print_daemon_logs(bed: &Bed) {
    for n in &bed.nodes {
        let log = n.socket.with_file_name("daemon.log");
        let l = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = l.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        eprintln!("--- {}:\n{}", log.display(), tail.join("\n"));
    }
}

/// Pages where written (`cluster.pages_where_written`, SCRATCH files): the
/// whole pages a node writes of a file another node owns stay on the
/// writer's node, mapped at the owner; a third node reads them from the
/// writer. N-N files written on every node and read one node further;
/// an N-1 file from three nodes in unaligned ranges; a partial overwrite
/// and a truncation into pages another node holds (recalled to the owner);
/// unlink drops every node's shadow; real programs under `strata run`;
/// a killed holder makes reads of its pages fail with EIO, never hang.
#[test]
fn scratch_pages_stay_where_written_and_read_from_there() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = started_with(cluster_util::bed_with_files_pages(3, "512MiB", None, true));
    let clients = clients_of(&bed);
    assert!(
        clients[0].hello().pages_where_written,
        "the bed turns it on"
    );
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page: u64 = 64 << 10;
    let open = |c: &strata_client::Client, p: &str| {
        c.file_open(p, rw, 0o644, Persist::Scratch, page).unwrap()
    };
    let read_all = |c: &strata_client::Client, p: &str| -> Vec<u8> {
        let a = c.file_stat_path(p).unwrap().expect("a record");
        let f = open(c, p);
        let mut buf = vec![0u8; a.size as usize];
        let n = c.file_read(f.id, 0, &mut buf).unwrap();
        assert_eq!(n as u64, a.size, "{p}: short read");
        c.file_close(f.id).unwrap();
        buf
    };
    let published = |i: usize| -> u64 {
        node_status(&bed, i)["files"]["published_pages_total"]
            .as_u64()
            .unwrap_or(0)
    };

    // N-N: node i writes a file node i+1 owns; node i+2 reads it.
    let n = bed.nodes.len();
    let mut files = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let owner = ((i + 1) % n) as u32;
        let p = path_owned_by(&bed, &format!("nn-{i}-"), owner);
        let data = pattern((3 << 20) + 100, i as u64 + 1);
        let f = open(c, &p);
        for (k, chunk) in data.chunks(1 << 20).enumerate() {
            if let Err(e) = c.file_write(f.id, (k << 20) as u64, chunk) {
                print_daemon_logs(&bed);
                panic!("N-N write on node {i}: {e}");
            }
        }
        c.file_close(f.id).unwrap();
        files.push((p, data));
    }
    for i in 0..n {
        assert!(published(i) >= 48, "node {i} maps pages others hold");
    }
    for (i, (p, data)) in files.iter().enumerate() {
        for r in 0..n {
            let got = read_all(&clients[(i + r + 2) % n], p);
            assert!(got == *data, "{p} read on node {}", (i + r + 2) % n);
        }
    }

    // N-1 in unaligned ranges from three nodes at once, owned by node 0.
    let p1 = path_owned_by(&bed, "n1-", 0);
    let cuts = [0u64, 100_001, 777_777, 1_500_000];
    let whole = pattern(cuts[3] as usize, 99);
    let f1 = open(&clients[0], &p1);
    clients[0].file_close(f1.id).unwrap();
    std::thread::scope(|s| {
        for k in 0..3 {
            let (c, p1, whole) = (&clients[(k + 1) % n], &p1, &whole);
            s.spawn(move || {
                let f = c.file_open(p1, rw, 0o644, Persist::Scratch, page).unwrap();
                let (lo, hi) = (cuts[k] as usize, cuts[k + 1] as usize);
                for at in (lo..hi).step_by(200_000) {
                    let end = (at + 200_000).min(hi);
                    c.file_write(f.id, at as u64, &whole[at..end]).unwrap();
                }
                c.file_close(f.id).unwrap();
            });
        }
    });
    for c in &clients {
        assert!(read_all(c, &p1) == whole, "N-1 file read back");
    }

    // A partial overwrite, on node 0, of a page node 1 holds (files[0] is
    // node 0's own; files[1] was written by node 1, owned by node 2).
    let (p, data) = &mut files[1];
    let f = open(&clients[0], p);
    let at = (5 * page + 10) as usize;
    clients[0]
        .file_write(f.id, at as u64, b"overwritten")
        .unwrap();
    data[at..at + 11].copy_from_slice(b"overwritten");
    // and a truncation into another page node 1 holds, then a write beyond
    let cut = (9 * page + 1234) as usize;
    clients[0].file_truncate(f.id, cut as u64).unwrap();
    data.truncate(cut);
    clients[0]
        .file_write(f.id, (cut + 5000) as u64, b"tail")
        .unwrap();
    data.resize(cut + 5000, 0);
    data.extend_from_slice(b"tail");
    clients[0].file_close(f.id).unwrap();
    for c in &clients {
        assert!(read_all(c, p) == *data, "after overwrite and truncate");
    }

    // Real programs: a SCRATCH file written by cp on node 1 (owned by
    // whichever node), compared by cmp on node 2.
    let d = bed.dest.display().to_string();
    run_on_mode(
        &bed,
        1,
        "scratch",
        &format!("head -c 3000000 /dev/urandom > {d}/src.bin && cp {d}/src.bin {d}/copy.bin && cksum < {d}/copy.bin > {d}/sum1"),
    );
    let o = run_on_mode(
        &bed,
        2,
        "scratch",
        &format!("cmp {d}/src.bin {d}/copy.bin && cksum < {d}/copy.bin && cat {d}/sum1"),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(
        lines[0], lines[1],
        "the bytes cp wrote on node 1, on node 2"
    );

    // Unlink: every node's shadows of the gone files go too.
    for (p, _) in &files {
        assert!(clients[2].file_unlink(p).unwrap());
    }
    clients[0].file_unlink(&p1).unwrap();
    let t0 = std::time::Instant::now();
    loop {
        // (replicas of pages read on other nodes age out on their own)
        let left: Vec<String> = clients[0]
            .file_list_dir(strata_proto::types::SHADOW_DIR)
            .unwrap()
            .into_iter()
            .filter(|n| !n.starts_with(strata_proto::types::REPLICA_PREFIX))
            .collect();
        // (src.bin, copy.bin, sum1 of the run above are still there)
        if left.len() <= 3 {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "shadows of gone files stay: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A holder killed: reads of its pages fail with EIO, the rest works.
    let p = path_owned_by(&bed, "killed-", 0);
    let data = pattern(1 << 20, 7);
    let f = open(&clients[2], &p);
    clients[2].file_write(f.id, 0, &data).unwrap();
    clients[2].file_write(f.id, 1 << 20, b"x").unwrap();
    clients[2].file_close(f.id).unwrap();
    let pid = bed.pid(2).expect("node 2 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let f = open(&clients[1], &p);
    let mut buf = vec![0u8; 100];
    let e = clients[1].file_read(f.id, 0, &mut buf).unwrap_err();
    assert_eq!(e.os_errno(), libc::EIO, "{e}");
    // the byte at the owner still reads
    let mut one = [0u8; 1];
    assert_eq!(clients[1].file_read(f.id, 1 << 20, &mut one).unwrap(), 1);
    assert_eq!(&one, b"x");
    // Restarted, the holder has no shadow (SCRATCH pages die with their
    // node): the owner's map still names it, the reader asks again a few
    // times, then EIO naming the node — never zeros, never a hang.
    ok(&bed.start(2), "node 2 restarts");
    bed.wait_for("node 2 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 2) == "up")
    });
    let e = clients[1].file_read(f.id, 0, &mut buf).unwrap_err();
    assert_eq!(e.os_errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("node 2"), "{e}");
    clients[1].file_close(f.id).unwrap();
    // and a new write there is whole again
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let g = open(&c2, &p);
    c2.file_write(g.id, 0, &data).unwrap();
    c2.file_close(g.id).unwrap();
    assert!(
        read_all(&clients[1], &p)[..data.len()] == data[..],
        "rewritten after the restart"
    );
}

/// Pages where written, DEFAULT files (docs/FILES-ACROSS-NODES.md step 3):
/// node 0 owns every file here and never flushes on its own (background
/// flushing off: only syncs, `flush` and stops write). Pages written on
/// nodes 1 and 2 stay there and are read from there; an fsync on node 1
/// returns with node 1's pages at the destination (written by node 1's
/// daemon on the owner's word); `flush --wait` puts N-N and N-1 files at
/// the destination whole; a holder's `daemon stop` waits until the owner
/// flushed its pages, which read from the destination after its restart
/// (its RAM shadow gone: `FileRemoteLost`); a killed holder's pages make the owner's flush fail
/// naming it, never persist zeros, and a rewrite completes the file.
#[test]
fn default_pages_where_written_reach_the_destination_from_their_holders() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = cluster_util::bed_with_files_pages(3, "256MiB", None, true);
    let cfg0 = bed.nodes[0].config.clone();
    let base = std::fs::read_to_string(&cfg0).unwrap();
    std::fs::write(&cfg0, format!("{base}flush:\n  enabled: false\n")).unwrap();
    let bed = started_with(bed);
    let clients = clients_of(&bed);
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page: u64 = 64 << 10;
    let open = |c: &strata_client::Client, p: &str| {
        c.file_open(p, rw, 0o644, Persist::Default, page).unwrap()
    };
    let read_all = |c: &strata_client::Client, p: &str| -> Vec<u8> {
        let a = c.file_stat_path(p).unwrap().expect("a record");
        let f = open(c, p);
        let mut buf = vec![0u8; a.size as usize];
        let n = c.file_read(f.id, 0, &mut buf).unwrap();
        assert_eq!(n as u64, a.size, "{p}: short read");
        c.file_close(f.id).unwrap();
        buf
    };
    let write_all = |c: &strata_client::Client, p: &str, data: &[u8]| {
        let f = open(c, p);
        for (k, chunk) in data.chunks(1 << 20).enumerate() {
            c.file_write(f.id, (k << 20) as u64, chunk).unwrap();
        }
        f
    };
    let published = || -> u64 {
        node_status(&bed, 0)["files"]["published_pages_total"]
            .as_u64()
            .unwrap_or(0)
    };
    let dest = bed.dest.display().to_string();
    let at_dest = |p: &str| std::fs::read(p).ok();

    // N-N: nodes 1 and 2 each write a file node 0 owns, read on the others.
    let mut files = Vec::new();
    for (i, c) in clients.iter().enumerate().skip(1) {
        let p = path_owned_by(&bed, &format!("nn-{i}-"), 0);
        let data = pattern((3 << 20) + 100, i as u64);
        let f = write_all(c, &p, &data);
        c.file_close(f.id).unwrap();
        files.push((p, data));
    }
    assert!(published() >= 96, "node 0 maps pages nodes 1 and 2 hold");
    for (p, data) in &files {
        for c in &clients {
            assert!(read_all(c, p) == *data, "{p} read back");
        }
        assert!(at_dest(p).is_none(), "{p} flushed with flushing off");
    }

    // fsync on node 1: its pages are at the destination when it returns.
    let ps = path_owned_by(&bed, "synced-", 0);
    let synced = pattern((2 << 20) + 5, 21);
    let f = write_all(&clients[1], &ps, &synced);
    clients[1].file_sync(f.id).unwrap();
    assert!(
        at_dest(&ps).as_deref() == Some(&synced[..]),
        "fsync'ed on node 1, at the destination"
    );
    clients[1].file_close(f.id).unwrap();

    // N-1 in unaligned ranges from all three nodes at once.
    let p1 = path_owned_by(&bed, "n1-", 0);
    let cuts = [0u64, 100_001, 777_777, 1_500_000];
    let whole = pattern(cuts[3] as usize, 99);
    let f1 = open(&clients[0], &p1);
    clients[0].file_close(f1.id).unwrap();
    std::thread::scope(|s| {
        for k in 0..3 {
            let (c, p1, whole) = (&clients[k], &p1, &whole);
            s.spawn(move || {
                let f = c.file_open(p1, rw, 0o644, Persist::Default, page).unwrap();
                let (lo, hi) = (cuts[k] as usize, cuts[k + 1] as usize);
                for at in (lo..hi).step_by(200_000) {
                    let end = (at + 200_000).min(hi);
                    c.file_write(f.id, at as u64, &whole[at..end]).unwrap();
                }
                c.file_close(f.id).unwrap();
            });
        }
    });
    files.push((p1, whole));

    // Everything at the destination after a cluster-wide flush.
    ok(
        &strata_on(&bed, 2, &["flush", "--wait", &dest]),
        "flush --wait",
    );
    for (p, data) in &files {
        assert!(
            at_dest(p).as_deref() == Some(&data[..]),
            "{p} at the destination"
        );
    }
    // Rewritten pages (node 2 now holds pages node 1 held) are written again.
    let (p, data) = &mut files[0];
    let fresh = pattern(4 * page as usize, 77);
    let at = 8 * page as usize;
    let f = open(&clients[2], p);
    clients[2].file_write(f.id, at as u64, &fresh).unwrap();
    clients[2].file_close(f.id).unwrap();
    data[at..at + fresh.len()].copy_from_slice(&fresh);
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &dest]),
        "flush --wait",
    );
    assert!(
        at_dest(p).as_deref() == Some(&data[..]),
        "rewritten pages at the destination"
    );

    // A holder's stop waits for the owner to flush its pages.
    let pd = path_owned_by(&bed, "stopped-holder-", 0);
    let held = pattern(1 << 20, 31);
    let f = write_all(&clients[2], &pd, &held);
    clients[2].file_close(f.id).unwrap();
    assert!(at_dest(&pd).is_none());
    ok(
        &strata_on(&bed, 2, &["daemon", "stop"]),
        "daemon stop of a holder",
    );
    assert!(
        at_dest(&pd).as_deref() == Some(&held[..]),
        "a stopped holder's pages at the destination"
    );
    ok(&bed.start(2), "node 2 restarts");
    bed.wait_for("node 2 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 2) == "up")
    });
    // Its pages were in RAM, gone with its daemon; they are at the
    // destination, so reads anywhere get them from there.
    for c in &clients[..2] {
        assert!(
            read_all(c, &pd) == held,
            "a restarted holder's flushed pages read"
        );
    }
    assert!(
        node_status(&bed, 0)["files"]["remote_lost_pages_total"].as_u64() >= Some(16),
        "read from the destination after the holder's restart"
    );

    // A killed holder: the owner's flush fails naming it; nothing persists
    // zeros for its pages; after its restart the pages are gone (unsynced,
    // held in RAM) and the file stays failed until rewritten.
    let pk = path_owned_by(&bed, "killed-holder-", 0);
    let lost = pattern(1 << 20, 41);
    let f = write_all(&clients[1], &pk, &lost);
    clients[1].file_close(f.id).unwrap();
    let pid = bed.pid(1).expect("node 1 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let name1 = bed.nodes[1].name.clone();
    let failed_naming = |who: &str| {
        let st = strata_on(&bed, 0, &["drain", "status", "--json", &pk]);
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
        v["files"].as_array().is_some_and(|fs| {
            fs.iter().any(|f| {
                f["path"] == pk.as_str()
                    && f["state"] == "failed"
                    && f["error"].as_str().is_some_and(|e| e.contains(who))
            })
        })
    };
    let fl = strata_on(&bed, 0, &["flush", &pk]);
    assert!(fl.status.success() || !fl.stderr.is_empty());
    let t0 = std::time::Instant::now();
    while !failed_naming(&name1) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "drain status never named node 1: {}",
            String::from_utf8_lossy(
                &strata_on(&bed, 0, &["drain", "status", "--json", &pk]).stdout
            )
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        at_dest(&pk).is_none_or(|b| b.is_empty()),
        "nothing of the lost pages persisted"
    );
    ok(&bed.start(1), "node 1 restarts");
    bed.wait_for("node 1 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 1) == "up")
    });
    let fl = strata_on(&bed, 0, &["flush", "--wait", &pk]);
    assert!(
        !fl.status.success(),
        "the file with lost pages cannot complete"
    );
    let said = String::from_utf8_lossy(&fl.stderr);
    assert!(said.contains("lost"), "{said}");
    assert!(
        at_dest(&pk).is_none_or(|b| b != lost),
        "never persisted as if whole"
    );
    // rewritten from node 2: complete again
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let f = write_all(&c2, &pk, &lost);
    c2.file_sync(f.id).unwrap();
    c2.file_close(f.id).unwrap();
    assert!(
        at_dest(&pk).as_deref() == Some(&lost[..]),
        "rewritten and synced"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
    for (p, data) in &files {
        assert!(
            at_dest(p).as_deref() == Some(&data[..]),
            "{p} after cluster stop"
        );
    }
}

/// Pages where written, a holder killed and restarted (issue 15, item 6):
/// node 1 keeps its tiers on disk only (a dir tier, no RAM), so the pages
/// it holds for a DEFAULT file node 0 owns are journaled in its shadow.
/// Killed with SIGKILL before node 0 flushed them, node 1 is named by the
/// owner's flush; restarted, it replays its shadow, a read on node 2 gets
/// the bytes from it, and the owner's flush completes the file. The
/// shadow is never listed by drain status nor staged out, and a SCRATCH
/// file's shadow is not journaled (lost with its daemon, as the file is).
#[test]
fn a_killed_holders_journaled_pages_complete_its_files_on_restart() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = cluster_util::bed_with_files_pages(3, "128MiB", Some("256MiB"), true);
    let cfg0 = bed.nodes[0].config.clone();
    let base0 = std::fs::read_to_string(&cfg0).unwrap();
    std::fs::write(&cfg0, format!("{base0}flush:\n  enabled: false\n")).unwrap();
    let cfg1 = bed.nodes[1].config.clone();
    let base1 = std::fs::read_to_string(&cfg1).unwrap();
    let ram = "  - name: ram\n    kind: ram\n    capacity: 128MiB\n";
    assert!(base1.contains(ram), "{base1}");
    let sweep = "cluster:\n  shadow_sweep_interval: 300ms\n";
    std::fs::write(
        &cfg1,
        format!(
            "{}flush:\n  stop_give_up: 2s\n",
            base1.replace(ram, "").replace("cluster:\n", sweep)
        ),
    )
    .unwrap();
    let bed = started_with(bed);
    let clients = clients_of(&bed);
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page: u64 = 64 << 10;
    let journal_of = |i: usize| node_status(&bed, i)["journal"].clone();
    let before = journal_of(1)["live_records"].as_u64().unwrap();

    let pk = path_owned_by(&bed, "journaled-holder-", 0);
    let data = pattern((2 << 20) + 3 * page as usize + 11, 51);
    let f = clients[1]
        .file_open(&pk, rw, 0o644, Persist::Default, page)
        .unwrap();
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        clients[1]
            .file_write(f.id, (k << 20) as u64, chunk)
            .unwrap();
    }
    clients[1].file_close(f.id).unwrap();
    let ps = path_owned_by(&bed, "scratch-holder-", 0);
    let f = clients[1]
        .file_open(&ps, rw, 0o644, Persist::Scratch, page)
        .unwrap();
    clients[1]
        .file_write(f.id, 0, &pattern(4 * page as usize, 52))
        .unwrap();
    clients[1].file_close(f.id).unwrap();
    // Node 1 holds the whole pages (35 of them) in its shadow, journaled:
    // the shadow's record and one per page, written to the journal file.
    let whole_pages = data.len() as u64 / page;
    let t0 = std::time::Instant::now();
    loop {
        let j = journal_of(1);
        if j["live_records"].as_u64().unwrap() > before + whole_pages {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "node 1 never journaled its shadow: {j:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Only the DEFAULT file's shadow: the SCRATCH one adds no record.
    let records = journal_of(1)["live_records"].as_u64().unwrap();
    assert_eq!(records, before + whole_pages + 1, "{:#}", journal_of(1));
    // Never listed as a file of node 1, never staged out by it.
    let st = strata_on(&bed, 1, &["drain", "status", "--json"]);
    ok(&st, "drain status on node 1");
    assert!(
        !String::from_utf8_lossy(&st.stdout).contains(strata_proto::types::SHADOW_DIR),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    let so = strata_on(&bed, 1, &["stage-out", strata_proto::types::SHADOW_DIR]);
    let said = String::from_utf8_lossy(&so.stderr);
    assert!(
        !so.status.success() && said.contains("no such file"),
        "stage-out of the shadows' directory: {said}"
    );
    assert!(
        !std::path::Path::new(strata_proto::types::SHADOW_DIR).exists(),
        "a shadow staged out"
    );

    kill9_node(&bed, 1);
    let name1 = bed.nodes[1].name.clone();
    let fl = strata_on(&bed, 0, &["flush", "--wait", &pk]);
    let said = String::from_utf8_lossy(&fl.stderr);
    assert!(!fl.status.success() && said.contains(&name1), "{said}");
    // (the owner may have written its own partial last page: a flush in
    // progress, never called persisted)
    assert!(
        std::fs::read(&pk).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            || std::fs::read(&pk).unwrap()[..whole_pages as usize * page as usize]
                .iter()
                .all(|b| *b == 0),
        "node 1's pages written while it was dead"
    );
    let st = strata_on(&bed, 0, &["drain", "status", "--json", &pk]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert!(
        v["files"][0]["state"] == "failed"
            && v["files"][0]["error"]
                .as_str()
                .is_some_and(|e| e.contains(&name1)),
        "{v:#}"
    );

    ok(&bed.start(1), "node 1 restarts");
    bed.wait_for("node 1 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 1) == "up")
    });
    let replay = journal_of(1)["replay"].clone();
    assert!(replay["files"].as_u64() >= Some(1), "{replay:#}");
    // Read on node 2: node 1's pages come from its replayed shadow.
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let read_only = OpenFlags {
        read: true,
        ..Default::default()
    };
    let f = c2
        .file_open(&pk, read_only, 0, Persist::Default, page)
        .unwrap();
    let mut got = vec![0u8; data.len() + 1];
    let n = c2.file_read(f.id, 0, &mut got).unwrap();
    assert!(n == data.len() && got[..n] == data[..], "read on node 2");
    c2.file_close(f.id).unwrap();
    // The SCRATCH file's pages went with node 1's daemon: EIO, never zeros.
    let f = c2
        .file_open(&ps, read_only, 0, Persist::Scratch, page)
        .unwrap();
    let e = c2.file_read(f.id, 0, &mut got).unwrap_err();
    assert_eq!(e.os_errno(), libc::EIO, "{e}");
    c2.file_close(f.id).unwrap();
    // The owner's flush completes the file from node 1's pages.
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &pk]),
        "flush --wait after node 1's restart",
    );
    assert!(
        std::fs::read(&pk).unwrap() == data,
        "the file whole at the destination"
    );

    // A file unlinked while its holder is down: the owner's notice cannot
    // reach node 1, whose journal brings the shadow back; its sweep asks
    // the owner and drops it. The shadow of a live file stays.
    let before = journal_of(1)["live_records"].as_u64().unwrap();
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let pl = path_owned_by(&bed, "live-", 0);
    let live = pattern(4 * page as usize, 53);
    let f = c1
        .file_open(&pl, rw, 0o644, Persist::Default, page)
        .unwrap();
    c1.file_write(f.id, 0, &live).unwrap();
    c1.file_close(f.id).unwrap();
    drop(c1);
    let t0 = std::time::Instant::now();
    while journal_of(1)["live_records"].as_u64().unwrap() < before + 5 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "not journaled"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = bed.pid(1).expect("node 1 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    clients[0].file_unlink(&pk).unwrap();
    ok(&bed.start(1), "node 1 restarts");
    let swept = || node_status(&bed, 1)["files"]["shadows_swept_total"].as_u64();
    let t0 = std::time::Instant::now();
    while swept() < Some(1) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "node 1 never swept the shadow of the unlinked file: {:#}",
            node_status(&bed, 1)["files"]
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(swept(), Some(1), "only the unlinked file's shadow");
    bed.wait_for("node 1 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 1) == "up")
    });
    let f = c2
        .file_open(&pl, read_only, 0, Persist::Default, page)
        .unwrap();
    let n = c2.file_read(f.id, 0, &mut got).unwrap();
    assert!(
        n == live.len() && got[..n] == live[..],
        "the live file read on node 2"
    );
    c2.file_close(f.id).unwrap();
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &pl]),
        "flush --wait of the live file",
    );
    assert!(std::fs::read(&pl).unwrap() == live);

    // A holder stopping while its owner cannot flush (the file's directory
    // was removed outside strata): after `flush.stop_give_up` the stop
    // keeps the shadow through the journal (exit 2, "kept") instead of
    // refusing; restarted, node 1 serves the owner's flush once the
    // directory is back.
    let sub = format!("{}/gone-dir", bed.dest.display());
    std::fs::create_dir(&sub).unwrap();
    let pg = path_owned_by(&bed, "gone-dir/kept-", 0);
    let kept = pattern(3 * page as usize, 54);
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let f = c1
        .file_open(&pg, rw, 0o644, Persist::Default, page)
        .unwrap();
    c1.file_write(f.id, 0, &kept).unwrap();
    c1.file_close(f.id).unwrap();
    drop(c1);
    std::fs::remove_dir(&sub).unwrap();
    let st = strata_on(&bed, 1, &["daemon", "stop"]);
    let said = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(2), "{said}");
    assert!(
        String::from_utf8_lossy(&st.stdout).contains("data kept")
            && said.contains(strata_proto::types::SHADOW_DIR),
        "{said}"
    );
    ok(&bed.start(1), "node 1 restarts");
    bed.wait_for("node 1 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 1) == "up")
    });
    std::fs::create_dir(&sub).unwrap();
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &pg]),
        "flush --wait once the directory is back",
    );
    assert!(
        std::fs::read(&pg).unwrap() == kept,
        "kept pages at the destination"
    );
    drop(clients);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// Pages where written, the *owner* killed (issue 15, item 6): node 0 owns
/// a DEFAULT file whose whole pages node 1 wrote and holds (journaled in
/// its shadow: node 1 has a dir tier only). The owner's map of those pages
/// is journaled with the file's record and its id, so node 0, killed with
/// SIGKILL before it flushed and restarted, knows again that node 1 holds
/// them: a read on node 2 gets the bytes, drain status lists the file as
/// owed (not lost), and the owner's flush has node 1 write them.
#[test]
fn a_killed_owner_gets_its_map_of_held_pages_back_from_its_journal() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = cluster_util::bed_with_files_pages(3, "128MiB", Some("256MiB"), true);
    let cfg0 = bed.nodes[0].config.clone();
    let base0 = std::fs::read_to_string(&cfg0).unwrap();
    std::fs::write(&cfg0, format!("{base0}flush:\n  enabled: false\n")).unwrap();
    let cfg1 = bed.nodes[1].config.clone();
    let base1 = std::fs::read_to_string(&cfg1).unwrap();
    let ram = "  - name: ram\n    kind: ram\n    capacity: 128MiB\n";
    assert!(base1.contains(ram), "{base1}");
    std::fs::write(&cfg1, base1.replace(ram, "")).unwrap();
    let bed = started_with(bed);
    let page: u64 = 64 << 10;
    let journal_of = |i: usize| node_status(&bed, i)["journal"].clone();
    let records = |i: usize| journal_of(i)["live_records"].as_u64().unwrap();
    let (before0, before1) = (records(0), records(1));
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let pk = path_owned_by(&bed, "journaled-map-", 0);
    let data = pattern(2 << 20, 61);
    let f = c1
        .file_open(&pk, rw, 0o644, Persist::Default, page)
        .unwrap();
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        c1.file_write(f.id, (k << 20) as u64, chunk).unwrap();
    }
    c1.file_close(f.id).unwrap();
    drop(c1);
    // Node 1 journaled its shadow (a record and 32 pages), node 0 the
    // file's record with its map.
    let pages = data.len() as u64 / page;
    let t0 = std::time::Instant::now();
    while records(1) < before1 + pages + 1 || records(0) < before0 + 1 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "not journaled: node 0 {:#}, node 1 {:#}",
            journal_of(0),
            journal_of(1)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = bed.pid(0).expect("node 0 runs");
    // SAFETY: kill(2) on our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(
        !std::path::Path::new(&pk).exists(),
        "flushed before the kill"
    );
    ok(&bed.start(0), "node 0 restarts");
    bed.wait_for("node 0 back", |s| {
        states(s) == ["up", "up", "up"] && (0..3).all(|v| peer_state(s, v, 0) == "up")
    });
    let replay = journal_of(0)["replay"].clone();
    assert!(
        replay["files"].as_u64() >= Some(1) && replay["held_runs"].as_u64() >= Some(1),
        "{replay:#}"
    );
    let st = strata_on(&bed, 0, &["drain", "status", "--json", &pk]);
    ok(&st, "drain status on node 0");
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert!(
        v["files"][0]["state"] != "failed" && v["failed_files"].as_u64() == Some(0),
        "{v:#}"
    );
    // A read on node 2: the owner's map sends it to node 1.
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let read_only = OpenFlags {
        read: true,
        ..Default::default()
    };
    let f = c2
        .file_open(&pk, read_only, 0, Persist::Default, page)
        .unwrap();
    let mut got = vec![0u8; data.len() + 1];
    let n = c2.file_read(f.id, 0, &mut got).unwrap();
    assert!(
        n == data.len() && got[..n] == data[..],
        "read on node 2: {n} bytes"
    );
    c2.file_close(f.id).unwrap();
    // A file made after the restart gets an id of its own (above the
    // replayed one): its bytes never mix with the first file's.
    let pn = path_owned_by(&bed, "after-restart-", 0);
    let other = pattern(3 * page as usize, 62);
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let f = c1
        .file_open(&pn, rw, 0o644, Persist::Default, page)
        .unwrap();
    c1.file_write(f.id, 0, &other).unwrap();
    c1.file_close(f.id).unwrap();
    drop(c1);
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &pk, &pn]),
        "flush --wait after node 0's restart",
    );
    assert!(
        std::fs::read(&pk).unwrap() == data,
        "the file whole at the destination"
    );
    assert!(std::fs::read(&pn).unwrap() == other, "the later file whole");
    drop(c2);
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// Pages where written under capacity pressure (issue 15): a node writing
/// more of other nodes' DEFAULT files than its RAM holds keeps writing them
/// locally — the pages their owners flushed are clean at the holder once
/// the owner says so (`ShadowsGone` with flushed runs) and evicted to make
/// room — instead of sending every later write to the owner. Readers on
/// another node get every byte (evicted pages from the destination).
#[test]
fn held_pages_their_owner_flushed_make_room_for_new_writes() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = started_with(cluster_util::bed_with_files(3, "96MiB", None));
    let page: u64 = 64 << 10;
    let files_of = |i: usize| node_status(&bed, i)["files"].clone();
    let counter = |i: usize, k: &str| files_of(i)[k].as_u64().unwrap_or(0);
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let size = 40usize << 20;
    let mut files = Vec::new();
    for k in 0..4 {
        let p = path_owned_by(&bed, &format!("pressure-{k}-"), 0);
        let data = pattern(size, 70 + k as u64);
        let f = c1.file_open(&p, rw, 0o644, Persist::Default, page).unwrap();
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            c1.file_write(f.id, (i << 20) as u64, chunk).unwrap();
        }
        c1.file_close(f.id).unwrap();
        ok(
            &strata_on(&bed, 0, &["flush", "--wait", &p]),
            "flush --wait",
        );
        // node 1 hears that its pages are flushed (in the background)
        let want = (k as u64 + 1) * (size as u64 / page);
        let t0 = std::time::Instant::now();
        while counter(1, "shadow_pages_flushed_total") < want {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(60),
                "node 1 never heard its pages of {p} were flushed: {:#}",
                files_of(1)
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        files.push((p, data));
    }
    // Every whole page stayed on node 1 (published, none sent to node 0),
    // room made by evicting flushed ones.
    let pages_total = 4 * size as u64 / page;
    assert_eq!(
        counter(0, "published_pages_total"),
        pages_total,
        "{:#}",
        files_of(0)
    );
    assert!(
        counter(1, "evicted_bytes_total") >= (size as u64),
        "{:#}",
        files_of(1)
    );
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let read_only = OpenFlags {
        read: true,
        ..Default::default()
    };
    let mut got = vec![0u8; size + 1];
    for (p, data) in &files {
        let f = c2
            .file_open(p, read_only, 0, Persist::Default, page)
            .unwrap();
        let n = c2.file_read(f.id, 0, &mut got).unwrap();
        assert!(n == size && got[..n] == data[..], "{p} read on node 2");
        c2.file_close(f.id).unwrap();
        assert!(std::fs::read(p).unwrap() == *data, "{p} at the destination");
    }
    assert!(
        counter(0, "remote_lost_pages_total") > 0,
        "{:#}",
        files_of(0)
    );
    drop((c1, c2));
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// A program that runs a script another node owns through `vfork` +
/// `exec` (Python's `subprocess`, which closes every descriptor but the
/// standard ones in the child first) after it read files there: the child
/// shares the parent's memory, and its `exec` hook asks the owner about the
/// script. It must neither use nor drop the parent's pooled bulk
/// connections (closed in the child: a debug build aborted on "owned file
/// descriptor already closed", a release build could leave the child's
/// descriptor numbers in the parent's pool) — found by the differential
/// tester across nodes.
#[test]
fn a_vfork_child_execs_a_script_another_node_owns() {
    if !has_python() {
        eprintln!("python3 missing: skipped");
        return;
    }
    let bed = started_with(cluster_util::bed_with_files(2, "128MiB", None));
    let script = path_owned_by(&bed, "run-", 0);
    let data = path_owned_by(&bed, "data-", 0);
    let o = run_on(
        &bed,
        1,
        &format!(
            r##"python3 - <<'EOF'
import os, subprocess
p, d = "{script}", "{data}"
with open(d, "w") as f:
    f.write("x" * 300000)
with open(p, "w") as f:
    f.write("#!/bin/sh\necho ran $1\n")
os.chmod(p, 0o755)
for i in range(6):
    with open(d) as f:
        assert len(f.read()) == 300000
    r = subprocess.run([p, str(i)], capture_output=True)
    assert r.returncode == 0 and r.stdout.decode().strip() == f"ran {{i}}", (i, r.returncode, r.stderr.decode())
with open(d) as f:
    assert len(f.read()) == 300000
print("vfork ok")
EOF"##
        ),
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("vfork ok"));
}

/// Pages where written, an fsync across nodes (issue 15): a node's fsync of
/// a file another node owns is durable in journals — the writer's (its
/// pages, `ShadowSync` from the owner) and the owner's (its own partial
/// page and its map of the writer's) — without the destination: the
/// owner's flushing is off, so an fsync waiting for the destination would
/// never end. Both daemons killed with SIGKILL and restarted: a read on a
/// third node gets every byte, and a flush puts the file whole at the
/// destination.
#[test]
fn an_fsync_of_held_pages_is_durable_in_journals_and_survives_killing_both_nodes() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = cluster_util::bed_with_files_pages(3, "128MiB", Some("256MiB"), true);
    let cfg0 = bed.nodes[0].config.clone();
    let base0 = std::fs::read_to_string(&cfg0).unwrap();
    std::fs::write(&cfg0, format!("{base0}flush:\n  enabled: false\n")).unwrap();
    let bed = started_with(bed);
    let page: u64 = 64 << 10;
    let c1 = strata_client::Client::connect_to(&bed.nodes[1].socket).unwrap();
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let pk = path_owned_by(&bed, "fsync-held-", 0);
    // 2 MiB of whole pages (node 1 keeps them, in RAM) and a partial page
    // (node 0 gets its bytes)
    let data = pattern((2 << 20) + 1000, 63);
    let f = c1
        .file_open(&pk, rw, 0o644, Persist::Default, page)
        .unwrap();
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        c1.file_write(f.id, (k << 20) as u64, chunk).unwrap();
    }
    // (a thread: an fsync waiting for the destination would never return)
    let (tx, rx) = std::sync::mpsc::channel();
    let fid = f.id;
    std::thread::spawn(move || {
        let r = c1.file_sync(fid);
        let _ = tx.send((r, c1));
    });
    let (r, c1) = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the fsync never returned: it waits for the destination, not the journals");
    r.expect("fsync through the journals");
    assert!(
        !std::path::Path::new(&pk).exists(),
        "the fsync went to the destination"
    );
    let synced = |i: usize| node_status(&bed, i)["journal"]["journal_syncs"].as_u64();
    assert!(synced(1) >= Some(1) && synced(0) >= Some(1));
    for i in [1, 0] {
        let pid = bed.pid(i).expect("node runs");
        // SAFETY: kill(2) on our own daemon's pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    drop(c1);
    ok(&bed.start(0), "node 0 restarts");
    ok(&bed.start(1), "node 1 restarts");
    bed.wait_for("nodes 0 and 1 back", |s| {
        states(s) == ["up", "up", "up"]
            && (0..3).all(|v| (0..3).all(|n| peer_state(s, v, n) == "up"))
    });
    let replay = |i: usize| node_status(&bed, i)["journal"]["replay"].clone();
    assert!(
        replay(0)["held_runs"].as_u64() >= Some(1),
        "{:#}",
        replay(0)
    );
    assert!(replay(1)["files"].as_u64() >= Some(1), "{:#}", replay(1));
    let c2 = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let read_only = OpenFlags {
        read: true,
        ..Default::default()
    };
    let f = c2
        .file_open(&pk, read_only, 0, Persist::Default, page)
        .unwrap();
    let mut got = vec![0u8; data.len() + 1];
    let n = c2.file_read(f.id, 0, &mut got).unwrap();
    assert!(
        n == data.len() && got[..n] == data[..],
        "read on node 2: {n} bytes"
    );
    c2.file_close(f.id).unwrap();
    drop(c2);
    ok(
        &strata_on(&bed, 0, &["flush", "--wait", &pk]),
        "flush --wait after the restarts",
    );
    assert!(
        std::fs::read(&pk).unwrap() == data,
        "the file whole at the destination"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}

/// Build 3's locality (docs/FILES-ACROSS-NODES.md, step 5): pages node 1
/// holds of a file node 0 owns, read on node 2 by three processes in turn
/// — the first copies nothing, the second copies them into node 2's
/// replica, the third reads them there. Rewrites on the holder and at the
/// owner, and a truncation to zero with the same writes again (the owner's
/// map dropped and made again), are read right at once: a replica names
/// the generation it copied, and generations are never issued twice.
#[test]
fn pages_read_again_on_a_node_are_read_from_its_replica_and_never_stale() {
    use strata_client::file::{OpenFlags, Persist};
    // (the copy rules alone: read-ahead copies too, tested below)
    let bed = cluster_util::bed_with_files_pages(3, "512MiB", None, true);
    let bed = started_with(with_cluster_key(bed, "remote_read_ahead: false"));
    let clients = clients_of(&bed);
    assert!(clients[2].hello().read_replicas, "on by default");
    assert!(
        !clients[2].hello().remote_read_ahead,
        "off in this test's config"
    );
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page: u64 = 64 << 10;
    let read_all = |c: &strata_client::Client, p: &str| -> Vec<u8> {
        let f = c.file_open(p, rw, 0o644, Persist::Scratch, page).unwrap();
        let size = c.file_stat(f.id).unwrap().size;
        let mut buf = vec![0u8; size as usize];
        let n = c.file_read(f.id, 0, &mut buf).unwrap();
        assert_eq!(n as u64, size, "{p}: short read");
        c.file_close(f.id).unwrap();
        buf
    };
    let counter =
        |i: usize, name: &str| -> u64 { node_status(&bed, i)["files"][name].as_u64().unwrap_or(0) };
    let write = |c: &strata_client::Client, p: &str, at: usize, data: &[u8]| {
        let f = c.file_open(p, rw, 0o644, Persist::Scratch, page).unwrap();
        for (k, chunk) in data.chunks(1 << 20).enumerate() {
            c.file_write(f.id, (at + (k << 20)) as u64, chunk).unwrap();
        }
        c.file_close(f.id).unwrap();
    };
    let p = path_owned_by(&bed, "replica-", 0);
    let mut data = pattern(4 << 20, 5);
    write(&clients[1], &p, 0, &data);

    // 1st reader on node 2: correct, nothing copied
    assert!(read_all(&clients[2], &p) == data, "first read");
    assert_eq!(
        counter(2, "replica_write_bytes_total"),
        0,
        "a first read copies nothing"
    );
    // 2nd reader (another process): copies
    let second = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    assert!(read_all(&second, &p) == data, "second read");
    assert!(
        counter(2, "replica_write_bytes_total") >= 4 << 20,
        "the second read copies the pages to node 2"
    );
    // 3rd reader: from the replica
    let third = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    assert!(read_all(&third, &p) == data, "third read");
    assert!(
        counter(2, "replica_read_bytes_total") >= 4 << 20,
        "the third read is served by node 2's replica"
    );
    // the first process, reading again, reads the replica too
    let before = counter(2, "replica_read_bytes_total");
    assert!(read_all(&clients[2], &p) == data, "the first reader again");
    assert!(counter(2, "replica_read_bytes_total") >= before + (4 << 20));

    // A rewrite on the holder: a new generation, read at once everywhere.
    let new = pattern(1 << 20, 77);
    write(&clients[1], &p, 1 << 20, &new);
    data[1 << 20..2 << 20].copy_from_slice(&new);
    for c in [&clients[2], &second, &third] {
        assert!(read_all(c, &p) == data, "after a rewrite on the holder");
    }
    // A rewrite at the owner (its pages taken back), partial pages too.
    let at = (3 << 20) - 1000;
    write(&clients[0], &p, at, &pattern(70_000, 78));
    data[at..at + 70_000].copy_from_slice(&pattern(70_000, 78));
    for c in [&clients[2], &second, &third] {
        assert!(read_all(c, &p) == data, "after a rewrite at the owner");
    }
    // Truncated to nothing (the owner's map goes) and written again the
    // same way with other bytes: the new generations are new.
    let f = clients[1]
        .file_open(&p, rw, 0o644, Persist::Scratch, page)
        .unwrap();
    clients[1].file_truncate(f.id, 0).unwrap();
    clients[1].file_close(f.id).unwrap();
    let data = pattern(4 << 20, 6);
    write(&clients[1], &p, 0, &data);
    for c in [&third, &second, &clients[2], &third] {
        assert!(
            read_all(c, &p) == data,
            "after a truncation and the same writes again"
        );
    }
    assert!(
        counter(2, "replica_read_bytes_total") >= before + (8 << 20),
        "the new generations are replicated too"
    );

    // Read in pieces smaller than the file's page (1 MiB pages, 256 KiB
    // reads): the replica keeps whole pages of its own (no larger than the
    // first reader's pieces), so the second reader copies each byte once
    // and the third reads them all.
    let big: u64 = 1 << 20;
    let q = path_owned_by(&bed, "replica-pieces-", 0);
    let data = pattern(4 << 20, 8);
    let f = clients[1]
        .file_open(&q, rw, 0o644, Persist::Scratch, big)
        .unwrap();
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        clients[1]
            .file_write(f.id, (k << 20) as u64, chunk)
            .unwrap();
    }
    clients[1].file_close(f.id).unwrap();
    let read_pieces = |c: &strata_client::Client| -> Vec<u8> {
        let f = c.file_open(&q, rw, 0o644, Persist::Scratch, big).unwrap();
        let mut out = vec![0u8; data.len()];
        for (k, piece) in out.chunks_mut(256 << 10).enumerate() {
            let n = c.file_read(f.id, (k * (256 << 10)) as u64, piece).unwrap();
            assert_eq!(n, piece.len());
        }
        c.file_close(f.id).unwrap();
        out
    };
    let fourth = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let fifth = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    let sixth = strata_client::Client::connect_to(&bed.nodes[2].socket).unwrap();
    assert!(read_pieces(&fourth) == data);
    let (w0, r0) = (
        counter(2, "replica_write_bytes_total"),
        counter(2, "replica_read_bytes_total"),
    );
    assert!(read_pieces(&fifth) == data);
    assert_eq!(
        counter(2, "replica_write_bytes_total") - w0,
        4 << 20,
        "each byte copied once"
    );
    assert!(read_pieces(&sixth) == data);
    assert!(
        counter(2, "replica_read_bytes_total") - r0 >= 4 << 20,
        "every piece read from the replica"
    );
}

/// A randomized differential test of one file across nodes against a model
/// of its bytes: seeded sequences of writes (whole and partial pages, 1 B
/// to 300 KiB, at up to 2 MiB), truncations and reads from two processes
/// (clients) on each of 3 nodes, each operation opening and closing the
/// file (close-to-open), in SCRATCH and DEFAULT. Reads are repeated, so
/// pages another node holds go through replicas (copied on the second
/// read, served from the third) while they are rewritten, taken back and
/// truncated underneath — every read must equal the model. Seeds:
/// `CLUSTER_MODEL_SEEDS` (default `1:10`), operations per seed
/// `CLUSTER_MODEL_OPS` (default 150).
#[test]
fn one_file_written_and_read_from_every_node_equals_its_model() {
    use strata_client::file::{OpenFlags, Persist};
    let bed = started_with(cluster_util::bed_with_files_pages(3, "512MiB", None, true));
    let clients: Vec<strata_client::Client> = (0..6)
        .map(|k| strata_client::Client::connect_to(&bed.nodes[k % 3].socket).unwrap())
        .collect();
    let (first, last): (u64, u64) = std::env::var("CLUSTER_MODEL_SEEDS")
        .ok()
        .and_then(|s| {
            let (a, b) = s.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((1, 10));
    let ops: usize = std::env::var("CLUSTER_MODEL_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..Default::default()
    };
    let page: u64 = 4096;
    for seed in first..=last {
        for persist in [Persist::Scratch, Persist::Default] {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut rnd = move |n: u64| -> u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n.max(1)
            };
            let p = path_owned_by(&bed, &format!("model-{seed}-{persist:?}-"), 0);
            let mut model: Vec<u8> = Vec::new();
            let mut log: Vec<String> = Vec::new();
            let mut recent: Vec<(u64, u64)> = Vec::new();
            for i in 0..ops {
                let c = rnd(6) as usize;
                let cl = &clients[c];
                let f = cl.file_open(&p, rw, 0o644, persist, page).unwrap();
                let what = rnd(10);
                if what < 4 {
                    // a write: a checkpoint's block (one of 8 slots of
                    // 256 KiB) half the time, else whole pages mostly,
                    // sometimes unaligned
                    let (mut off, mut len) = (rnd(2 << 20), 1 + rnd(300 << 10));
                    if rnd(2) == 0 {
                        (off, len) = (rnd(8) << 18, 1 << 18);
                    } else if rnd(3) > 0 {
                        off -= off % page;
                        len = len.div_ceil(page) * page;
                    }
                    let data = pattern(len as usize, seed * 1000 + i as u64);
                    let end = (off + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                    log.push(format!(
                        "{i}: client {c} (node {}) write {off}+{len}",
                        c % 3
                    ));
                    if let Err(e) = cl.file_write(f.id, off, &data) {
                        print_daemon_logs(&bed);
                        panic!("seed {seed} {persist:?}: {e}\n{}", log.join("\n"));
                    }
                } else if what < 5 {
                    // (to nothing a third of the time: a checkpoint rewritten)
                    let size = if rnd(3) == 0 { 0 } else { rnd(5 << 19) };
                    model.resize(size as usize, 0);
                    log.push(format!("{i}: client {c} (node {}) truncate {size}", c % 3));
                    cl.file_truncate(f.id, size).unwrap();
                } else {
                    // a read: of a range read lately (again: replicas), or anew
                    let (off, len) = if !recent.is_empty() && rnd(2) == 0 {
                        recent[rnd(recent.len() as u64) as usize]
                    } else {
                        let r = if rnd(2) == 0 {
                            (rnd(8) << 18, 1 << 18)
                        } else {
                            (rnd(2 << 20), 1 + rnd(512 << 10))
                        };
                        if recent.len() >= 8 {
                            recent.remove(0);
                        }
                        recent.push(r);
                        r
                    };
                    log.push(format!("{i}: client {c} (node {}) read {off}+{len}", c % 3));
                    let mut buf = vec![0u8; len as usize];
                    let n = match cl.file_read(f.id, off, &mut buf) {
                        Ok(n) => n,
                        Err(e) => {
                            print_daemon_logs(&bed);
                            panic!("seed {seed} {persist:?}: {e}\n{}", log.join("\n"));
                        }
                    };
                    let lo = (off as usize).min(model.len());
                    let hi = ((off + len) as usize).min(model.len());
                    if buf[..n] != model[lo..hi] {
                        let at = buf[..n]
                            .iter()
                            .zip(&model[lo..hi])
                            .position(|(a, b)| a != b)
                            .map_or(format!("length {n} vs {}", hi - lo), |k| {
                                format!("byte {}", off as usize + k)
                            });
                        panic!(
                            "seed {seed} {persist:?}: op {i} read differs from the model at {at}\n{}",
                            log.join("\n")
                        );
                    }
                }
                cl.file_close(f.id).unwrap();
            }
        }
    }
    let copied: u64 = (0..3)
        .map(|i| {
            node_status(&bed, i)["files"]["replica_read_bytes_total"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    eprintln!("bytes read from replicas on all nodes: {copied}");
    assert!(copied > 0, "the repeated reads went through replicas");
}

/// By hand (`--ignored --nocapture`): what reading one node further costs
/// for a file written in small pieces (a generation per 4 KiB piece at the
/// owner, so one `TIER_REMOTE` extent per page): `SMALL_PIECES_MIB`
/// (default 16) MiB written by `dd bs=SMALL_PIECES_KIB k` (default 64: one
/// whole page per write) under `strata run` on node 1,
/// read by `dd bs=4M` on node 2, five times; prints MiB/s per read.
#[test]
#[ignore]
fn small_pieces_read_one_node_further() {
    let bed = started_with(cluster_util::bed_with_files_pages(3, "1GiB", None, true));
    let mib: u64 = std::env::var("SMALL_PIECES_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let bs_k: u64 = std::env::var("SMALL_PIECES_KIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let p = path_owned_by(&bed, "pieces-", 0);
    run_on_mode(
        &bed,
        1,
        "scratch",
        &format!(
            "dd if=/dev/urandom of={p} bs={bs_k}k count={} status=none",
            mib * 1024 / bs_k
        ),
    );
    for r in 0..5 {
        let t0 = std::time::Instant::now();
        run_on_mode(
            &bed,
            2,
            "scratch",
            &format!("dd if={p} of=/dev/null bs=4M status=none"),
        );
        let s = t0.elapsed().as_secs_f64();
        let f = &node_status(&bed, 2)["files"];
        eprintln!(
            "read {r}: {mib} MiB in {s:.3} s (with strata run's start) = {:.0} MiB/s; node 2's replicas: {} B copied, {} B read so far",
            mib as f64 / s,
            f["replica_write_bytes_total"],
            f["replica_read_bytes_total"]
        );
    }
    let f = &node_status(&bed, 2)["files"];
    eprintln!(
        "node 2: {} B copied into replicas, {} B read from them",
        f["replica_write_bytes_total"], f["replica_read_bytes_total"]
    );
}

/// `cluster.tls: on`: `cluster start` makes the cluster's certificate (key
/// 0600, next to the secret), every path between daemons — control RPC,
/// native bulk puts and gets in pieces, files at their owner — works
/// through TLS with every byte intact, and a peer without TLS or with a
/// certificate of another CA is refused by every node, named, while the
/// members go on. (That the wire carries only ciphertext is
/// `strata_net::tls`'s unit test, with a tap between two relays.)
#[test]
fn tls_between_daemons_carries_every_path_and_refuses_strangers() {
    let bed = with_cluster_key(cluster_util::bed_with_files(2, "256MiB", None), "tls: true");
    eprintln!("cluster test on {}", bed.kind);
    let o = bed.run_cli(&["cluster", "start", "--launcher", bed.launcher()]);
    ok(&o, "cluster start with TLS");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("TLS certificate"), "{err}");
    let key = bed.dir.path().join("cluster-tls.key");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(bed.dir.path().join("cluster-tls.crt").exists());
    assert_eq!(states(&bed.statuses()), ["up", "up"]);
    // Native blobs both ways, 9 MiB in several bulk pieces.
    let clients = clients_of(&bed);
    for (i, size) in [4096usize, 9 << 20].into_iter().enumerate() {
        for owner in 0..2u32 {
            let name = bucket_owned_by(&clients[0], &format!("t{i}-"), owner);
            let data = pattern(size, 7 + i as u64 + owner as u64);
            clients[(owner as usize + 1) % 2]
                .bucket(&name)
                .unwrap()
                .put("blob", &data)
                .unwrap();
            for (j, c) in clients.iter().enumerate() {
                let got = c.bucket_open(&name).unwrap().get("blob").unwrap();
                assert_eq!(
                    (got.len(), checksum(&got)),
                    (data.len(), checksum(&data)),
                    "{size} bytes owned by node {owner}, read on node {j}"
                );
            }
        }
    }
    // The bulk connections ran through relays, which status counts.
    // (The clients keep idle connections; status is refreshed each heartbeat.)
    let mut st = node_status(&bed, 0);
    for _ in 0..600 {
        if st["cluster"]["tls_relays"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        st = node_status(&bed, 0);
    }
    assert_eq!(st["cluster"]["tls"], true, "{st}");
    assert!(st["cluster"]["tls_relays"].as_u64().unwrap() > 0, "{st}");
    // Files at their owner: written by a real program on one node, read on
    // the other.
    run_on(
        &bed,
        0,
        "i=0; while [ $i -lt 64 ]; do echo \"line $i of the tls file\"; i=$((i+1)); done > tls.txt; head -c 3000000 /dev/urandom > tls.bin; cksum tls.bin > tls.sum",
    );
    let o = run_on(&bed, 1, "cksum tls.bin; cat tls.sum; wc -l < tls.txt");
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], lines[1], "the bytes read on node 1 are node 0's");
    assert_eq!(lines[2].trim(), "64");
    // Strangers: without TLS (the right secret), and with another CA.
    for e in stranger_status(&bed, &[("STRATA_CLUSTER_TLS", "false".into())]) {
        assert!(
            e.contains("secret") || e.contains("closed") || e.contains("TLS"),
            "{e}"
        );
    }
    let other = bed.dir.path().join("other-ca");
    let files = strata_net::tls::TlsFiles::auto_beside(&other.join("cluster.secret"));
    strata_net::tls::generate(&files).unwrap();
    for e in stranger_status(
        &bed,
        &[
            ("STRATA_CLUSTER_TLS_CERT", files.cert.display().to_string()),
            ("STRATA_CLUSTER_TLS_KEY", files.key.display().to_string()),
            ("STRATA_CLUSTER_TLS_CA", files.ca.display().to_string()),
        ],
    ) {
        assert!(e.contains("TLS") || e.contains("certificate"), "{e}");
    }
    let log = std::fs::read_to_string(bed.nodes[0].socket.with_extension("log")).unwrap();
    assert!(log.contains("cluster connection refused"), "{log}");
    // The members still serve each other.
    assert_eq!(states(&bed.statuses()), ["up", "up"]);
    let name = bucket_owned_by(&clients[0], "after-", 1);
    clients[0]
        .bucket(&name)
        .unwrap()
        .put("b", b"still here")
        .unwrap();
    assert_eq!(
        clients[1].bucket_open(&name).unwrap().get("b").unwrap(),
        b"still here"
    );
    ok(&bed.run_cli(&["cluster", "stop"]), "cluster stop");
}
