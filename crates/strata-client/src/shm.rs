//! The node-local transport: shared memory with the daemon on this node.
//!
//! After the `Hello` on the Unix socket, the client maps three segments
//! (control, its own rings and slots, the RAM arena) and opens the
//! directory tiers read-only. Each thread uses one *channel* (a lane:
//! crate::channel). Bytes travel by one copy: written into arena space the
//! daemon leased to the channel, read straight out of the arena or a tier
//! file under a pin.
//!
//! **Architecture Invariant:** the socket (the lifeline) stays open for the
//! transport's lifetime; when it closes the daemon reclaims leases and pins.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_proto::control::HelloReply;
use strata_proto::control::TierInfo;
use strata_proto::msg::{DataRef, Request};
use strata_proto::types::{ReadExtent, TIER_HOLE};
use strata_proto::Errno;
use strata_shm::ShmSegment;
use strata_tier::{DirTier, RamTier, TierBackend};
use strata_transport_shm::layout::{
    ClientHeader, ClientLayout, CtlHeader, CLIENT_MAGIC, CTL_MAGIC,
};
use strata_transport_shm::{Op, PROTOCOL_VERSION};

use crate::channel::{Chan, Submitted};
use crate::transport::{Answer, Lane, Ticket, Transport};
use crate::{err, Result};

/// What every channel of a client shares: the mappings and the hello's
/// sizes.
pub(crate) struct ShmShared {
    pub lifeline: UnixStream,
    pub ctl: ShmSegment,
    pub seg: ShmSegment,
    /// The RAM arena, mapped (the RAM tier's bytes and the leases).
    pub arena: Arc<RamTier>,
    /// Index = tier index: how this client reads each tier (strata-tier).
    pub tiers: Vec<Arc<dyn TierBackend>>,
    /// Index = tier index: the way to the node lending a remote tier's
    /// memory (None for this node's tiers).
    pub remote: Vec<Option<crate::remote::RemoteTransport>>,
    /// Tier descriptions from the hello (names for errors).
    pub tier_info: Vec<TierInfo>,
    pub spin: Duration,
    pub arena_block_bytes: u64,
    pub lease_bytes: u64,
    /// The daemon's get index (None: it publishes none, or
    /// `STRATA_CLIENT_GET_INDEX=0`): small RAM blobs read without a request.
    pub index: Option<strata_transport_shm::index::IndexReader>,
    /// The daemon's stat index (None: it publishes none, or
    /// `STRATA_CLIENT_STAT_INDEX=0`): a stat by path without a request.
    pub stat_index: Option<strata_transport_shm::stat_index::StatReader>,
    /// When the lifeline last showed the daemon up (ns since `epoch`):
    /// direct reads look again at most every `INDEX_ALIVE_CHECK_NS`.
    pub alive_checked_ns: AtomicU64,
    pub epoch: std::time::Instant,
}

/// How stale the daemon's liveness may be for a direct read: a read in this
/// window after a `kill -9` returns the bytes the blob had, as a read that
/// raced the crash would.
const INDEX_ALIVE_CHECK_NS: u64 = 1_000_000;

impl ShmShared {
    pub fn ctl(&self) -> &CtlHeader {
        // SAFETY: the header lies at offset 0 of the mapped control segment
        // (length checked in `attach`), which lives as long as `self`; its
        // fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.ctl.as_ptr() as *const CtlHeader) }
    }
    pub fn header(&self) -> &ClientHeader {
        // SAFETY: the header lies at offset 0 of the mapped client segment
        // (length checked in `attach`), which lives as long as `self`; its
        // fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.seg.as_ptr() as *const ClientHeader) }
    }
    /// The get index, if the daemon is (as far as we know this
    /// millisecond) up: its state word says running, and its end of the
    /// lifeline was open within `INDEX_ALIVE_CHECK_NS`.
    fn index(&self) -> Option<&strata_transport_shm::index::IndexReader> {
        let ix = self.index.as_ref()?;
        self.up_for_direct_reads().then_some(ix)
    }

    /// The stat index, if the daemon is up (as [`ShmShared::index`]).
    fn stat_index(&self) -> Option<&strata_transport_shm::stat_index::StatReader> {
        let ix = self.stat_index.as_ref()?;
        self.up_for_direct_reads().then_some(ix)
    }

    /// Whether what the daemon publishes may be read without asking it: its
    /// state word says running, and its end of the lifeline was open within
    /// `INDEX_ALIVE_CHECK_NS` (looked at again when older).
    fn up_for_direct_reads(&self) -> bool {
        if self.ctl().state.load(Ordering::Acquire) != strata_transport_shm::layout::DAEMON_RUNNING
        {
            return false;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let seen = self.alive_checked_ns.load(Ordering::Relaxed);
        if now.saturating_sub(seen) > INDEX_ALIVE_CHECK_NS {
            if !self.daemon_alive() {
                return false;
            }
            self.alive_checked_ns.store(now, Ordering::Relaxed);
        }
        true
    }

    /// True while the daemon is up (its end of our lifeline is open).
    pub fn daemon_alive(&self) -> bool {
        if self.ctl().state.load(Ordering::SeqCst) != strata_transport_shm::layout::DAEMON_RUNNING {
            return false;
        }
        let mut b = [0u8; 1];
        match rustix::net::recv(
            &self.lifeline,
            &mut b,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => false,
            Ok(_) => true,
            Err(rustix::io::Errno::AGAIN) => true,
            Err(rustix::io::Errno::INTR) => true,
            Err(_) => false,
        }
    }
}

/// The shared-memory transport of one client.
pub struct ShmTransport {
    shared: ShmShared,
    chans: Vec<Mutex<Chan>>,
}

impl ShmTransport {
    /// What `FileStat` by `path` would answer, read from the daemon's stat
    /// index without a request; None: ask the daemon.
    #[inline]
    pub fn stat_indexed(&self, path: &str) -> Option<strata_proto::types::FileAttr> {
        self.shared.stat_index()?.lookup(path.as_bytes())
    }
}

static THREAD_COUNTER: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_INDEX: usize = THREAD_COUNTER.fetch_add(1, Ordering::Relaxed);
}

impl ShmTransport {
    /// Maps the segments the daemon announced in `hello` and checks their
    /// headers; `lifeline` is the socket the hello came over.
    pub fn attach(hello: &HelloReply, lifeline: UnixStream, socket: &Path) -> Result<ShmTransport> {
        let open = |name: &str| {
            ShmSegment::open(name)
                .map_err(|e| err(Errno::NoDaemon, format!("cannot map /dev/shm/{name}: {e}")))
        };
        let ctl = open(&hello.ctl_segment)?;
        let seg = open(&hello.client_segment)?;
        let arena = Arc::new(RamTier::new(open(&hello.arena_segment)?));
        let layout = ClientLayout::new(hello.channels, hello.depth, hello.arg_bytes);
        if seg.len() < layout.total_bytes
            || seg.len() < std::mem::size_of::<ClientHeader>()
            || (arena.segment().len() as u64) < hello.arena_bytes
            || ctl.len() < std::mem::size_of::<CtlHeader>()
        {
            return Err(err(
                Errno::Version,
                "shared-memory segments smaller than announced",
            ));
        }
        let mut tiers: Vec<Arc<dyn TierBackend>> = Vec::with_capacity(hello.tiers.len());
        let mut remote = Vec::with_capacity(hello.tiers.len());
        for t in &hello.tiers {
            let mut lent = None;
            match (t.kind.as_str(), t.node) {
                ("dir", _) => {
                    let f = DirTier::open_read_only(Path::new(&t.path)).map_err(|e| {
                        err(Errno::Io, format!("cannot open tier file {}: {e}", t.path))
                    })?;
                    tiers.push(Arc::new(f));
                }
                ("remote", Some(node)) => {
                    // Read over bulk connections to the lending node
                    // (`read_extents`); the arena stands in, never read.
                    lent = Some(crate::remote::RemoteTransport::new(
                        node,
                        socket.to_path_buf(),
                        hello.client_id,
                    ));
                    tiers.push(arena.clone());
                }
                _ => tiers.push(arena.clone()),
            }
            remote.push(lent);
        }
        let shared = ShmShared {
            lifeline,
            ctl,
            seg,
            arena,
            tiers,
            remote,
            tier_info: hello.tiers.clone(),
            spin: Duration::from_micros(hello.spin_us),
            arena_block_bytes: hello.arena_block_bytes.max(1),
            lease_bytes: hello.lease_bytes,
            index: open_index(&hello.index_segment),
            stat_index: open_stat_index(&hello.stat_segment),
            alive_checked_ns: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        };
        {
            let (h, c) = (shared.header(), shared.ctl());
            if h.magic != CLIENT_MAGIC
                || h.version != PROTOCOL_VERSION
                || c.magic != CTL_MAGIC
                || h.client_id != hello.client_id
            {
                return Err(err(
                    Errno::Version,
                    "client segment header does not match the hello",
                ));
            }
        }
        let mut chans = Vec::with_capacity(layout.channels as usize);
        for i in 0..layout.channels {
            chans.push(Mutex::new(Chan::attach(&shared.seg, &layout, i)?));
        }
        if chans.is_empty() {
            return Err(err(Errno::Version, "the daemon announced no channels"));
        }
        Ok(ShmTransport { shared, chans })
    }
}

/// Maps the daemon's get index, unless there is none or the environment
/// turns it off (`STRATA_CLIENT_GET_INDEX=0`, to compare both ways). A failure
/// only costs speed: every get then asks the daemon.
fn open_index(name: &str) -> Option<strata_transport_shm::index::IndexReader> {
    if name.is_empty() || std::env::var_os("STRATA_CLIENT_GET_INDEX").is_some_and(|v| v == "0") {
        return None;
    }
    strata_transport_shm::index::IndexReader::open(name).ok()
}

/// Maps the daemon's stat index, unless there is none or the environment
/// turns it off (`STRATA_CLIENT_STAT_INDEX=0`, to compare both ways). A
/// failure only costs speed: every stat then asks the daemon.
fn open_stat_index(name: &str) -> Option<strata_transport_shm::stat_index::StatReader> {
    if name.is_empty() || std::env::var_os("STRATA_CLIENT_STAT_INDEX").is_some_and(|v| v == "0") {
        return None;
    }
    strata_transport_shm::stat_index::StatReader::open(name).ok()
}

/// A channel held by one thread, with what it shares with the others.
struct ShmLane<'a> {
    ch: &'a mut Chan,
    shm: &'a ShmShared,
}

fn ticket(lane: u32, s: Submitted) -> Ticket {
    Ticket {
        lane,
        slot: s.slot,
        tag: s.tag,
        code: s.op as u32,
        data_len: s.data_len,
    }
}

impl Lane for ShmLane<'_> {
    #[inline]
    fn submit(&mut self, req: &Request) -> Result<Ticket> {
        let s = self.ch.submit(self.shm, req)?;
        Ok(ticket(self.ch.index, s))
    }

    #[inline]
    fn submit_data<'d>(
        &mut self,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Option<Ticket>> {
        let s = self.ch.submit_data(self.shm, data, make)?;
        Ok(s.map(|s| ticket(self.ch.index, s)))
    }

    #[inline]
    fn submit_inline<'d>(
        &mut self,
        name_len: usize,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Ticket> {
        let s = self.ch.submit_inline(self.shm, name_len, data, make)?;
        Ok(ticket(self.ch.index, s))
    }

    #[inline]
    fn wait(&mut self, t: Ticket) -> Result<Answer> {
        if t.lane != self.ch.index {
            return Err(err(
                Errno::Internal,
                "waiting on another lane than the request's",
            ));
        }
        let op =
            Op::from_u32(t.code).ok_or_else(|| err(Errno::Internal, "ticket of an unknown op"))?;
        self.ch.wait(
            self.shm,
            Submitted {
                slot: t.slot,
                tag: t.tag,
                op,
                data_len: t.data_len,
            },
        )
    }

    #[inline]
    fn notify(&mut self, req: &Request) -> Result<()> {
        self.ch.submit_unwaited(self.shm, req)
    }

    #[inline]
    fn release(&mut self, pin: u64) {
        self.ch.release(pin)
    }

    #[inline]
    fn read_extents(&self, exts: &[ReadExtent], base: u64, dst: &mut [u8]) -> Result<()> {
        for e in exts {
            let d = crate::transport::extent_dst(e, base, dst)?;
            if e.tier == TIER_HOLE {
                d.fill(0);
                continue;
            }
            let (Some(tier), Some(backend)) = (
                self.shm.tier_info.get(e.tier as usize),
                self.shm.tiers.get(e.tier as usize),
            ) else {
                return Err(err(Errno::Malformed, "extent on unknown tier"));
            };
            if let Some(Some(lent)) = self.shm.remote.get(e.tier as usize) {
                lent.donation_read(e.epoch, e.phys_off, d)?;
                continue;
            }
            // The range is pinned by the daemon until we release it.
            backend.read_at(e.phys_off, d).map_err(|x| {
                if x.kind() == std::io::ErrorKind::InvalidInput {
                    err(
                        Errno::Malformed,
                        format!("extent outside tier {}", tier.name),
                    )
                } else {
                    err(Errno::Io, format!("reading tier {}: {x}", tier.name))
                }
            })?;
        }
        Ok(())
    }
}

impl ShmTransport {
    /// [`Transport::with_lane`] without dynamic dispatch (the client's hot
    /// path): runs `f` on a locked channel and returns what it returns.
    #[inline]
    pub(crate) fn on_lane<T>(
        &self,
        at: Option<u32>,
        f: impl FnOnce(&mut dyn Lane) -> Result<T>,
    ) -> Result<T> {
        let n = self.chans.len();
        let i = match at {
            Some(i) if (i as usize) < n => i as usize,
            Some(i) => return Err(err(Errno::Internal, format!("no lane {i}"))),
            None => THREAD_INDEX.with(|t| *t) % n,
        };
        let mut g = self.chans[i].lock().unwrap_or_else(|p| p.into_inner());
        f(&mut ShmLane {
            ch: &mut g,
            shm: &self.shared,
        })
    }
}

impl Transport for ShmTransport {
    fn with_lane(
        &self,
        at: Option<u32>,
        f: &mut dyn FnMut(&mut dyn Lane) -> Result<()>,
    ) -> Result<()> {
        self.on_lane(at, f)
    }

    fn data_max_bytes(&self) -> usize {
        (self.shared.lease_bytes as usize).max(4096)
    }

    fn daemon_alive(&self) -> bool {
        self.shared.daemon_alive()
    }

    fn direct_gen(&self) -> u64 {
        self.shared.ctl().direct_gen.load(Ordering::Acquire)
    }

    fn sync_events(&self) -> Option<u64> {
        Some(self.shared.ctl().sync_events.load(Ordering::Acquire))
    }

    fn sync_sleep(&self, seen: u64, timeout: std::time::Duration) {
        let ctl = self.shared.ctl();
        ctl.sync_bell.wait_until(
            || ctl.sync_events.load(Ordering::Acquire) != seen,
            std::time::Duration::ZERO,
            Some(timeout),
        );
    }

    fn read_indexed(
        &self,
        bucket: u64,
        name: &str,
        at: u64,
        dst: &mut [u8],
    ) -> Option<(u64, usize)> {
        let ix = self.shared.index()?;
        let a = self.shared.arena.segment();
        ix.read(bucket, name.as_bytes(), at, a.as_ptr(), a.len() as u64, dst)
            .map(|f| (f.size, f.copied))
    }

    fn read_indexed_vec(
        &self,
        bucket: u64,
        name: &str,
        max_bytes: u64,
        out: &mut Vec<u8>,
    ) -> Option<u64> {
        let ix = self.shared.index()?;
        let a = self.shared.arena.segment();
        ix.read_vec(
            bucket,
            name.as_bytes(),
            a.as_ptr(),
            a.len() as u64,
            max_bytes,
            out,
        )
    }
}
