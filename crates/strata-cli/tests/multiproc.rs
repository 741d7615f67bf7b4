//! Several client processes × several threads against one real daemon:
//! random puts (1 B .. 4 MiB), gets, overwrites, partial writes and reads,
//! appends and deletes, every read checked against what that thread wrote.
//!
//! Workers are this test binary re-executed with `STRATA_TEST_WORKER=1`,
//! running only `worker_entry`. Reproduce a failure with the seed printed
//! by the parent: `STRATA_TEST_SEED=<seed> cargo test -p strata-cli --test multiproc`.

mod common;
mod util;

use std::time::Duration;

use common::{TestDaemon, Tiers};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_client::{Bucket, Client, Errno};
use util::{checksum, random_bytes};

const WORKER_FLAG: &str = "STRATA_TEST_WORKER";
const PROCS: usize = 4;
const THREADS: usize = 4;
const BLOB_MAX: usize = 4 << 20;

/// What one thread believes is stored: name → (size, checksum).
struct Model {
    blobs: Vec<(String, usize, u64)>,
    live_bytes: usize,
}

struct Stats {
    put_bytes: usize,
    verified_bytes: usize,
    ops: usize,
}

fn random_size(rng: &mut StdRng) -> usize {
    // Log-uniform over 1 B ..= 4 MiB: many small blobs, some big ones.
    let e: f64 = rng.random_range(0.0..22.0);
    (2f64.powf(e) as usize).clamp(1, BLOB_MAX)
}

/// Reads `name` back and checks it against the model; returns the bytes.
fn get_verified(b: &Bucket, name: &str, size: usize, sum: u64, st: &mut Stats) -> Vec<u8> {
    let got = b.get(name).unwrap_or_else(|e| panic!("get {name}: {e}"));
    assert_eq!(got.len(), size, "{name}: size");
    assert_eq!(
        checksum(&got),
        sum,
        "{name}: checksum mismatch (size {size})"
    );
    st.verified_bytes += size;
    got
}

fn thread_main(
    client: Client,
    proc_idx: usize,
    thread_idx: usize,
    seed: u64,
    target: usize,
    live_cap: usize,
) -> (usize, usize) {
    let b = client.bucket("multiproc").expect("open shared bucket");
    let mut rng = StdRng::seed_from_u64(seed ^ ((proc_idx as u64) << 32) ^ thread_idx as u64);
    let mut m = Model {
        blobs: Vec::new(),
        live_bytes: 0,
    };
    let mut st = Stats {
        put_bytes: 0,
        verified_bytes: 0,
        ops: 0,
    };
    let mut next_name = 0u64;
    // Bounded by the targets: every round puts or verifies ≥ 1 byte, or ends.
    while st.put_bytes < target || st.verified_bytes < target {
        st.ops += 1;
        let op = rng.random_range(0..100);
        let pick = |rng: &mut StdRng, m: &Model| {
            if m.blobs.is_empty() {
                None
            } else {
                Some(rng.random_range(0..m.blobs.len()))
            }
        };
        let must_shrink = m.live_bytes > live_cap;
        if (op < 30 || m.blobs.is_empty()) && !must_shrink {
            // New blob.
            let name = format!("p{proc_idx}-t{thread_idx}-{next_name}");
            next_name += 1;
            let data = random_bytes(rng.random(), random_size(&mut rng));
            b.put(&name, &data)
                .unwrap_or_else(|e| panic!("put {name} ({} B): {e}", data.len()));
            st.put_bytes += data.len();
            m.live_bytes += data.len();
            m.blobs.push((name, data.len(), checksum(&data)));
        } else if op < 50 && !must_shrink {
            let i = pick(&mut rng, &m).unwrap();
            let (name, size, sum) = m.blobs[i].clone();
            get_verified(&b, &name, size, sum, &mut st);
        } else if op < 60 && !must_shrink {
            // Overwrite with new contents and a new size.
            let i = pick(&mut rng, &m).unwrap();
            let data = random_bytes(rng.random(), random_size(&mut rng));
            let name = m.blobs[i].0.clone();
            b.put(&name, &data)
                .unwrap_or_else(|e| panic!("overwrite {name}: {e}"));
            st.put_bytes += data.len();
            m.live_bytes = m.live_bytes - m.blobs[i].1 + data.len();
            m.blobs[i] = (name, data.len(), checksum(&data));
        } else if op < 70 && !must_shrink {
            // Partial write: inside, across the end, or past it (a hole).
            let i = pick(&mut rng, &m).unwrap();
            let (name, size, sum) = m.blobs[i].clone();
            let mut cur = get_verified(&b, &name, size, sum, &mut st);
            let off = rng.random_range(0..=size + 64 * 1024);
            let piece = random_bytes(rng.random(), rng.random_range(1..=256 * 1024));
            let new_size = b
                .put_at(&name, off as u64, &piece)
                .unwrap_or_else(|e| panic!("put_at {name}@{off}: {e}"));
            if cur.len() < off + piece.len() {
                cur.resize(off + piece.len(), 0);
            }
            cur[off..off + piece.len()].copy_from_slice(&piece);
            assert_eq!(new_size as usize, cur.len(), "{name}: size after put_at");
            st.put_bytes += piece.len();
            m.live_bytes = m.live_bytes - size + cur.len();
            m.blobs[i] = (name, cur.len(), checksum(&cur));
        } else if op < 78 && !must_shrink {
            // Partial read, sometimes running past the end.
            let i = pick(&mut rng, &m).unwrap();
            let (name, size, sum) = m.blobs[i].clone();
            let full = get_verified(&b, &name, size, sum, &mut st);
            let off = rng.random_range(0..=size);
            let want = rng.random_range(0..=(size - off) + 4096);
            let mut buf = vec![0xAAu8; want];
            let n = b
                .get_at(&name, off as u64, &mut buf)
                .unwrap_or_else(|e| panic!("get_at {name}@{off}: {e}"));
            let expect = want.min(size - off);
            assert_eq!(
                n, expect,
                "{name}: get_at({off}, {want}) of a {size} B blob"
            );
            assert!(
                buf[..n] == full[off..off + n],
                "{name}: get_at({off}, {want}) bytes differ"
            );
            st.verified_bytes += n;
        } else if op < 86 && !must_shrink {
            let i = pick(&mut rng, &m).unwrap();
            let (name, size, sum) = m.blobs[i].clone();
            let mut cur = get_verified(&b, &name, size, sum, &mut st);
            let piece = random_bytes(rng.random(), rng.random_range(1..=512 * 1024));
            let new_size = b
                .append(&name, &piece)
                .unwrap_or_else(|e| panic!("append {name}: {e}"));
            cur.extend_from_slice(&piece);
            assert_eq!(new_size as usize, cur.len(), "{name}: size after append");
            st.put_bytes += piece.len();
            m.live_bytes += piece.len();
            m.blobs[i] = (name, cur.len(), checksum(&cur));
        } else {
            // Delete (after checking the contents one last time).
            let i = pick(&mut rng, &m).unwrap();
            let (name, size, sum) = m.blobs.swap_remove(i);
            get_verified(&b, &name, size, sum, &mut st);
            b.delete(&name)
                .unwrap_or_else(|e| panic!("delete {name}: {e}"));
            assert!(!b.exists(&name).unwrap(), "{name} exists after delete");
            assert_eq!(b.get(&name).unwrap_err().errno, Errno::NoBlob);
            m.live_bytes -= size;
        }
    }
    // Every surviving blob, one last time, through stat and get.
    for (name, size, sum) in &m.blobs {
        assert_eq!(
            b.size_of(name).unwrap() as usize,
            *size,
            "{name}: stat size"
        );
        get_verified(&b, name, *size, *sum, &mut st);
    }
    eprintln!(
        "worker p{proc_idx} t{thread_idx}: {} ops, {} MiB put, {} MiB verified, {} survivors",
        st.ops,
        st.put_bytes >> 20,
        st.verified_bytes >> 20,
        m.blobs.len()
    );
    (m.blobs.len(), m.live_bytes)
}

/// The worker process body; a no-op unless started by `run_workers`.
#[test]
fn worker_entry() {
    if std::env::var(WORKER_FLAG).is_err() {
        return;
    }
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let socket = var("STRATA_SOCKET");
    let proc_idx: usize = var("STRATA_MP_PROC").parse().unwrap();
    let seed: u64 = var("STRATA_MP_SEED").parse().unwrap();
    let target: usize = var("STRATA_MP_BYTES").parse().unwrap();
    let live_cap: usize = var("STRATA_MP_LIVE").parse().unwrap();
    let client = Client::connect_to(std::path::Path::new(&socket)).expect("worker connect");
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = client.clone();
            std::thread::Builder::new()
                .name(format!("worker-{proc_idx}-{t}"))
                .spawn(move || {
                    thread_main(c, proc_idx, t, seed, target / THREADS, live_cap / THREADS)
                })
                .unwrap()
        })
        .collect();
    let mut survivors = 0;
    let mut bytes = 0;
    for h in handles {
        let (n, b) = h.join().expect("worker thread panicked");
        survivors += n;
        bytes += b;
    }
    println!("MPRESULT survivors={survivors} bytes={bytes}");
}

fn seed() -> u64 {
    std::env::var("STRATA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

fn run_workers(d: &TestDaemon, bytes_per_proc: usize, live_per_proc: usize, limit: Duration) {
    let seed = seed();
    eprintln!("multiproc seed {seed} (rerun with STRATA_TEST_SEED={seed})");
    let mut children: Vec<_> = (0..PROCS)
        .map(|p| {
            util::spawn_self(
                "worker_entry",
                WORKER_FLAG,
                &[
                    ("STRATA_SOCKET", d.socket.display().to_string()),
                    ("STRATA_MP_PROC", p.to_string()),
                    ("STRATA_MP_SEED", seed.to_string()),
                    ("STRATA_MP_BYTES", bytes_per_proc.to_string()),
                    ("STRATA_MP_LIVE", live_per_proc.to_string()),
                ],
                true,
            )
        })
        .collect();
    let mut survivors = 0u64;
    let mut bytes = 0u64;
    let mut failed = Vec::new();
    for (p, c) in children.iter_mut().enumerate() {
        let st = util::wait_child(c, limit);
        let mut out = String::new();
        std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut out).unwrap();
        if !st.success() {
            failed.push(format!("worker {p}: {st}"));
            continue;
        }
        let line = out
            .lines()
            .find_map(|l| l.find("MPRESULT").map(|i| &l[i..]))
            .unwrap_or_else(|| panic!("worker {p} printed no result:\n{out}"));
        for kv in line.split_whitespace().skip(1) {
            let (k, v) = kv.split_once('=').unwrap();
            match k {
                "survivors" => survivors += v.parse::<u64>().unwrap(),
                "bytes" => bytes += v.parse::<u64>().unwrap(),
                _ => {}
            }
        }
    }
    assert!(
        failed.is_empty(),
        "workers failed (seed {seed}): {failed:?}\ndaemon log:\n{}",
        d.log()
    );

    // The daemon agrees with the workers on what survived, and every
    // worker's leases went back when it exited.
    util::eventually("all worker clients gone", Duration::from_secs(30), || {
        d.status().clients == 0
    });
    let st = d.status();
    assert_eq!(st.blobs, survivors, "blob count seen by the daemon");
    let c = d.client();
    let b = c.bucket_open("multiproc").unwrap();
    assert_eq!(
        b.size().unwrap(),
        (bytes, survivors),
        "bucket size and blob count"
    );
    assert_eq!(b.list().unwrap().len() as u64, survivors);
    drop(b);
    drop(c);
    util::eventually("parent client gone", Duration::from_secs(30), || {
        d.status().clients == 0
    });
    let st = d.status();
    for t in &st.tiers {
        assert_eq!(
            t.leased_bytes, 0,
            "tier {} still has leased bytes with no client: {st:?}",
            t.name
        );
    }
    // Destroying the bucket gives every byte back.
    d.client()
        .bucket_open("multiproc")
        .unwrap()
        .destroy()
        .unwrap();
    let st = d.status();
    for t in &st.tiers {
        assert_eq!(
            t.used_bytes, 0,
            "tier {} still has used bytes after destroying everything: {st:?}",
            t.name
        );
    }
    assert_eq!(st.malformed_total, 0);
}

#[test]
fn four_processes_four_threads_random_blobs() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: "",
    });
    run_workers(&d, 48 << 20, 96 << 20, Duration::from_secs(600));
}

/// The "done when" of the issue: four processes each put and get back
/// 256 MiB of random blobs with matching checksums. Run explicitly:
/// `cargo test -p strata-cli --test multiproc -- --ignored`.
#[test]
#[ignore = "heavy (1 GiB through the daemon); run with --ignored"]
fn four_processes_256mib_each() {
    let d = TestDaemon::start_with(Tiers {
        ram: "256MiB",
        disk: Some("1GiB"),
        extra_yaml: "",
    });
    run_workers(&d, 256 << 20, 256 << 20, Duration::from_secs(900));
}
