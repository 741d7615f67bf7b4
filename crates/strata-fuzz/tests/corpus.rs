//! Every checked-in corpus file and every past crash (`crashes/<target>/`)
//! through its target: what the fuzzer found once stays fixed.
//!
//! `cargo test -p strata-fuzz -- --ignored write_seeds` rewrites the seed
//! files of `corpus/` from the product's own encoders.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn every_corpus_file_and_past_crash_runs_clean() {
    let mut ran = 0;
    for (name, target) in strata_fuzz::TARGETS {
        let seeds = files(&root().join("corpus").join(name));
        assert!(!seeds.is_empty(), "target {name} has no seed corpus");
        for p in seeds
            .into_iter()
            .chain(files(&root().join("crashes").join(name)))
        {
            let data = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(|| target(&data));
            assert!(r.is_ok(), "{name}: {} fails", p.display());
            ran += 1;
        }
    }
    assert!(ran >= 20, "{ran} inputs");
}

/// Arbitrary bytes of every length up to 4 KiB (a deterministic generator):
/// no target may panic on them.
#[test]
fn random_inputs_are_refused_cleanly() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for (name, target) in strata_fuzz::TARGETS {
        for len in (0..4096).step_by(97) {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let r = std::panic::catch_unwind(|| target(&data));
            assert!(r.is_ok(), "{name}: random input of {len} bytes");
        }
    }
}

#[test]
#[ignore = "writes the seed corpus (run by hand)"]
fn write_seeds() {
    use strata_proto::{DataRef, PutMode, Request};
    use strata_transport_shm::codec;
    use strata_transport_shm::record::RequestRecord;
    let put = |dir: &str, name: &str, data: &[u8]| {
        let d = root().join("corpus").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), data).unwrap();
    };

    // ring: real requests as the client encodes them, and every op code.
    let reqs: Vec<(&str, Request)> = vec![
        (
            "bucket_open",
            Request::BucketOpen {
                name: "bucket",
                create: true,
                excl: false,
            },
        ),
        (
            "put_inline",
            Request::Put {
                bucket: 1,
                name: "key",
                data: DataRef::Inline(b"value bytes"),
                mode: PutMode::Replace { excl: false },
                policy: None,
            },
        ),
        (
            "put_at",
            Request::Put {
                bucket: 1,
                name: "key",
                data: DataRef::Lease {
                    off: 4096,
                    len: 100,
                },
                mode: PutMode::At(77),
                policy: None,
            },
        ),
        (
            "get",
            Request::Get {
                bucket: 1,
                name: "key",
                offset: 0,
                len: 4096,
            },
        ),
        (
            "rename",
            Request::Rename {
                bucket: 1,
                from: "a",
                to: "b",
                replace: true,
            },
        ),
        (
            "lease",
            Request::Lease {
                want_bytes: 1 << 20,
            },
        ),
    ];
    for (n, r) in &reqs {
        let mut rec = RequestRecord::default();
        let mut arg = vec![0u8; 8192];
        codec::encode_request(r, &mut rec, &mut arg).unwrap();
        let used = rec.name_len as usize + rec.name2_len as usize + 64;
        let mut bytes = rec.to_wire();
        bytes.extend_from_slice(&arg[..used.min(arg.len())]);
        put("ring", n, &bytes);
    }
    for op in 0..80u32 {
        if strata_transport_shm::Op::from_u32(op).is_none() {
            continue;
        }
        let rec = RequestRecord {
            op,
            flags: 0,
            name_len: 9,
            name2_len: 4,
            bucket: 1,
            len: 4096,
            ..RequestRecord::default()
        };
        let mut bytes = rec.to_wire();
        bytes.extend_from_slice(b"/tmp/a/b1name");
        bytes.extend_from_slice(&[0u8; 64]);
        put("ring", &format!("op{op}"), &bytes);
    }

    // control: frames as the CLI and clients send them.
    use strata_proto::control::{write_frame, ControlRequest};
    let ctl = vec![
        (
            "hello",
            ControlRequest::Hello {
                version: 1,
                pid: 42,
                uid: 1000,
            },
        ),
        ("status", ControlRequest::Status),
        ("ping", ControlRequest::Ping),
        (
            "flush",
            ControlRequest::Flush {
                paths: vec!["/data/run1".into(), "/x".into()],
            },
        ),
        (
            "drain_status",
            ControlRequest::DrainStatus { paths: vec![] },
        ),
    ];
    for (n, r) in &ctl {
        let mut out = Vec::new();
        write_frame(&mut out, r).unwrap();
        put("control", n, &out);
    }

    // config: the machine default and small hand-written files.
    put(
        "config",
        "default.yaml",
        strata_config::Config::machine_default()
            .to_yaml()
            .as_bytes(),
    );
    put(
        "config",
        "small.yaml",
        b"daemon:\n  socket: /tmp/s.sock\n  metrics: 127.0.0.1:9464\n  group: staff\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 1GiB\n  - name: nvme\n    kind: dir\n    path: /mnt/nvme\n    capacity: 10GiB\n    bandwidth: 2GB/s\nadapter:\n  mode: default\n  include: [/data]\n",
    );
    put(
        "config",
        "flow.yaml",
        b"daemon: { socket: /tmp/a.sock, spin: 20us }\ndevices:\n  - { name: ram, kind: ram, capacity: 64MiB }\nflush: { interval: 1s, threads: 2 }\njournal: { enabled: true }\n",
    );

    // cluster: a refused handshake, and a bulk request frame.
    let mut hs = vec![0u8];
    hs.extend_from_slice(&[0x5a; 80]);
    put("cluster", "handshake", &hs);
    let rec = RequestRecord {
        op: strata_transport_shm::Op::Get as u32,
        name_len: 3,
        bucket: 1,
        len: 4096,
        ..RequestRecord::default()
    };
    let wire = rec.to_wire();
    let h = strata_proto::bulk::Header {
        kind: strata_proto::bulk::Kind::Request,
        record_len: wire.len() as u32,
        arg_len: 3,
        data_len: 0,
    };
    let mut b = vec![1u8];
    b.extend_from_slice(&h.encode());
    b.extend_from_slice(&wire);
    b.extend_from_slice(b"key");
    put("cluster", "bulk_get", &b);
}
