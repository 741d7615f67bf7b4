//! One channel of a client: submission/completion rings plus request slots
//! in the client's shared-memory segment, a lease of arena space, and the
//! pins to give back. A channel is used by one thread at a time (its
//! `Mutex` in `Inner`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strata_proto::layout::{ChannelHeader, ClientLayout, SlotRecords};
use strata_proto::wire::{flags, Op, Request, Response, RELEASES_MAX};
use strata_proto::Errno;
use strata_shm::{Ring, ShmSegment};

use crate::{err, Inner, Result};

/// How long one sleep lasts before the client re-checks that the daemon lives.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Releases queued beyond this are flushed with an explicit `Unpin`.
const RELEASES_QUEUED_MAX: usize = 64;

#[derive(Debug, Clone, Copy)]
pub struct Submitted {
    pub slot: u32,
    pub tag: u64,
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
// as `Inner`; access is serialised by the channel's Mutex.
unsafe impl Send for Chan {}

impl Chan {
    pub fn attach(seg: &ShmSegment, layout: &ClientLayout, index: u32) -> Result<Chan> {
        let base = seg.as_ptr();
        let off = layout.channel_off(index);
        let sq =
            unsafe { Ring::attach(base.add(off + layout.sq_off), layout.cq_off - layout.sq_off) };
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
        unsafe { &*(self.base.add(self.layout.channel_off(self.index)) as *const ChannelHeader) }
    }
    fn slot_ptr(&self, slot: u32) -> *mut SlotRecords {
        unsafe { self.base.add(self.layout.slot_off(self.index, slot)) as *mut SlotRecords }
    }
    fn arg_ptr(&self, slot: u32) -> *mut u8 {
        unsafe { self.base.add(self.layout.arg_off(self.index, slot)) }
    }

    fn ensure_open(&mut self, inner: &Inner) -> Result<()> {
        if self.opened {
            return Ok(());
        }
        let word = self.index as usize / 64;
        inner.header().claimed[word].fetch_or(1u64 << (self.index % 64), Ordering::SeqCst);
        self.opened = true;
        let sub = self.submit(
            inner,
            Request {
                op: Op::ChannelOpen as u32,
                ..Request::default()
            },
            &[],
        )?;
        let (resp, _) = self.wait(inner, sub, false)?;
        resp.result()?;
        Ok(())
    }

    fn take_slot(&mut self, inner: &Inner) -> Result<u32> {
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

    /// Writes a request and its argument byte strings into a free slot and
    /// submits it.
    pub fn submit(&mut self, inner: &Inner, mut req: Request, args: &[&[u8]]) -> Result<Submitted> {
        if !self.opened && req.op != Op::ChannelOpen as u32 {
            self.ensure_open(inner)?;
        }
        let total: usize = args.iter().map(|a| a.len()).sum();
        if total > self.layout.arg_bytes as usize {
            return Err(err(Errno::Name, "names too long for a request"));
        }
        if self.releases.len() > RELEASES_QUEUED_MAX {
            self.flush_releases(inner)?;
        }
        let slot = self.take_slot(inner)?;
        let arg = self.arg_ptr(slot);
        let mut at = 0usize;
        for a in args {
            unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), arg.add(at), a.len()) };
            at += a.len();
        }
        for r in req.releases.iter_mut().take(RELEASES_MAX) {
            match self.releases.pop() {
                Some(p) => *r = p,
                None => break,
            }
        }
        req.tag = self.next_tag;
        self.next_tag += 1;
        unsafe { std::ptr::write_volatile(&mut (*self.slot_ptr(slot)).req, req) };
        if self.sq.push(slot as u64).is_err() {
            self.free[slot as usize] = true;
            return Err(err(Errno::Busy, "submission ring full"));
        }
        inner.ctl().daemon_bell.ring();
        Ok(Submitted {
            slot,
            tag: req.tag,
            data_len: 0,
        })
    }

    fn flush_releases(&mut self, inner: &Inner) -> Result<()> {
        // Bounded: each Unpin carries RELEASES_MAX of them.
        while !self.releases.is_empty() {
            let sub = self.submit(
                inner,
                Request {
                    op: Op::Unpin as u32,
                    ..Request::default()
                },
                &[],
            )?;
            self.wait(inner, sub, false)?;
        }
        Ok(())
    }

    /// Moves finished slots from the completion ring to `done`.
    fn reap(&mut self, inner: &Inner, block: bool) -> Result<()> {
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

    fn sleep(&self, inner: &Inner) -> Result<()> {
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

    /// Waits for `sub` and returns its response plus the bytes the daemon
    /// wrote to the arg area (when `copy_arg`).
    pub fn wait(
        &mut self,
        inner: &Inner,
        sub: Submitted,
        copy_arg: bool,
    ) -> Result<(Response, Vec<u8>)> {
        let i = sub.slot as usize;
        while !self.done[i] {
            self.reap(inner, true)?;
        }
        self.done[i] = false;
        let resp: Response = unsafe { std::ptr::read_volatile(&(*self.slot_ptr(sub.slot)).resp) };
        let mut out = Vec::new();
        if copy_arg && resp.arg_len > 0 {
            let n = (resp.arg_len as usize).min(self.layout.arg_bytes as usize);
            out.resize(n, 0);
            unsafe { std::ptr::copy_nonoverlapping(self.arg_ptr(sub.slot), out.as_mut_ptr(), n) };
        }
        self.free[i] = true;
        if resp.tag != sub.tag {
            return Err(err(Errno::Internal, "response does not match its request"));
        }
        Ok((resp, out))
    }

    /// Submits `req` and does not wait for its response (errors of the
    /// request itself are dropped): for notifications such as `FileClose`.
    /// Ordered with the channel's later requests like any other.
    pub fn submit_unwaited(&mut self, inner: &Inner, req: Request) -> Result<()> {
        let sub = self.submit(inner, req, &[])?;
        self.unwaited[sub.slot as usize] = true;
        // Collect what already completed so slots do not pile up.
        self.reap(inner, false)
    }

    /// Makes sure the lease has `len` bytes (block-rounded) free; returns
    /// false if the daemon cannot grant that much.
    fn lease_room(&mut self, inner: &Inner, len: u64) -> Result<bool> {
        let block = inner.hello.arena_block_bytes.max(1);
        let need = len.div_ceil(block).max(1) * block;
        if let Some((cur, end)) = self.lease {
            if end - cur >= need {
                return Ok(true);
            }
        }
        let want = need.max(inner.hello.lease_bytes);
        let sub = self.submit(
            inner,
            Request {
                op: Op::Lease as u32,
                len: want,
                ..Request::default()
            },
            &[],
        )?;
        let (resp, _) = self.wait(inner, sub, false)?;
        resp.result()?;
        if resp.val1 == 0 {
            self.lease = None;
            return Ok(false);
        }
        let (off, granted) = (resp.val0, resp.val1);
        if off
            .checked_add(granted)
            .is_none_or(|e| e > inner.arena.len() as u64)
        {
            return Err(err(Errno::Malformed, "lease outside the arena"));
        }
        self.lease = Some((off, off + granted));
        // Map the whole lease in one call instead of a page fault per 4 KiB
        // on the write path (pages the daemon pre-faulted are only mapped).
        inner.arena.populate(off as usize..(off + granted) as usize);
        Ok(granted >= need)
    }

    /// Copies `data` into the lease and submits a put. Returns None when no
    /// lease large enough can be had (the caller then writes in pieces).
    pub fn submit_put(
        &mut self,
        inner: &Inner,
        bucket: u64,
        name: &str,
        offset: u64,
        data: &[u8],
        fl: u32,
    ) -> Result<Option<Submitted>> {
        self.submit_data(inner, Op::Put, bucket, name, offset, data, fl)
    }

    /// `submit_put` for any data-carrying op (`Put`, `FileWrite`, `FileFill`).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_data(
        &mut self,
        inner: &Inner,
        op: Op,
        bucket: u64,
        name: &str,
        offset: u64,
        data: &[u8],
        fl: u32,
    ) -> Result<Option<Submitted>> {
        if !self.opened {
            self.ensure_open(inner)?;
        }
        if !self.lease_room(inner, data.len() as u64)? {
            return Ok(None);
        }
        let (cur, end) = self.lease.expect("lease_room guarantees a lease");
        let block = inner.hello.arena_block_bytes.max(1);
        // SAFETY: [cur, cur+len) lies inside our lease (checked against the arena size).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                inner.arena.as_ptr().add(cur as usize),
                data.len(),
            )
        };
        let used = (data.len() as u64).div_ceil(block).max(1) * block;
        self.lease = Some(((cur + used).min(end), end));
        let req = Request {
            op: op as u32,
            flags: fl & !flags::SRC_ARG,
            bucket,
            offset,
            len: data.len() as u64,
            data_off: cur,
            name_len: name.len() as u32,
            ..Request::default()
        };
        let mut sub = self.submit(inner, req, &[name.as_bytes()])?;
        sub.data_len = data.len();
        Ok(Some(sub))
    }

    /// Submits a put whose bytes travel in the slot's arg area (the last
    /// resort when the arena has no room for a lease). Carries as much of
    /// `data` as fits; `data_len` says how much.
    pub fn submit_put_arg(
        &mut self,
        inner: &Inner,
        bucket: u64,
        name: &str,
        offset: u64,
        data: &[u8],
        fl: u32,
    ) -> Result<Submitted> {
        self.submit_data_arg(inner, Op::Put, bucket, name, offset, data, fl)
    }

    /// `submit_put_arg` for any data-carrying op.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_data_arg(
        &mut self,
        inner: &Inner,
        op: Op,
        bucket: u64,
        name: &str,
        offset: u64,
        data: &[u8],
        fl: u32,
    ) -> Result<Submitted> {
        let room = (self.layout.arg_bytes as usize).saturating_sub(name.len());
        if room == 0 {
            return Err(err(Errno::Name, "blob name fills the whole request"));
        }
        let n = data.len().min(room);
        let req = Request {
            op: op as u32,
            flags: fl | flags::SRC_ARG,
            bucket,
            offset,
            len: n as u64,
            name_len: name.len() as u32,
            ..Request::default()
        };
        let mut sub = self.submit(inner, req, &[name.as_bytes(), &data[..n]])?;
        sub.data_len = n;
        Ok(sub)
    }
}
