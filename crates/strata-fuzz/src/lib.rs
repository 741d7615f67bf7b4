//! Fuzz targets: every decoder that reads bytes another party controls.
//!
//! Each target takes arbitrary bytes and must neither panic nor hang; where
//! a cheap oracle exists it is asserted too (a configuration that parses
//! writes back to an equal one; a control frame that decodes re-encodes to
//! the same request; a journal's replayed core passes its consistency
//! check). The binaries in `src/bin` run them under AFL++
//! (`scripts/fuzz.sh`); `tests/corpus.rs` runs every corpus file and every
//! past crash through them in the ordinary test suite.
//!
//! **Architecture Invariant:** the targets call the product's own decoders
//! (the poller's, the control thread's, the configuration reader, journal
//! replay into a real `Core`, the cluster's bulk and handshake code), never
//! a copy of them.

use std::io::{Cursor, Read, Write};

use strata_transport_shm::codec;
use strata_transport_shm::record::{RequestRecord, REQUEST_WIRE_BYTES};

/// A fuzz target: arbitrary bytes in, a panic means a finding.
pub type Target = fn(&[u8]);

/// The targets by name (binaries `fuzz_<name>`, corpus `corpus/<name>`).
pub const TARGETS: &[(&str, Target)] = &[
    ("ring", ring),
    ("control", control),
    ("config", config),
    ("journal", journal),
    ("cluster", cluster),
];

/// What the poller does with a slot: a request record (as the client wrote
/// it) and its argument area, names first.
pub fn ring(data: &[u8]) {
    if data.len() < REQUEST_WIRE_BYTES {
        return;
    }
    let (head, arg) = data.split_at(REQUEST_WIRE_BYTES);
    let Some(rec) = RequestRecord::from_wire(head) else {
        return;
    };
    // As `Poller::serve_slot`: names must fit the argument area.
    let names_len = rec.name_len as usize + rec.name2_len as usize;
    if names_len > arg.len() {
        return;
    }
    let (names, tail) = arg.split_at(names_len);
    if let Ok(req) = codec::decode_request(&rec, names, tail) {
        // Whatever decodes has an op the reply side knows.
        let _ = codec::op_of(&req);
    }
}

/// A control-socket frame (length + JSON) as the daemon's control thread
/// reads it; what decodes must survive a write/read round trip unchanged.
pub fn control(data: &[u8]) {
    use strata_proto::control::{read_frame, write_frame, ControlRequest};
    let mut r = Cursor::new(data);
    let Ok(req) = read_frame::<_, ControlRequest>(&mut r) else {
        return;
    };
    let mut out = Vec::new();
    write_frame(&mut out, &req).expect("a decoded request encodes");
    let again: ControlRequest =
        read_frame(&mut Cursor::new(&out)).expect("an encoded request decodes");
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        serde_json::to_value(&again).unwrap(),
        "a control request changed across a round trip"
    );
}

/// A configuration file: errors name a key; what parses must validate the
/// same way after being written out and read back.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = strata_config::Config::from_yaml_str(text, "fuzz.yaml") else {
        return;
    };
    let yaml = c.to_yaml();
    let back = strata_config::Config::from_yaml_str(&yaml, "written.yaml")
        .unwrap_or_else(|e| panic!("a parsed config does not read back: {e}\n{yaml}"));
    assert_eq!(back, c, "a config changed across a round trip:\n{yaml}");
}

/// A journal file replayed into a real core (a RAM arena and a dir tier):
/// whatever the bytes, replay ends and leaves a consistent core.
pub fn journal(data: &[u8]) {
    use strata_engine::journal;
    let scan = journal::scan_bytes(data);
    // The fold never reports more bytes than it read.
    let skipped: u64 = scan.corrupt.iter().map(|c| c.1).sum();
    assert!(skipped <= scan.bytes);
    let mut f = fixture::Fixture::new();
    let c = &mut f.core;
    let nonvolatile = c.tiers.tiers.iter().map(|t| !t.volatile).collect();
    c.journal = Some(strata_engine::jpoller::Journal::new(
        f.dir.path().join("tier").join(journal::JOURNAL_NAME),
        nonvolatile,
        Default::default(),
    ));
    let _report = strata_engine::jreplay::replay(c, &scan);
    if let Err(e) = c.check() {
        panic!("replay left an inconsistent core: {e}");
    }
}

/// A byte stream that reads `input` and swallows what is written.
struct Peer<'a> {
    input: Cursor<&'a [u8]>,
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What another node (or anyone reaching the cluster port) sends: the
/// secret handshake, then bulk frames — a header, a request record and its
/// argument bytes, decoded as the bulk server does.
pub fn cluster(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if selector & 1 == 0 {
        // The handshake's server side: without the secret it must refuse.
        let secret = strata_net::auth::Secret::from_bytes([7u8; strata_net::auth::SECRET_BYTES]);
        let mut peer = Peer {
            input: Cursor::new(rest),
        };
        let r = strata_net::auth::server_blocking(&mut peer, &secret);
        assert!(r.is_err(), "random bytes proved the cluster secret");
        return;
    }
    // Bulk frames, as `serve` reads them (bounded by the input).
    let mut r = Cursor::new(rest);
    for _ in 0..64 {
        let Ok(h) = strata_proto::bulk::read_header(&mut r) else {
            return;
        };
        let mut rec = vec![0u8; (h.record_len as usize).min(REQUEST_WIRE_BYTES)];
        if r.read_exact(&mut rec).is_err() {
            return;
        }
        let mut arg = vec![0u8; (h.arg_len as usize).min(1 << 16)];
        if r.read_exact(&mut arg).is_err() {
            return;
        }
        let Some(record) = RequestRecord::from_wire(&rec) else {
            continue;
        };
        let names_len = record.name_len as usize + record.name2_len as usize;
        if names_len <= arg.len() {
            let (names, tail) = arg.split_at(names_len);
            let _ = codec::decode_request(&record, names, tail);
        }
    }
}

/// A small real core for replay: a RAM arena and a dir tier in a fresh
/// temporary directory, as the daemon builds them.
pub mod fixture {
    use std::sync::Arc;

    use strata_alloc::ExtentAllocator;
    use strata_engine::core::Core;
    use strata_engine::tier::{Arena, DirTier, Tier, TierBackend, Tiers};
    use strata_meta::{Limits, MetaStore};
    use strata_shm::ShmSegment;

    const RAM_BYTES: u64 = 1 << 20;
    const DISK_BYTES: u64 = 4 << 20;

    pub struct Fixture {
        pub core: Core,
        pub dir: tempfile::TempDir,
        arena: String,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = ShmSegment::unlink(&self.arena);
        }
    }

    impl Fixture {
        pub fn new() -> Fixture {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let arena_name = format!("strata-fuzz-{}-{n}", std::process::id());
            let dir = tempfile::tempdir().expect("a temporary directory");
            let seg = ShmSegment::create_or_replace(&arena_name, RAM_BYTES as usize)
                .expect("a shared-memory arena");
            let arena = Arena::new(seg, ExtentAllocator::new(RAM_BYTES, 64));
            let (disk, lock) =
                DirTier::create("disk", &dir.path().join("tier"), DISK_BYTES).expect("a dir tier");
            let disk: Arc<dyn TierBackend> = Arc::new(disk);
            let tier = |index, name: &str, backend, alloc, cap, block, volatile, lock| Tier {
                index,
                name: name.into(),
                backend,
                lock,
                alloc,
                capacity_bytes: cap,
                block_bytes: block,
                bandwidth_mib_s: 1000.0,
                latency_us: 10.0,
                volatile,
                blob_bytes: 0,
                blob_extents: 0,
                remote: None,
                lost_blobs: 0,
            };
            let tiers = Tiers {
                tiers: vec![
                    tier(0, "ram", arena.backend(), None, RAM_BYTES, 64, true, None),
                    tier(
                        1,
                        "disk",
                        disk,
                        Some(ExtentAllocator::new(DISK_BYTES, 4096)),
                        DISK_BYTES,
                        4096,
                        false,
                        Some(lock),
                    ),
                ],
                arena,
                ram: Some(0),
                remote_due_ns: 0,
            };
            let meta = MetaStore::new(0, Limits::default());
            Fixture {
                core: Core::new(
                    meta,
                    tiers,
                    strata_place::Policy::MinimizeIoTime,
                    7,
                    1 << 20,
                ),
                dir,
                arena: arena_name,
            }
        }
    }

    impl Default for Fixture {
        fn default() -> Self {
            Fixture::new()
        }
    }
}
