//! Faults: clients killed mid-put, hostile ring entries, bad API
//! arguments, full tiers, and a daemon killed under a waiting client.

mod common;
mod util;

use std::io::BufRead;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestDaemon, Tiers};
use strata_client::{Client, Errno};
use strata_proto::control::{self, ControlReply, ControlRequest, HelloReply};
use strata_proto::ReadExtent as WireExtent;
use strata_shm::{Ring, ShmSegment};
use strata_transport_shm::layout::{ClientHeader, ClientLayout, CtlHeader, SlotRecords};
use strata_transport_shm::record::flags;
use strata_transport_shm::{
    Op, RequestRecord as Request, ResponseRecord as Response, PROTOCOL_VERSION,
};
use util::{checksum, errno_of, random_bytes};

const CHILD_FLAG: &str = "STRATA_FAULT_CHILD";
const HANG_GUARD: Duration = Duration::from_secs(60);

fn small() -> TestDaemon {
    TestDaemon::small()
}

// ---- a client killed with SIGKILL mid-put -------------------------------

/// Child body: loops big puts (8 MiB, some partial) until killed.
#[test]
fn fault_child_entry() {
    if std::env::var(CHILD_FLAG).is_err() {
        return;
    }
    let socket = std::env::var("STRATA_SOCKET").unwrap();
    let c = Client::connect_to(std::path::Path::new(&socket)).unwrap();
    let b = c.bucket("victim").unwrap();
    let data = random_bytes(std::process::id() as u64, 8 << 20);
    let mut i = 0u64;
    loop {
        b.put(&format!("v{}", i % 4), &data).unwrap();
        b.put_at(
            &format!("v{}", (i + 1) % 4),
            (i % 7) << 20,
            &data[..3 << 20],
        )
        .unwrap();
        // Leave pins behind too: start a get and never finish it.
        let g = b.get_async(&format!("v{}", i % 4)).unwrap();
        std::mem::forget(g);
        if i == 0 {
            println!("READY");
        }
        i += 1;
    }
}

/// A well-behaved client that keeps putting and verifying until told to stop.
fn bystander(
    c: Client,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Vec<(String, u64, usize)>> {
    std::thread::spawn(move || {
        let b = c.bucket("bystander").unwrap();
        let mut kept = Vec::new();
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let len = ((i * 104_729) % (3 << 20)) as usize + 1;
            let data = random_bytes(i, len);
            let name = format!("b{}", i % 16);
            b.put(&name, &data)
                .unwrap_or_else(|e| panic!("bystander put {name}: {e}"));
            let got = b
                .get(&name)
                .unwrap_or_else(|e| panic!("bystander get {name}: {e}"));
            assert!(got == data, "bystander {name}: read back differs");
            kept.retain(|(n, _, _): &(String, u64, usize)| *n != name);
            kept.push((name, checksum(&data), len));
            ops.fetch_add(1, Ordering::SeqCst);
            i += 1;
        }
        for (n, sum, len) in &kept {
            let got = b.get(n).unwrap();
            assert_eq!(
                (checksum(&got), got.len()),
                (*sum, *len),
                "bystander {n} at the end"
            );
        }
        kept
    })
}

#[test]
fn client_killed_mid_put_is_reclaimed() {
    let d = small();
    assert_eq!(d.status().tiers[0].leased_bytes, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let by = bystander(d.client(), stop.clone(), ops.clone());
    for round in 0..3 {
        let mut child = util::spawn_self(
            "fault_child_entry",
            CHILD_FLAG,
            &[("STRATA_SOCKET", d.socket.display().to_string())],
            true,
        );
        // Drain the child's stdout (test harness chatter) and note READY.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                match line {
                    Ok(l) if l.contains("READY") => {
                        let _ = ready_tx.send(());
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        if ready_rx.recv_timeout(HANG_GUARD).is_err() {
            let _ = child.kill();
            panic!(
                "child did not start (round {round}); daemon log:\n{}",
                d.log()
            );
        }
        util::eventually("child and bystander connected", HANG_GUARD, || {
            d.status().clients == 2
        });
        // Let it get deep into further puts, then kill it without warning.
        let req0 = d.status().requests_total;
        util::eventually("child busy", HANG_GUARD, || {
            d.status().requests_total > req0 + 20
        });
        // SAFETY: kill takes plain integers; a pid that is gone is an error return, not undefined behaviour.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let st = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(libc::SIGKILL)
        );
        util::eventually("dead client dropped", HANG_GUARD, || {
            d.status().clients == 1
        });
        // The bystander keeps working after the kill.
        let n = ops.load(Ordering::SeqCst);
        util::eventually("bystander progresses after the kill", HANG_GUARD, || {
            ops.load(Ordering::SeqCst) >= n + 5
        });
    }
    stop.store(true, Ordering::SeqCst);
    let kept = by.join().expect("bystander failed");
    assert!(!kept.is_empty());
    util::eventually("all clients gone", HANG_GUARD, || d.status().clients == 0);
    let st = d.status();
    assert_eq!(
        st.tiers[0].leased_bytes, 0,
        "leases of dead clients reclaimed: {st:?}"
    );
    // Whatever the victims left (blobs, a half-written temporary) goes with
    // their bucket; pins of the dead are gone, so every byte comes back.
    let c = d.client();
    c.bucket_open("victim").unwrap().destroy().unwrap();
    c.bucket_open("bystander").unwrap().destroy().unwrap();
    let st = d.status();
    assert_eq!(st.blobs, 0);
    for t in &st.tiers {
        assert_eq!(
            t.used_bytes, 0,
            "tier {}: bytes still allocated (pins of a dead client not released?): {st:?}",
            t.name
        );
    }
    assert_eq!(st.malformed_total, 0);
}

// ---- a hostile client writing garbage into its rings --------------------

struct Hostile {
    _sock: UnixStream,
    hello: HelloReply,
    ctl: ShmSegment,
    seg: ShmSegment,
    arena: ShmSegment,
    layout: ClientLayout,
    sq: Ring,
    cq: Ring,
    tag: u64,
}

impl Hostile {
    fn connect(d: &TestDaemon) -> Hostile {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        let hello = ControlRequest::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            // SAFETY: geteuid/getuid take no arguments and cannot fail.
            uid: unsafe { libc::getuid() },
        };
        control::write_frame(&mut s, &hello).unwrap();
        let hello = match control::read_frame(&mut s).unwrap() {
            ControlReply::Hello(h) => h,
            other => panic!("hello refused: {other:?}"),
        };
        let ctl = ShmSegment::open(&hello.ctl_segment).unwrap();
        let seg = ShmSegment::open(&hello.client_segment).unwrap();
        let arena = ShmSegment::open(&hello.arena_segment).unwrap();
        let layout = ClientLayout::new(hello.channels, hello.depth, hello.arg_bytes);
        let base = seg.as_ptr();
        let off = layout.channel_off(0);
        let sq =
            // SAFETY: the ring's region lies inside the mapped segment at offsets from its layout; attach validates the header.
            unsafe { Ring::attach(base.add(off + layout.sq_off), layout.cq_off - layout.sq_off) }
                .unwrap();
        // SAFETY: the ring's region lies inside the mapped segment at offsets from its layout; attach validates the header.
        let cq = unsafe {
            Ring::attach(
                base.add(off + layout.cq_off),
                layout.slots_off - layout.cq_off,
            )
        }
        .unwrap();
        let h = Hostile {
            _sock: s,
            hello,
            ctl,
            seg,
            arena,
            layout,
            sq,
            cq,
            tag: 1,
        };
        h.header().claimed[0].fetch_or(1, Ordering::SeqCst);
        h
    }
    fn header(&self) -> &ClientHeader {
        // SAFETY: the header lies at a layout offset inside the mapped segment, which lives as long as `self`; its fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.seg.as_ptr() as *const ClientHeader) }
    }
    fn bell(&self) {
        // SAFETY: the header lies at a layout offset inside the mapped segment, which lives as long as `self`; its fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.ctl.as_ptr() as *const CtlHeader) }
            .daemon_bell
            .ring();
    }
    fn slot(&self, slot: u32) -> *mut SlotRecords {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.seg.as_ptr().add(self.layout.slot_off(0, slot)) as *mut SlotRecords }
    }
    fn arg(&self, slot: u32) -> *mut u8 {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.seg.as_ptr().add(self.layout.arg_off(0, slot)) }
    }
    fn ring_word(&self, ring_off: usize, field: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: the ring's words lie inside the mapped client segment at offsets from its layout; AtomicU32 is valid for any bits and 4-aligned there.
        unsafe {
            &*(self
                .seg
                .as_ptr()
                .add(self.layout.channel_off(0) + ring_off + field)
                as *const std::sync::atomic::AtomicU32)
        }
    }
    /// Submits `req` with `arg` in slot 0 and waits for the answer.
    fn call(&mut self, mut req: Request, arg: &[u8]) -> Response {
        self.try_call(&mut req, arg, HANG_GUARD)
            .unwrap_or_else(|| panic!("no answer to {req:?}"))
    }
    fn try_call(&mut self, req: &mut Request, arg: &[u8], limit: Duration) -> Option<Response> {
        let n = arg.len().min(self.layout.arg_bytes as usize);
        // SAFETY: n ≤ arg_bytes, the size of the slot's argument area; the regions are distinct.
        unsafe { std::ptr::copy_nonoverlapping(arg.as_ptr(), self.arg(0), n) };
        req.tag = self.tag;
        self.tag += 1;
        // SAFETY: slot 0 is this test client's, inside its mapped segment.
        unsafe { std::ptr::write_volatile(&mut (*self.slot(0)).req, *req) };
        self.sq.push(0).unwrap();
        self.bell();
        let start = Instant::now();
        loop {
            if let Some(s) = self.cq.pop().unwrap() {
                assert_eq!(s, 0, "completion for a slot we did not use");
                // SAFETY: slot 0 is this test client's, inside its mapped segment.
                let resp = unsafe { std::ptr::read_volatile(&(*self.slot(0)).resp) };
                assert_eq!(resp.tag, req.tag);
                return Some(resp);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn expect(
        &mut self,
        what: &str,
        req: Request,
        arg: &[u8],
        want: Result<(), Errno>,
    ) -> Response {
        let r = self.call(req, arg);
        assert_eq!(r.result(), want, "{what}: {req:?}");
        r
    }
}

fn req(op: Op) -> Request {
    Request {
        op: op as u32,
        ..Request::default()
    }
}

/// A well-behaved client still gets correct answers.
fn still_serves(c: &Client, i: u32) {
    let b = c.bucket("good").unwrap();
    let data = random_bytes(i as u64, 70_000 + i as usize);
    b.put("g", &data).unwrap();
    assert!(
        b.get("g").unwrap() == data,
        "well-behaved client after hostile request {i}"
    );
}

#[test]
fn malformed_ring_entries_get_error_codes() {
    let d = small();
    let good = d.client();
    still_serves(&good, 0);
    let mut h = Hostile::connect(&d);
    let arg_bytes = h.layout.arg_bytes;
    let mut n = 0u32;
    let mut check =
        |h: &mut Hostile, what: &str, r: Request, arg: &[u8], want: Result<(), Errno>| {
            h.expect(what, r, arg, want);
            n += 1;
            still_serves(&good, n);
        };
    let m = d.status().malformed_total;

    check(&mut h, "nop", req(Op::Nop), b"", Ok(()));
    check(
        &mut h,
        "unknown op",
        Request {
            op: 999,
            ..Request::default()
        },
        b"",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "op 0",
        Request {
            op: 0,
            ..Request::default()
        },
        b"",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "unknown flags",
        Request {
            flags: 1 << 29,
            ..req(Op::Nop)
        },
        b"",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "unknown policy",
        Request {
            flags: 9 << flags::POLICY_SHIFT,
            name_len: 1,
            ..req(Op::BucketOpen)
        },
        b"x",
        Err(Errno::Inval),
    );
    check(
        &mut h,
        "name_len > arg area",
        Request {
            flags: flags::CREATE,
            name_len: arg_bytes + 1,
            ..req(Op::BucketOpen)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "name_len = u32::MAX",
        Request {
            flags: flags::CREATE,
            name_len: u32::MAX,
            name2_len: u32::MAX,
            ..req(Op::BucketOpen)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "names together > arg area",
        Request {
            name_len: arg_bytes / 2 + 1,
            name2_len: arg_bytes / 2,
            ..req(Op::BucketTag)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "name = whole arg area",
        Request {
            flags: flags::CREATE,
            name_len: arg_bytes,
            ..req(Op::BucketOpen)
        },
        &vec![b'a'; arg_bytes as usize],
        Err(Errno::Name),
    );
    check(
        &mut h,
        "invalid UTF-8 name",
        Request {
            flags: flags::CREATE,
            name_len: 3,
            ..req(Op::BucketOpen)
        },
        &[0xff, 0xfe, 0x80],
        Err(Errno::Name),
    );
    check(
        &mut h,
        "invalid UTF-8 name2",
        Request {
            name_len: 1,
            name2_len: 2,
            ..req(Op::BucketTag)
        },
        &[b'k', 0xc3, 0x28],
        Err(Errno::Name),
    );
    let bucket = h
        .expect(
            "create bucket",
            Request {
                flags: flags::CREATE,
                name_len: 4,
                ..req(Op::BucketOpen)
            },
            b"evil",
            Ok(()),
        )
        .val0;
    check(
        &mut h,
        "stat on bucket 0",
        Request {
            bucket: 0,
            name_len: 1,
            ..req(Op::Stat)
        },
        b"x",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "get on a nonexistent bucket id",
        Request {
            bucket: 0xdead_beef,
            name_len: 1,
            len: 10,
            ..req(Op::Get)
        },
        b"x",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "put on a nonexistent bucket id",
        Request {
            bucket: u64::MAX,
            flags: flags::SRC_ARG,
            name_len: 1,
            len: 3,
            ..req(Op::Put)
        },
        b"xabc",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "tag on a nonexistent bucket",
        Request {
            bucket: 77,
            name_len: 1,
            name2_len: 1,
            ..req(Op::BucketTag)
        },
        b"kv",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "destroy a nonexistent bucket",
        Request {
            bucket: 78,
            ..req(Op::BucketDestroy)
        },
        b"",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "get a missing blob",
        Request {
            bucket,
            name_len: 1,
            len: 10,
            ..req(Op::Get)
        },
        b"x",
        Err(Errno::NoBlob),
    );
    check(
        &mut h,
        "put with an empty name",
        Request {
            bucket,
            flags: flags::SRC_ARG,
            len: 1,
            ..req(Op::Put)
        },
        b"z",
        Err(Errno::Name),
    );
    check(
        &mut h,
        "put from the arg area running past it",
        Request {
            bucket,
            flags: flags::SRC_ARG,
            name_len: 1,
            len: arg_bytes as u64,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put from the arg area, len u64::MAX",
        Request {
            bucket,
            flags: flags::SRC_ARG,
            name_len: 1,
            len: u64::MAX,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put from a lease it does not have",
        Request {
            bucket,
            name_len: 1,
            len: 100,
            data_off: 0,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    // Now with a lease.
    let lease = h.expect(
        "lease",
        Request {
            len: 1 << 20,
            ..req(Op::Lease)
        },
        b"",
        Ok(()),
    );
    let (loff, llen) = (lease.val0, lease.val1);
    assert!(
        llen >= 4096 && loff + llen <= h.arena.len() as u64,
        "lease {loff}+{llen}"
    );
    check(
        &mut h,
        "put past the end of the lease",
        Request {
            bucket,
            name_len: 1,
            len: 100,
            data_off: loff + llen,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put running out of the lease",
        Request {
            bucket,
            name_len: 1,
            len: llen + 1,
            data_off: loff,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put at an unaligned lease offset",
        Request {
            bucket,
            name_len: 1,
            len: 100,
            data_off: loff + 1,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put with data_off + len overflowing",
        Request {
            bucket,
            name_len: 1,
            len: u64::MAX,
            data_off: loff,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    check(
        &mut h,
        "put outside the arena",
        Request {
            bucket,
            name_len: 1,
            len: 10,
            data_off: u64::MAX - 4,
            ..req(Op::Put)
        },
        b"x",
        Err(Errno::Malformed),
    );
    if loff > 0 {
        check(
            &mut h,
            "put before the lease",
            Request {
                bucket,
                name_len: 1,
                len: 10,
                data_off: 0,
                ..req(Op::Put)
            },
            b"x",
            Err(Errno::Malformed),
        );
    }
    // A correct put from the lease still works after all that.
    // SAFETY: [loff, loff+17) lies inside the lease the daemon granted this test client, inside the mapped arena.
    unsafe {
        std::ptr::copy_nonoverlapping(
            b"hostile but valid".as_ptr(),
            h.arena.as_ptr().add(loff as usize),
            17,
        )
    };
    h.expect(
        "valid lease put",
        Request {
            bucket,
            name_len: 1,
            len: 17,
            data_off: loff,
            ..req(Op::Put)
        },
        b"v",
        Ok(()),
    );
    assert_eq!(
        good.bucket_open("evil").unwrap().get("v").unwrap(),
        b"hostile but valid"
    );
    // Huge offsets.
    check(
        &mut h,
        "partial put at u64::MAX - 10",
        Request {
            bucket,
            flags: flags::SRC_ARG | flags::PARTIAL,
            name_len: 1,
            offset: u64::MAX - 10,
            len: 100,
            ..req(Op::Put)
        },
        &[b'h'; 101],
        Err(Errno::Inval),
    );
    let r = h.expect(
        "get at a huge offset",
        Request {
            bucket,
            name_len: 1,
            offset: u64::MAX,
            len: u64::MAX,
            ..req(Op::Get)
        },
        b"v",
        Ok(()),
    );
    assert_eq!((r.val0, r.val1), (17, 0), "size 17, nothing covered");
    let r = h.expect(
        "get with len u64::MAX",
        Request {
            bucket,
            name_len: 1,
            offset: 5,
            len: u64::MAX,
            ..req(Op::Get)
        },
        b"v",
        Ok(()),
    );
    assert_eq!(r.val1, 12);
    // SAFETY: the argument area is arg_bytes long, more than one WireExtent; unaligned read of plain integers.
    let ext: WireExtent = unsafe { std::ptr::read_unaligned(h.arg(0) as *const WireExtent) };
    assert_eq!((ext.logical_off, ext.len), (5, 12));
    // Garbage pins to release, a score out of range, a listing cursor past the end.
    check(
        &mut h,
        "unpin garbage",
        Request {
            releases: [u64::MAX, 12345, 0, 1],
            ..req(Op::Unpin)
        },
        b"",
        Ok(()),
    );
    check(
        &mut h,
        "score 5.0",
        Request {
            bucket,
            name_len: 1,
            aux: 5.0f32.to_bits() as u64,
            ..req(Op::Score)
        },
        b"v",
        Err(Errno::Inval),
    );
    let r = h.expect(
        "bucket list past the end",
        Request {
            aux: u64::MAX,
            ..req(Op::BucketList)
        },
        b"",
        Ok(()),
    );
    assert_eq!((r.val0, r.val1), (0, 0));
    check(
        &mut h,
        "blob list of a missing bucket",
        Request {
            bucket: 99,
            ..req(Op::BlobList)
        },
        b"",
        Err(Errno::NoBucket),
    );
    check(
        &mut h,
        "lease of u64::MAX bytes",
        Request {
            len: u64::MAX,
            ..req(Op::Lease)
        },
        b"",
        Ok(()),
    );
    check(&mut h, "lease return", req(Op::LeaseReturn), b"", Ok(()));
    check(&mut h, "channel close", req(Op::ChannelClose), b"", Ok(()));
    // Claiming channels beyond the announced count is harmless.
    for w in h.header().claimed.iter() {
        w.store(u64::MAX, Ordering::SeqCst);
    }
    check(
        &mut h,
        "nop with every channel bit claimed",
        req(Op::Nop),
        b"",
        Ok(()),
    );

    let st = d.status();
    assert_eq!(
        st.clients, 2,
        "the hostile client is still connected (it only sent bad requests)"
    );
    assert!(
        st.malformed_total >= m + 10,
        "malformed requests counted: {} -> {}",
        m,
        st.malformed_total
    );
    drop(h);
    util::eventually("hostile client gone", HANG_GUARD, || {
        d.status().clients == 1
    });
    still_serves(&good, 1000);
    drop(good);
    util::eventually("all clients gone", HANG_GUARD, || d.status().clients == 0);
    assert_eq!(
        d.status().tiers[0].leased_bytes,
        0,
        "the hostile client's leases were reclaimed"
    );
}

#[test]
fn broken_rings_disconnect_the_client_only() {
    let d = small();
    let good = d.client();
    still_serves(&good, 0);

    // 1. A slot index beyond the ring depth.
    // The good client holds a lease of its own: measure against it.
    let leased0 = d.status().tiers[0].leased_bytes;
    let mut h = Hostile::connect(&d);
    h.expect("nop", req(Op::Nop), b"", Ok(()));
    h.expect(
        "lease",
        Request {
            len: 1 << 20,
            ..req(Op::Lease)
        },
        b"",
        Ok(()),
    );
    assert!(d.status().tiers[0].leased_bytes > leased0);
    let m0 = d.status().malformed_total;
    assert_eq!(d.status().clients, 2);
    h.sq.push(h.hello.depth as u64 + 5).unwrap();
    h.bell();
    util::eventually(
        "client with a bad slot index disconnected",
        HANG_GUARD,
        || d.status().clients == 1,
    );
    let st = d.status();
    assert!(
        st.malformed_total > m0,
        "bad slot index counted as malformed"
    );
    assert_eq!(st.tiers[0].leased_bytes, leased0, "its lease was reclaimed");
    // The disconnected client gets no more answers (and the daemon does not crash on it).
    let mut r = req(Op::Nop);
    assert!(
        h.try_call(&mut r, b"", Duration::from_millis(300))
            .is_none(),
        "a disconnected client was served"
    );
    still_serves(&good, 1);
    drop(h);

    // 2. Submission ring indices corrupted (tail far beyond head).
    let mut h = Hostile::connect(&d);
    h.expect("nop", req(Op::Nop), b"", Ok(()));
    util::eventually("second hostile registered", HANG_GUARD, || {
        d.status().clients == 2
    });
    let m1 = d.status().malformed_total;
    let head = h
        .ring_word(h.layout.sq_off, Ring::HEAD_OFFSET)
        .load(Ordering::SeqCst);
    h.ring_word(h.layout.sq_off, Ring::TAIL_OFFSET)
        .store(head.wrapping_add(100_000), Ordering::SeqCst);
    h.bell();
    util::eventually(
        "client with a corrupt ring disconnected",
        HANG_GUARD,
        || d.status().clients == 1,
    );
    assert!(
        d.status().malformed_total > m1,
        "a corrupt ring counts as malformed"
    );
    still_serves(&good, 2);
    drop(h);

    // 3. Head moved backwards by more than the capacity.
    let mut h = Hostile::connect(&d);
    h.expect("nop", req(Op::Nop), b"", Ok(()));
    util::eventually("third hostile registered", HANG_GUARD, || {
        d.status().clients == 2
    });
    let tail = h
        .ring_word(h.layout.sq_off, Ring::TAIL_OFFSET)
        .load(Ordering::SeqCst);
    h.ring_word(h.layout.sq_off, Ring::HEAD_OFFSET)
        .store(tail.wrapping_sub(h.hello.depth * 3), Ordering::SeqCst);
    h.bell();
    util::eventually(
        "client with a rewound head disconnected",
        HANG_GUARD,
        || d.status().clients == 1,
    );
    still_serves(&good, 3);
    drop(h);

    // 4. A flood: the same slot pushed depth times while never reading completions.
    let mut h = Hostile::connect(&d);
    h.expect("nop", req(Op::Nop), b"", Ok(()));
    util::eventually("fourth hostile registered", HANG_GUARD, || {
        d.status().clients == 2
    });
    for _ in 0..3 {
        for _ in 0..h.hello.depth {
            let _ = h.sq.push(0);
        }
        h.bell();
        std::thread::sleep(Duration::from_millis(50));
    }
    still_serves(&good, 4);
    drop(h);

    let st = d.status();
    assert!(st.malformed_total > 0);
    assert!(st.pid > 0);
    util::eventually("only the good client left", HANG_GUARD, || {
        d.status().clients == 1
    });
    drop(good);
    util::eventually("all clients gone", HANG_GUARD, || d.status().clients == 0);
    assert_eq!(d.status().tiers[0].leased_bytes, 0);
}

// ---- bad API arguments --------------------------------------------------

#[test]
fn bad_arguments_are_errors_not_panics() {
    let d = small();
    let c = d.client();
    let b = c.bucket("args").unwrap();
    // Bucket names.
    assert_eq!(errno_of(c.bucket("")), Errno::Name);
    assert_eq!(errno_of(c.bucket("a\0b")), Errno::Name);
    assert_eq!(
        errno_of(c.bucket(&"b".repeat(5000))),
        Errno::Name,
        "longer than bucket_name_max"
    );
    assert_eq!(
        errno_of(c.bucket(&"b".repeat(100_000))),
        Errno::Name,
        "longer than a request"
    );
    assert_eq!(errno_of(c.bucket_open("missing")), Errno::NoBucket);
    assert_eq!(b.rename("").unwrap_err().errno, Errno::Name);
    // Blob names.
    assert_eq!(b.put("", b"x").unwrap_err().errno, Errno::Name);
    assert_eq!(b.put("a\0b", b"x").unwrap_err().errno, Errno::Name);
    assert_eq!(
        b.put(&"n".repeat(2000), b"x").unwrap_err().errno,
        Errno::Name,
        "longer than blob_name_max"
    );
    assert_eq!(
        b.put(&"n".repeat(100_000), b"x").unwrap_err().errno,
        Errno::Name,
        "longer than a request"
    );
    assert_eq!(
        b.put_at(&"n".repeat(2000), 0, b"x").unwrap_err().errno,
        Errno::Name
    );
    assert_eq!(
        b.append(&"n".repeat(2000), b"x").unwrap_err().errno,
        Errno::Name
    );
    assert_eq!(b.get("").unwrap_err().errno, Errno::Name);
    assert_eq!(b.get(&"n".repeat(100_000)).unwrap_err().errno, Errno::Name);
    assert_eq!(b.stat("a\0").unwrap_err().errno, Errno::Name);
    assert_eq!(b.delete("").unwrap_err().errno, Errno::Name);
    // Missing things.
    assert_eq!(b.delete("missing").unwrap_err().errno, Errno::NoBlob);
    assert_eq!(b.get("missing").unwrap_err().errno, Errno::NoBlob);
    assert_eq!(b.stat("missing").unwrap_err().errno, Errno::NoBlob);
    assert!(!b.exists("missing").unwrap());
    assert_eq!(
        b.rename_blob("missing", "x", true).unwrap_err().errno,
        Errno::NoBlob
    );
    // Rename onto an existing name without replace; onto a bad name.
    b.put("x", b"1").unwrap();
    b.put("y", b"2").unwrap();
    assert_eq!(
        b.rename_blob("x", "y", false).unwrap_err().errno,
        Errno::Exists
    );
    assert_eq!(
        b.rename_blob("x", "", false).unwrap_err().errno,
        Errno::Name
    );
    assert_eq!(
        b.rename_blob("x", &"n".repeat(2000), true)
            .unwrap_err()
            .errno,
        Errno::Name
    );
    assert_eq!(
        b.rename_blob("x", "x", false),
        Ok(()),
        "rename onto itself is a no-op"
    );
    assert_eq!(b.get("x").unwrap(), b"1");
    // Scores outside [0, 1].
    for s in [1.5f32, -0.1, f32::INFINITY, f32::NEG_INFINITY, 1.000_001] {
        assert_eq!(
            b.set_score("x", Some(s), false).unwrap_err().errno,
            Errno::Inval,
            "score {s}"
        );
    }
    assert_eq!(
        b.stat("x").unwrap().user_score,
        None,
        "refused scores change nothing"
    );
    b.set_score("x", Some(0.0), false).unwrap();
    // Tags.
    assert_eq!(b.tag("", "v").unwrap_err().errno, Errno::Name);
    // Everything still works afterwards.
    assert_eq!(b.get("y").unwrap(), b"2");
    assert_eq!(
        d.status().malformed_total,
        0,
        "a well-behaved client sends no malformed requests"
    );
}

// ---- full tiers ---------------------------------------------------------

#[test]
fn all_tiers_full_puts_spill_and_succeed() {
    let d = TestDaemon::start_with(Tiers {
        ram: "16MiB",
        disk: Some("32MiB"),
        extra_yaml: "",
    });
    let c = d.client();
    let b = c.bucket("full").unwrap();
    let mut sums = Vec::new();
    for i in 0..100u64 {
        let data = random_bytes(i, 1 << 20);
        b.put(&format!("f{i:03}"), &data)
            .unwrap_or_else(|e| panic!("put {i} with tiers full: {e}"));
        sums.push(checksum(&data));
    }
    for (i, sum) in sums.iter().enumerate() {
        let got = b.get(&format!("f{i:03}")).unwrap();
        assert_eq!((got.len(), checksum(&got)), (1 << 20, *sum), "f{i:03}");
    }
    let st = d.status();
    let disk = st.tiers.iter().find(|t| t.name == "disk").unwrap();
    assert!(
        disk.spilled_bytes > 0,
        "the disk tier spilled beyond its capacity: {st:?}"
    );
    assert!(disk.used_bytes > disk.capacity_bytes);
    assert_eq!(st.blobs, 100);
    // Freeing space works: delete everything, every tier is empty again.
    for i in 0..100 {
        b.delete(&format!("f{i:03}")).unwrap();
    }
    let st = d.status();
    for t in &st.tiers {
        assert_eq!(t.used_bytes, 0, "{st:?}");
    }
}

/// A RAM-only daemon has nowhere to spill but the arena's staging reserve
/// (max(8 × lease, 64 MiB)). Puts beyond the RAM capacity succeed while the
/// reserve lasts; after that the put fails with `NoSpace` (never a hang or
/// a crash), and deleting blobs makes room again.
#[test]
fn ram_only_daemon_beyond_capacity() {
    let d = TestDaemon::start_with(Tiers {
        ram: "16MiB",
        disk: None,
        extra_yaml: "",
    });
    let c = d.client();
    let b = c.bucket("ramonly").unwrap();
    let mut stored = Vec::new();
    let mut first_err = None;
    for i in 0..200u64 {
        let data = random_bytes(i, 1 << 20);
        match b.put(&format!("r{i:03}"), &data) {
            Ok(()) => stored.push(checksum(&data)),
            Err(e) => {
                first_err = Some(e);
                break;
            }
        }
    }
    // Well beyond the 16 MiB capacity before anything fails.
    assert!(
        stored.len() >= 40,
        "only {} MiB fit in a 16 MiB RAM tier + 64 MiB staging",
        stored.len()
    );
    let st = d.status();
    assert!(
        st.tiers[0].spilled_bytes > 0,
        "RAM tier spilled into the staging reserve: {st:?}"
    );
    let e = first_err.expect("200 MiB cannot fit in an 80 MiB arena");
    assert_eq!(e.errno, Errno::NoSpace, "{e}");
    for (i, sum) in stored.iter().enumerate() {
        let got = b.get(&format!("r{i:03}")).unwrap();
        assert_eq!(checksum(&got), *sum, "r{i:03}");
    }
    assert!(
        b.list().unwrap().iter().all(|n| n.starts_with('r')),
        "no temporaries left by the failed put"
    );
    assert_eq!(st.blobs as usize, stored.len());
    // Make room; puts work again.
    for i in 0..10 {
        b.delete(&format!("r{i:03}")).unwrap();
    }
    b.put("again", &random_bytes(1, 1 << 20)).unwrap();
    assert_eq!(b.get("again").unwrap(), random_bytes(1, 1 << 20));
}

// ---- the daemon killed under a waiting client ---------------------------

#[test]
fn daemon_killed_while_client_waits() {
    let mut d = small();
    let c = d.client();
    let b = Arc::new(c.bucket("k").unwrap());
    b.put("x", &random_bytes(3, 2 << 20)).unwrap();
    let pid = d.child.as_ref().unwrap().id() as i32;
    // Freeze the daemon so the next request is certainly left waiting.
    // SAFETY: kill takes plain integers; a pid that is gone is an error return, not undefined behaviour.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let (tx, rx) = std::sync::mpsc::channel();
    let b2 = b.clone();
    // A stat asks the daemon (a get of "x" would be served from the get
    // index without it; after the kill it is refused, checked below).
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(b2.size_of("x").map(|v| v as usize));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a frozen daemon answered"
    );
    d.kill9();
    let r = rx
        .recv_timeout(HANG_GUARD)
        .expect("client still waiting long after the daemon died: hang");
    waiter.join().unwrap();
    assert_eq!(r.unwrap_err().errno, Errno::NoDaemon);
    // Later calls fail the same way, on every path.
    assert_eq!(errno_of(b.get("x")), Errno::NoDaemon);
    assert_eq!(errno_of(b.put("y", b"small")), Errno::NoDaemon);
    assert_eq!(
        errno_of(b.put("z", &random_bytes(4, 3 << 20))),
        Errno::NoDaemon
    );
    assert_eq!(errno_of(c.bucket("other")), Errno::NoDaemon);
    assert_eq!(errno_of(Client::connect_to(&d.socket)), Errno::NoDaemon);
    // A restarted daemon (which sweeps the dead one's shared memory) serves
    // new clients; the old client keeps failing cleanly.
    d.spawn();
    let c2 = d.client();
    c2.bucket("new").unwrap().put("a", b"fresh").unwrap();
    assert_eq!(c2.bucket_open("new").unwrap().get("a").unwrap(), b"fresh");
    assert_eq!(errno_of(b.get("x")), Errno::NoDaemon);
}

#[test]
fn daemon_stopped_gracefully_while_client_connected() {
    let mut d = small();
    let c = d.client();
    let b = c.bucket("s").unwrap();
    b.put("x", b"1").unwrap();
    d.stop();
    let e = errno_of(b.get("x"));
    assert!(matches!(e, Errno::NoDaemon | Errno::Shutdown), "{e:?}");
}

/// A put too big for one lease is written under a hidden temporary name;
/// when it fails, the error names what the caller asked for (issue 12,
/// item 17: it named the temporary blob), and nothing is left behind.
#[test]
fn a_failed_large_put_names_the_blob_not_its_temporary() {
    let d = TestDaemon::start_with(Tiers {
        ram: "16MiB",
        disk: None,
        extra_yaml: "",
    });
    let c = d.client();
    let b = c.bucket("ramonly").unwrap();
    let e = b.put("big", &random_bytes(9, 200 << 20)).unwrap_err();
    assert_eq!(e.errno, Errno::NoSpace, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("ramonly/big"), "{msg}");
    assert!(!msg.contains('\u{1}') && !msg.contains("tmp."), "{msg}");
    assert!(b.list().unwrap().is_empty(), "no temporary left");
}

/// A request that panics inside the daemon: its client gets `Internal` at
/// once (no hang), the daemon logs which op it was and exits (status 70)
/// without running anything on the possibly half-changed state, and a
/// restart replays what was durable from the journal.
#[test]
fn a_panicking_request_is_answered_and_stops_the_daemon() {
    let mut d = TestDaemon::configured(Tiers::default());
    d.spawn_env(&[("STRATA_INTERNAL_PANIC_OP", "Stat")]);
    {
        let c = d.client();
        let b = c.bucket("kept").unwrap();
        b.put("x", b"durable bytes").unwrap();
        b.flush(true).unwrap();
        let e = b.stat("x").unwrap_err();
        assert_eq!(e.errno, Errno::Internal, "{e}");
        let e = b.get("x").unwrap_err();
        assert_eq!(e.errno, Errno::NoDaemon, "{e}");
    }
    let mut child = d.child.take().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(started.elapsed() < HANG_GUARD, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(70), "log:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("a Stat request panicked"), "log:\n{log}");
    common::remove_shm(&d.shm_prefix);
    d.spawn();
    let c = d.client();
    assert_eq!(
        c.bucket_open("kept").unwrap().get("x").unwrap(),
        b"durable bytes"
    );
}
