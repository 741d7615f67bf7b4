//! One channel of a client: submission/completion rings plus request slots
//! in the client's shared-memory segment, a lease of arena space, and the
//! pins to give back. A channel is used by one thread at a time (its
//! `Mutex` in `ShmTransport`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strata_proto::msg::{DataRef, Reply, Request};
use strata_proto::Errno;
use strata_shm::{Ring, ShmSegment};
use strata_tier::TierBackend;
use strata_transport_shm::layout::{ChannelHeader, ClientLayout, SlotRecords};
use strata_transport_shm::{codec, Op, RequestRecord, RELEASES_MAX};

use crate::shm::ShmShared;
use crate::{err, Result};

/// How long one sleep lasts before the client re-checks that the daemon lives.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Releases queued beyond this are flushed with an explicit `Unpin`.
const RELEASES_QUEUED_MAX: usize = 64;

#[derive(Debug, Clone, Copy)]
pub struct Submitted {
    pub slot: u32,
    pub tag: u64,
    /// The op the reply answers (how to decode it).
    pub op: Op,
    /// Bytes of the caller's data this request carries (puts).
    pub data_len: usize,
}

pub struct Chan {
    pub index: u32,
    opened: bool,
    sq: Ring,
    cq: Ring,
    base: *mut u8,
    layout: ClientLayout,
    /// Bit i: slot i is free.
    free: Vec<bool>,
    /// Bit i: slot i completed, response not yet consumed.
    done: Vec<bool>,
    /// Bit i: nobody waits for slot i's response (fire-and-forget); it is
    /// freed when reaped.
    unwaited: Vec<bool>,
    next_tag: u64,
    lease: Option<(u64, u64)>,
    releases: Vec<u64>,
}

// SAFETY: the raw pointer refers to the client segment, which lives as long
// as the `ShmTransport` holding the channel; access is serialised by the channel's Mutex.
unsafe impl Send for Chan {}

impl Chan {
    pub fn attach(seg: &ShmSegment, layout: &ClientLayout, index: u32) -> Result<Chan> {
        let base = seg.as_ptr();
        let off = layout.channel_off(index);
        let sq =
            // SAFETY: the ring's region lies inside the mapped segment at offsets from its layout; attach validates the header.
            unsafe { Ring::attach(base.add(off + layout.sq_off), layout.cq_off - layout.sq_off) };
        // SAFETY: the ring's region lies inside the mapped segment at offsets from its layout; attach validates the header.
        let cq = unsafe {
            Ring::attach(
                base.add(off + layout.cq_off),
                layout.slots_off - layout.cq_off,
            )
        };
        let (sq, cq) = match (sq, cq) {
            (Ok(s), Ok(c)) => (s, c),
            _ => return Err(err(Errno::Version, "client segment rings are invalid")),
        };
        Ok(Chan {
            index,
            opened: false,
            sq,
            cq,
            base,
            layout: *layout,
            free: vec![true; layout.depth as usize],
            done: vec![false; layout.depth as usize],
            unwaited: vec![false; layout.depth as usize],
            next_tag: 1,
            lease: None,
            releases: Vec::new(),
        })
    }

    fn header(&self) -> &ChannelHeader {
        // SAFETY: the header lies at a layout offset inside the mapped segment, which lives as long as `self`; its fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.base.add(self.layout.channel_off(self.index)) as *const ChannelHeader) }
    }
    fn slot_ptr(&self, slot: u32) -> *mut SlotRecords {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.base.add(self.layout.slot_off(self.index, slot)) as *mut SlotRecords }
    }
    fn arg_ptr(&self, slot: u32) -> *mut u8 {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.base.add(self.layout.arg_off(self.index, slot)) }
    }

    fn ensure_open(&mut self, inner: &ShmShared) -> Result<()> {
        if self.opened {
            return Ok(());
        }
        let word = self.index as usize / 64;
        inner.header().claimed[word].fetch_or(1u64 << (self.index % 64), Ordering::SeqCst);
        self.opened = true;
        let sub = self.submit(inner, &Request::ChannelOpen)?;
        self.wait(inner, sub)?
            .map_err(|e| err(e, "claiming a channel"))?;
        Ok(())
    }

    fn take_slot(&mut self, inner: &ShmShared) -> Result<u32> {
        if let Some(i) = self.free.iter().position(|f| *f) {
            self.free[i] = false;
            return Ok(i as u32);
        }
        // Every slot is owned by a submitted request whose owner has not
        // collected it yet. Only `wait` frees a slot, and it needs this
        // channel's lock, which we hold: blocking here would wait forever.
        // Reap what has completed (the slots stay owned by their waiters)
        // and report Busy.
        self.reap(inner, false)?;
        // Fire-and-forget requests complete without anyone's help: wait for
        // one (bounded: each round reaps ≥ 1 completion or fails).
        for _ in 0..self.unwaited.len() {
            if self.free.iter().any(|f| *f) || !self.unwaited.iter().any(|u| *u) {
                break;
            }
            self.reap(inner, true)?;
        }
        match self.free.iter().position(|f| *f) {
            Some(i) => {
                self.free[i] = false;
                Ok(i as u32)
            }
            None => Err(err(
                Errno::Busy,
                "every request slot of this thread's channel is in flight",
            )),
        }
    }

    /// Queues a pin release to piggy-back on the next request.
    pub fn release(&mut self, pin: u64) {
        if pin != 0 {
            self.releases.push(pin);
        }
    }

    /// Encodes a request into a free slot and submits it.
    pub fn submit(&mut self, inner: &ShmShared, req: &Request) -> Result<Submitted> {
        if !self.opened && !matches!(req, Request::ChannelOpen) {
            self.ensure_open(inner)?;
        }
        if self.releases.len() > RELEASES_QUEUED_MAX {
            self.flush_releases(inner)?;
        }
        let slot = self.take_slot(inner)?;
        let mut rec = RequestRecord::default();
        for r in rec.releases.iter_mut().take(RELEASES_MAX) {
            match self.releases.pop() {
                Some(p) => *r = p,
                None => break,
            }
        }
        rec.tag = self.next_tag;
        // SAFETY: the slot is ours until its index is pushed; its arg area
        // is `arg_bytes` long inside the mapped client segment.
        let arg = unsafe {
            std::slice::from_raw_parts_mut(self.arg_ptr(slot), self.layout.arg_bytes as usize)
        };
        if let Err(e) = codec::encode_request(req, &mut rec, arg) {
            self.free[slot as usize] = true;
            // Give the releases back for the next request.
            self.releases
                .extend(rec.releases.iter().copied().filter(|&p| p != 0));
            let why = if e == Errno::Name {
                "names too long for a request"
            } else {
                "request the transport cannot carry"
            };
            return Err(err(e, why));
        }
        self.next_tag += 1;
        // SAFETY: in bounds by layout; volatile: the daemon reads it.
        unsafe { std::ptr::write_volatile(&mut (*self.slot_ptr(slot)).req, rec) };
        if self.sq.push(slot as u64).is_err() {
            self.free[slot as usize] = true;
            return Err(err(Errno::Busy, "submission ring full"));
        }
        inner.ctl().daemon_bell.ring();
        Ok(Submitted {
            slot,
            tag: rec.tag,
            op: codec::op_of(req),
            data_len: 0,
        })
    }

    fn flush_releases(&mut self, inner: &ShmShared) -> Result<()> {
        // Bounded: each Unpin carries RELEASES_MAX of them.
        while !self.releases.is_empty() {
            let sub = self.submit(inner, &Request::Unpin)?;
            let _ = self.wait(inner, sub)?;
        }
        Ok(())
    }

    /// Moves finished slots from the completion ring to `done`.
    fn reap(&mut self, inner: &ShmShared, block: bool) -> Result<()> {
        let mut got = false;
        loop {
            match self.cq.pop() {
                Ok(Some(s)) if (s as usize) < self.done.len() => {
                    let i = s as usize;
                    if self.unwaited[i] {
                        self.unwaited[i] = false;
                        self.free[i] = true;
                    } else {
                        self.done[i] = true;
                    }
                    got = true;
                }
                Ok(Some(_)) | Err(_) => {
                    return Err(err(Errno::Internal, "completion ring corrupt"))
                }
                Ok(None) => break,
            }
        }
        if !got && block {
            self.sleep(inner)?;
        }
        Ok(())
    }

    fn sleep(&self, inner: &ShmShared) -> Result<()> {
        let cq = &self.cq;
        let started = Instant::now();
        // Bounded: gives up when the daemon is gone.
        loop {
            if self
                .header()
                .cq_bell
                .wait_until(|| !cq.is_empty(), inner.spin, Some(WAIT_SLICE))
            {
                return Ok(());
            }
            if !inner.daemon_alive() {
                return Err(err(
                    Errno::NoDaemon,
                    format!(
                        "the daemon went away while a request was in flight ({:?})",
                        started.elapsed()
                    ),
                ));
            }
        }
    }

    /// Waits for `sub` and decodes its reply: the outer error is the
    /// transport's, the inner one the daemon's answer.
    pub fn wait(
        &mut self,
        inner: &ShmShared,
        sub: Submitted,
    ) -> Result<std::result::Result<Reply<'static>, Errno>> {
        let i = sub.slot as usize;
        while !self.done[i] {
            self.reap(inner, true)?;
        }
        self.done[i] = false;
        // SAFETY: in bounds by layout; the daemon is done with the slot.
        let resp = unsafe { std::ptr::read_volatile(&(*self.slot_ptr(sub.slot)).resp) };
        // SAFETY: as in `submit`.
        let arg = unsafe {
            std::slice::from_raw_parts(self.arg_ptr(sub.slot), self.layout.arg_bytes as usize)
        };
        let reply = codec::decode_reply(sub.op, &resp, arg);
        self.free[i] = true;
        if resp.tag != sub.tag {
            return Err(err(Errno::Internal, "response does not match its request"));
        }
        if reply == Err(Errno::Malformed) && resp.status == 0 {
            return Err(err(Errno::Malformed, "reply the client cannot decode"));
        }
        Ok(reply)
    }

    /// Submits `req` and does not wait for its response (errors of the
    /// request itself are dropped): for notifications such as `FileClose`.
    /// Ordered with the channel's later requests like any other.
    pub fn submit_unwaited(&mut self, inner: &ShmShared, req: &Request) -> Result<()> {
        let sub = self.submit(inner, req)?;
        self.unwaited[sub.slot as usize] = true;
        // Collect what already completed so slots do not pile up.
        self.reap(inner, false)
    }

    /// Makes sure the lease has `len` bytes (block-rounded) free; returns
    /// false if the daemon cannot grant that much.
    fn lease_room(&mut self, inner: &ShmShared, len: u64) -> Result<bool> {
        let block = inner.arena_block_bytes.max(1);
        let need = len.div_ceil(block).max(1) * block;
        if let Some((cur, end)) = self.lease {
            if end - cur >= need {
                return Ok(true);
            }
        }
        let want = need.max(inner.lease_bytes);
        let sub = self.submit(inner, &Request::Lease { want_bytes: want })?;
        let reply = self.wait(inner, sub)?.map_err(|e| err(e, "lease"))?;
        let Reply::Lease { off, len: granted } = reply else {
            return Err(err(Errno::Malformed, "lease answered with something else"));
        };
        if granted == 0 {
            self.lease = None;
            return Ok(false);
        }
        if off
            .checked_add(granted)
            .is_none_or(|e| e > inner.arena.segment().len() as u64)
        {
            return Err(err(Errno::Malformed, "lease outside the arena"));
        }
        self.lease = Some((off, off + granted));
        // Map the whole lease in one call instead of a page fault per 4 KiB
        // on the write path (pages the daemon pre-faulted are only mapped).
        inner
            .arena
            .segment()
            .populate(off as usize..(off + granted) as usize);
        Ok(granted >= need)
    }

    /// Copies `data` into the lease and submits the request `make` builds
    /// around it (`Put`, `FileWrite`, `FileFill`). Returns None when no
    /// lease large enough can be had (the caller then writes in pieces or
    /// inline, `submit_inline`).
    pub fn submit_data<'d>(
        &mut self,
        inner: &ShmShared,
        data: &[u8],
        make: impl FnOnce(DataRef<'d>) -> Request<'d>,
    ) -> Result<Option<Submitted>> {
        if !self.opened {
            self.ensure_open(inner)?;
        }
        if !self.lease_room(inner, data.len() as u64)? {
            return Ok(None);
        }
        let (cur, end) = self.lease.expect("lease_room guarantees a lease");
        let block = inner.arena_block_bytes.max(1);
        // [cur, cur+len) lies inside our lease, inside the arena (checked
        // when granted; write_at checks again).
        inner
            .arena
            .write_at(cur, data)
            .map_err(|e| err(Errno::Internal, format!("lease write: {e}")))?;
        let used = (data.len() as u64).div_ceil(block).max(1) * block;
        self.lease = Some(((cur + used).min(end), end));
        let req = make(DataRef::Lease {
            off: cur,
            len: data.len() as u64,
        });
        let mut sub = self.submit(inner, &req)?;
        sub.data_len = data.len();
        Ok(Some(sub))
    }

    /// Submits the request `make` builds around bytes that travel in the
    /// slot itself (the last resort when the arena has no room for a lease).
    /// Carries as much of `data` as fits beside `name_len` bytes of names;
    /// `data_len` says how much.
    pub fn submit_inline<'d>(
        &mut self,
        inner: &ShmShared,
        name_len: usize,
        data: &'d [u8],
        make: impl FnOnce(DataRef<'d>) -> Request<'d>,
    ) -> Result<Submitted> {
        let room = (self.layout.arg_bytes as usize).saturating_sub(name_len);
        if room == 0 {
            return Err(err(Errno::Name, "blob name fills the whole request"));
        }
        let n = data.len().min(room);
        let mut sub = self.submit(inner, &make(DataRef::Inline(&data[..n])))?;
        sub.data_len = n;
        Ok(sub)
    }
}
