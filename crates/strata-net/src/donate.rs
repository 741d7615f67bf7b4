//! **Remote tiers**: memory one node lends another (frames in
//! `strata_proto::donation`, on bulk connections).
//!
//! - [`Donations`] — the donor's side: per requesting node one *donation*,
//!   an anonymous memory file (memfd: RAM, gone with the process) of at most
//!   the grant, sparse until written. Served on the donor's bulk threads,
//!   never its engine thread, so two nodes spilling onto each other cannot
//!   deadlock.
//! - [`RemoteTier`] — the requester's side: a `TierBackend` (bytes at
//!   offsets) and a `RemoteLink` (epoch, usability, loss, measurements)
//!   over pooled bulk connections to the donor, dialed through the
//!   daemon's `Transport` (faults and partitions apply).
//!
//! **Invariants:** a donation is reached only by the node it was lent to
//! (the connection's authenticated node id); every access names the
//! donation's epoch and a mismatch is refused (`Stale`), so bytes of a
//! donor that restarted are reported lost, never read as zeros; no access
//! is outside the grant; every call has the cluster's deadline; at most
//! [`DONATION_CONNECTIONS_MAX`] idle connections per remote tier.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_proto::bulk as frame;
use strata_proto::donation::{self as don, CallError, Op, Record};
use strata_proto::Errno;
use strata_tier::{Local, RemoteLink, TierBackend};

use crate::auth::Secret;
use crate::transport::Transport;

/// Bytes moved per `pread`/`pwrite` by the donor.
const CHUNK_BYTES: usize = 1 << 20;
/// Idle connections a remote tier keeps to its donor.
pub const DONATION_CONNECTIONS_MAX: usize = 4;
/// After a failed call, how long placement avoids the remote tier.
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(5);

// ---- the donor ------------------------------------------------------------

struct Donation {
    epoch: u32,
    nonce: u64,
    granted_bytes: u64,
    mem: File,
}

/// What this node lends to others.
pub struct Donations {
    /// Bytes lent to each other node at most (0: nothing is lent).
    grant_bytes: u64,
    /// This daemon's boot id (answered by `Attach`: a requester that later
    /// sees another boot id in the heartbeats knows its donation is gone).
    boot_id: u64,
    by_node: Mutex<HashMap<u32, Arc<Donation>>>,
}

/// A donation request refused: answered with an error frame, the
/// connection stays usable.
struct Refused(Errno, String);

impl Donations {
    pub fn new(grant_bytes: u64, boot_id: u64) -> Donations {
        Donations {
            grant_bytes,
            boot_id,
            by_node: Mutex::new(HashMap::new()),
        }
    }

    /// Bytes currently lent (granted) to other nodes, and to how many.
    pub fn lent(&self) -> (u64, usize) {
        let m = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        (m.values().map(|d| d.granted_bytes).sum(), m.len())
    }

    /// The memory lent to node `node` now: its epoch, its length and a
    /// read-only descriptor of it (for a client of this node reading bytes
    /// that node's daemon moved here for it). None when nothing is lent.
    pub fn lent_to(&self, node: u32) -> Option<(u32, u64, File)> {
        use std::os::fd::AsRawFd;
        let d = self
            .by_node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .cloned()?;
        let ro = File::open(format!("/proc/self/fd/{}", d.mem.as_raw_fd())).ok()?;
        Some((d.epoch, d.granted_bytes, ro))
    }

    fn attach(&self, from: u32, rec: &Record) -> Result<Record, Refused> {
        if self.grant_bytes == 0 {
            return Err(Refused(
                Errno::NoSpace,
                "this node lends no memory (cluster.remote_tier is 0)".into(),
            ));
        }
        let mut m = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = m.get(&from) {
            if d.nonce == rec.nonce {
                return Ok(Record {
                    epoch: d.epoch,
                    len: d.granted_bytes,
                    nonce: self.boot_id,
                    ..*rec
                });
            }
        }
        let granted_bytes = rec.len.min(self.grant_bytes);
        let fd = rustix::fs::memfd_create("strata-donation", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| Refused(Errno::Io, format!("memfd_create: {e}")))?;
        let mem = File::from(fd);
        mem.set_len(granted_bytes)
            .map_err(|e| Refused(Errno::Io, format!("sizing the donation: {e}")))?;
        let mut epoch = 0;
        while epoch == 0 {
            epoch = rand::random::<u32>();
        }
        // A requester that restarted: its old donation (lost with it) goes.
        m.insert(
            from,
            Arc::new(Donation {
                epoch,
                nonce: rec.nonce,
                granted_bytes,
                mem,
            }),
        );
        tracing::info!(
            node = from,
            granted_bytes,
            "lending memory to node {from} (a remote tier)"
        );
        Ok(Record {
            epoch,
            len: granted_bytes,
            nonce: self.boot_id,
            ..*rec
        })
    }

    fn donation(&self, from: u32, rec: &Record) -> Result<Arc<Donation>, Refused> {
        let m = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        let d = m.get(&from).filter(|d| d.epoch == rec.epoch).ok_or_else(|| {
            Refused(
                Errno::Stale,
                format!(
                    "no donation of epoch {} for node {from} here (this daemon restarted, or the requester attached anew)",
                    rec.epoch
                ),
            )
        })?;
        let inside = rec
            .off
            .checked_add(rec.len)
            .is_some_and(|end| end <= d.granted_bytes);
        if !inside {
            return Err(Refused(
                Errno::Inval,
                format!(
                    "{} bytes at {} outside the donation ({} bytes)",
                    rec.len, rec.off, d.granted_bytes
                ),
            ));
        }
        Ok(d.clone())
    }

    /// Serves one donation frame (its header `h` read) from node `from`.
    /// `Err` only when the connection must close (I/O, a broken frame).
    pub fn serve(
        &self,
        s: &mut crate::bulk::Served,
        from: u32,
        h: &frame::Header,
    ) -> io::Result<()> {
        if h.record_len as usize != don::RECORD_BYTES || h.arg_len != 0 {
            frame::send_error_on(s, Errno::Malformed, "malformed donation frame");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed donation frame",
            ));
        }
        let mut b = [0u8; don::RECORD_BYTES];
        s.read_exact(&mut b)?;
        let Some(rec) = Record::decode(&b) else {
            frame::send_error_on(s, Errno::Malformed, "unknown donation op");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "unknown donation op",
            ));
        };
        if (rec.op == Op::Write) != (h.data_len > 0)
            || (rec.op == Op::Write && h.data_len != rec.len)
        {
            frame::send_error_on(s, Errno::Malformed, "donation data does not match its op");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "donation data mismatch",
            ));
        }
        let res = match rec.op {
            Op::Attach => self.attach(from, &rec).map(|r| (r, None)),
            Op::Write | Op::Read | Op::Release => self.donation(from, &rec).map(|d| (rec, Some(d))),
        };
        let (reply, d) = match res {
            Ok(v) => v,
            Err(Refused(e, m)) => {
                // A refused write's bytes are still on the wire.
                if rec.op == Op::Write {
                    skip(s, h.data_len)?;
                }
                frame::send_error_on(s, e, &m);
                return Ok(());
            }
        };
        let mut buf = Vec::new();
        match (rec.op, d) {
            (Op::Write, Some(d)) => {
                let mut done = 0u64;
                while done < rec.len {
                    let n = (rec.len - done).min(CHUNK_BYTES as u64) as usize;
                    buf.resize(n, 0);
                    s.read_exact(&mut buf)?;
                    if let Err(e) = d.mem.write_all_at(&buf, rec.off + done) {
                        skip(s, rec.len - done - n as u64)?;
                        frame::send_error_on(
                            s,
                            Errno::NoSpace,
                            &format!("the donor's memory is full: {e}"),
                        );
                        return Ok(());
                    }
                    done += n as u64;
                }
                don::write_reply(s, &reply, 0)?;
                s.flush()
            }
            (Op::Read, Some(d)) => {
                if rec.len > frame::DATA_BYTES_MAX as u64 {
                    frame::send_error_on(s, Errno::TooBig, "donation read over the frame bound");
                    return Ok(());
                }
                let w = &mut *s;
                don::write_reply(w, &reply, rec.len)?;
                let mut done = 0u64;
                while done < rec.len {
                    let n = (rec.len - done).min(CHUNK_BYTES as u64) as usize;
                    buf.resize(n, 0);
                    d.mem.read_exact_at(&mut buf, rec.off + done)?;
                    w.write_all(&buf)?;
                    done += n as u64;
                }
                w.flush()
            }
            (Op::Release, Some(d)) => {
                let fl =
                    rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
                if rec.len > 0 {
                    let _ = rustix::fs::fallocate(&d.mem, fl, rec.off, rec.len);
                }
                don::write_reply(s, &reply, 0)?;
                s.flush()
            }
            _ => {
                don::write_reply(s, &reply, 0)?;
                s.flush()
            }
        }
    }
}

/// Reads and drops `n` bytes (a refused write's data).
fn skip(s: &mut crate::bulk::Served, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut Read::by_ref(s).take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

// ---- the requester --------------------------------------------------------

/// Where a remote tier's donor is and how to reach it.
pub struct DonorAddress {
    /// The donor's node id and name (messages).
    pub node: u32,
    pub name: String,
    /// The donor's bulk endpoint.
    pub address: String,
    /// This node's id (the connection names it).
    pub me: u32,
    pub transport: Arc<dyn Transport>,
    pub secret: Secret,
    pub deadline: Duration,
    /// The donor's boot id while the cluster believes it is up (heartbeats);
    /// None while it is down or not yet seen.
    pub up: Arc<dyn Fn() -> Option<u64> + Send + Sync>,
}

#[derive(Default)]
struct LinkState {
    epoch: u32,
    granted_bytes: u64,
    /// The boot id of the donor process that granted `epoch`.
    donor_boot: u64,
    /// The donation was found lost; no attach until the engine freed it all.
    lost: bool,
    lost_reported: bool,
    failed_at: Option<Instant>,
}

/// A remote tier: `want_bytes` of memory on another node.
pub struct RemoteTier {
    donor: DonorAddress,
    want_bytes: u64,
    /// One per process: the donor finds our donation again after a reconnect.
    nonce: u64,
    state: Mutex<LinkState>,
    idle: Mutex<Vec<TcpStream>>,
    /// Smoothed bandwidth (MiB/s) and latency (µs) as f64 bits; 0 = unmeasured.
    bw_bits: AtomicU64,
    lat_bits: AtomicU64,
    epoch_now: AtomicU32,
    usable_now: AtomicBool,
}

/// Transfers at least this large update the measured bandwidth; smaller
/// ones the latency.
const MEASURE_BANDWIDTH_BYTES_MIN: usize = 256 << 10;

impl RemoteTier {
    pub fn new(donor: DonorAddress, want_bytes: u64) -> RemoteTier {
        RemoteTier {
            donor,
            want_bytes,
            nonce: rand::random::<u64>() | 1,
            state: Mutex::new(LinkState::default()),
            idle: Mutex::new(Vec::new()),
            bw_bits: AtomicU64::new(0),
            lat_bits: AtomicU64::new(0),
            epoch_now: AtomicU32::new(0),
            usable_now: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conn(&self) -> io::Result<TcpStream> {
        if let Some(s) = self.idle.lock().ok().and_then(|mut v| v.pop()) {
            return Ok(s);
        }
        crate::bulk::dial(
            self.donor.transport.as_ref(),
            &self.donor.address,
            self.donor.me,
            &self.donor.secret,
            self.donor.deadline,
        )
    }

    fn give_back(&self, s: TcpStream) {
        if let Ok(mut v) = self.idle.lock() {
            if v.len() < DONATION_CONNECTIONS_MAX {
                v.push(s);
            }
        }
    }

    fn error(&self, what: &str, e: &CallError) -> io::Error {
        let kind = match e.errno {
            Errno::Stale => io::ErrorKind::NotFound,
            Errno::Timeout => io::ErrorKind::TimedOut,
            Errno::NoSpace => io::ErrorKind::StorageFull,
            Errno::Inval => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::ConnectionAborted,
        };
        io::Error::new(
            kind,
            format!(
                "remote tier on node {} ({}, {}): {what}: {}",
                self.donor.node, self.donor.name, self.donor.address, e.message
            ),
        )
    }

    fn failed(&self) {
        self.lock().failed_at = Some(Instant::now());
        self.usable_now.store(false, Ordering::SeqCst);
    }

    /// The current epoch, attaching first when there is none (not after a
    /// loss until the engine allows it).
    fn attached(&self, s: &TcpStream) -> Result<u32, CallError> {
        {
            let st = self.lock();
            if st.lost {
                return Err(CallError {
                    errno: Errno::Stale,
                    message: "the donation was lost (the donor restarted)".into(),
                    answered: true,
                });
            }
            if st.epoch != 0 {
                return Ok(st.epoch);
            }
        }
        let r = don::call(
            s,
            &Record {
                op: Op::Attach,
                epoch: 0,
                off: 0,
                len: self.want_bytes,
                nonce: self.nonce,
            },
            &[],
            &mut [],
        )?;
        let mut st = self.lock();
        st.epoch = r.epoch;
        st.granted_bytes = r.len;
        st.donor_boot = r.nonce;
        self.epoch_now.store(r.epoch, Ordering::SeqCst);
        tracing::info!(
            node = self.donor.node,
            granted = r.len,
            "remote tier on node {} attached",
            self.donor.name
        );
        Ok(r.epoch)
    }

    /// One call with the current epoch; a `Stale` answer marks the donation lost.
    fn call(&self, op: Op, off: u64, len: u64, out: &[u8], inp: &mut [u8]) -> io::Result<()> {
        let what = match op {
            Op::Write => "write",
            Op::Read => "read",
            _ => "release",
        };
        let s = self.conn().map_err(|e| {
            self.failed();
            io::Error::new(
                e.kind(),
                format!(
                    "remote tier on node {} ({}, {}) is down or unreachable: {e}",
                    self.donor.node, self.donor.name, self.donor.address
                ),
            )
        })?;
        let started = Instant::now();
        let res = self.attached(&s).and_then(|epoch| {
            don::call(
                &s,
                &Record {
                    op,
                    epoch,
                    off,
                    len,
                    nonce: self.nonce,
                },
                out,
                inp,
            )
        });
        match res {
            Ok(_) => {
                self.measure(out.len().max(inp.len()), started.elapsed());
                self.give_back(s);
                Ok(())
            }
            Err(e) => {
                if e.errno == Errno::Stale {
                    self.mark_lost(&mut self.lock());
                } else if !e.answered || e.errno == Errno::NoSpace {
                    self.failed();
                }
                if e.answered {
                    self.give_back(s);
                }
                Err(self.error(what, &e))
            }
        }
    }

    /// The donation is gone (the donor restarted): no reads, no writes, no
    /// attach until the engine freed what lived there.
    fn mark_lost(&self, st: &mut LinkState) {
        if st.epoch == 0 && !st.lost {
            return;
        }
        if !st.lost {
            tracing::warn!(
                node = self.donor.node,
                "remote tier on node {}: the donation is lost (the donor restarted); the blobs stored there are gone",
                self.donor.name
            );
        }
        st.lost = true;
        st.epoch = 0;
        self.epoch_now.store(0, Ordering::SeqCst);
        self.usable_now.store(false, Ordering::SeqCst);
    }

    fn measure(&self, bytes: usize, took: Duration) {
        let smooth = |cell: &AtomicU64, v: f64| {
            let old = f64::from_bits(cell.load(Ordering::Relaxed));
            let new = if old == 0.0 {
                v
            } else {
                old * 0.875 + v * 0.125
            };
            cell.store(new.to_bits(), Ordering::Relaxed);
        };
        let secs = took.as_secs_f64().max(1e-9);
        if bytes >= MEASURE_BANDWIDTH_BYTES_MIN {
            smooth(&self.bw_bits, bytes as f64 / (1024.0 * 1024.0) / secs);
        } else {
            smooth(&self.lat_bits, secs * 1e6);
        }
    }
}

impl TierBackend for RemoteTier {
    fn read_at(&self, off: u64, dst: &mut [u8]) -> io::Result<()> {
        // Bounded by the frame bound per call.
        for (i, chunk) in dst.chunks_mut(frame::DATA_BYTES_MAX).enumerate() {
            let at = off + (i * frame::DATA_BYTES_MAX) as u64;
            self.call(Op::Read, at, chunk.len() as u64, &[], chunk)?;
        }
        Ok(())
    }

    fn write_at(&self, off: u64, src: &[u8]) -> io::Result<()> {
        for (i, chunk) in src.chunks(frame::DATA_BYTES_MAX).enumerate() {
            let at = off + (i * frame::DATA_BYTES_MAX) as u64;
            self.call(Op::Write, at, chunk.len() as u64, chunk, &mut [])?;
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.want_bytes)
    }

    fn release(&self, off: u64, len: u64) -> io::Result<()> {
        // Nothing attached (or lost), or a donor that failed lately or is
        // down: nothing to give back now (the range is overwritten when
        // reused; a donation is at most the grant). Frees never wait on a
        // dead node.
        if self.lock().epoch == 0
            || !self.usable_now.load(Ordering::SeqCst)
            || (self.donor.up)().is_none()
        {
            return Ok(());
        }
        self.call(Op::Release, off, len, &[], &mut [])
    }

    fn mapped(&self, _off: u64, _len: u64) -> Option<&[u8]> {
        None
    }

    fn local(&self) -> Local {
        Local::Remote {
            node: self.donor.node,
        }
    }
}

impl RemoteLink for RemoteTier {
    fn node(&self) -> u32 {
        self.donor.node
    }

    fn epoch(&self) -> u32 {
        self.epoch_now.load(Ordering::SeqCst)
    }

    fn usable(&self) -> bool {
        if (self.donor.up)().is_none() {
            return false;
        }
        if self.usable_now.load(Ordering::SeqCst) {
            return true;
        }
        let mut st = self.lock();
        let ok = !st.lost && st.failed_at.is_none_or(|t| t.elapsed() >= FAILURE_BACKOFF);
        if ok {
            st.failed_at = None;
            self.usable_now.store(true, Ordering::SeqCst);
        }
        ok
    }

    fn granted_bytes(&self) -> u64 {
        let st = self.lock();
        if st.epoch == 0 {
            self.want_bytes
        } else {
            st.granted_bytes
        }
    }

    fn take_lost(&self) -> bool {
        let boot = (self.donor.up)();
        let mut st = self.lock();
        // The heartbeats see another process at the donor's address: what
        // it lent us died with the old one (no access needed to notice).
        if boot.is_some_and(|b| st.epoch != 0 && b != st.donor_boot) {
            self.mark_lost(&mut st);
        }
        if st.lost && !st.lost_reported {
            st.lost_reported = true;
            return true;
        }
        false
    }

    fn allow_attach(&self) {
        let mut st = self.lock();
        if st.lost && st.lost_reported {
            st.lost = false;
            st.lost_reported = false;
            st.failed_at = None;
            self.usable_now.store(true, Ordering::SeqCst);
        }
    }

    fn measured(&self) -> Option<(f64, f64)> {
        let bw = f64::from_bits(self.bw_bits.load(Ordering::Relaxed));
        let lat = f64::from_bits(self.lat_bits.load(Ordering::Relaxed));
        (bw > 0.0 || lat > 0.0).then_some((bw, lat))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TcpTransport;

    /// A donor: a listener serving donation frames with `store` (replaceable: a restart).
    fn donor(secret: Secret, store: Arc<Mutex<Arc<Donations>>>) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let (secret, store) = (secret.clone(), store.clone());
                std::thread::spawn(move || {
                    let Ok((mut s, from, _)) =
                        crate::bulk::accept_served(s, None, &secret, Duration::from_secs(5))
                    else {
                        return;
                    };
                    while let Ok(h) = frame::read_header(&mut s) {
                        let d = store.lock().unwrap().clone();
                        if h.kind != frame::Kind::Donation || d.serve(&mut s, from, &h).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn tier(addr: &str, secret: &Secret, up: Arc<AtomicBool>) -> RemoteTier {
        tier_booted(addr, secret, up, Arc::new(AtomicU64::new(1)))
    }

    fn tier_booted(
        addr: &str,
        secret: &Secret,
        up: Arc<AtomicBool>,
        boot: Arc<AtomicU64>,
    ) -> RemoteTier {
        RemoteTier::new(
            DonorAddress {
                node: 1,
                name: "n2".into(),
                address: addr.into(),
                me: 0,
                transport: Arc::new(TcpTransport),
                secret: secret.clone(),
                deadline: Duration::from_secs(5),
                up: Arc::new(move || {
                    up.load(Ordering::SeqCst)
                        .then(|| boot.load(Ordering::SeqCst))
                }),
            },
            32 << 20,
        )
    }

    #[test]
    fn bytes_round_trip_and_a_restarted_donor_reports_loss_never_zeros() {
        let k = Secret::generate();
        let store = Arc::new(Mutex::new(Arc::new(Donations::new(16 << 20, 1))));
        let addr = donor(k.clone(), store.clone());
        let up = Arc::new(AtomicBool::new(true));
        let t = tier(&addr, &k, up.clone());
        assert!(t.usable());
        let data: Vec<u8> = (0..(9 << 20) + 7).map(|i| (i * 31 % 251) as u8).collect();
        t.write_at(4096, &data).unwrap();
        assert_ne!(t.epoch(), 0);
        assert_eq!(t.granted_bytes(), 16 << 20, "the grant caps the request");
        let mut back = vec![0u8; data.len()];
        t.read_at(4096, &mut back).unwrap();
        assert_eq!(back, data);
        // Outside the grant: refused, the link stays usable.
        let e = t.write_at((16 << 20) - 10, &[1u8; 20]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(t.usable());
        t.release(4096, 1 << 20).unwrap();
        let mut z = vec![1u8; 16];
        t.read_at(4096, &mut z).unwrap();
        assert_eq!(z, vec![0u8; 16], "released bytes read as zeros");
        // The donor restarts: the old epoch is refused, the loss reported once.
        *store.lock().unwrap() = Arc::new(Donations::new(16 << 20, 1));
        let mut b = vec![0u8; 64];
        let e = t.read_at(8 << 20, &mut b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(!t.usable(), "a lost donation takes no new bytes");
        assert_eq!(t.epoch(), 0);
        assert!(t.take_lost());
        assert!(!t.take_lost());
        assert!(
            t.write_at(0, b"x").is_err(),
            "no attach before the engine allows it"
        );
        t.allow_attach();
        assert!(t.usable());
        t.write_at(0, b"again").unwrap();
        assert_ne!(t.epoch(), 0);
        // The heartbeats say the donor is down: not usable.
        up.store(false, Ordering::SeqCst);
        assert!(!t.usable());
    }

    #[test]
    fn a_new_boot_id_in_the_heartbeats_is_a_loss_without_any_access() {
        let k = Secret::generate();
        let store = Arc::new(Mutex::new(Arc::new(Donations::new(1 << 20, 5))));
        let addr = donor(k.clone(), store.clone());
        let (up, boot) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU64::new(5)));
        let t = tier_booted(&addr, &k, up, boot.clone());
        t.write_at(0, b"x").unwrap();
        assert!(!t.take_lost(), "same boot: nothing lost");
        boot.store(6, Ordering::SeqCst);
        assert!(t.take_lost(), "another process answers the heartbeats");
        assert_eq!(t.epoch(), 0);
        assert!(!t.usable());
    }

    #[test]
    fn a_node_reaches_only_its_own_donation_and_nothing_is_lent_at_zero() {
        let k = Secret::generate();
        let store = Arc::new(Mutex::new(Arc::new(Donations::new(1 << 20, 1))));
        let addr = donor(k.clone(), store.clone());
        let up = Arc::new(AtomicBool::new(true));
        let a = tier(&addr, &k, up.clone());
        a.write_at(0, b"mine").unwrap();
        // Another node naming a's epoch is refused: donations are per node.
        let s = crate::bulk::dial(&TcpTransport, &addr, 2, &k, Duration::from_secs(5)).unwrap();
        let e = don::call(
            &s,
            &Record {
                op: Op::Read,
                epoch: a.epoch(),
                off: 0,
                len: 4,
                nonce: 9,
            },
            &[],
            &mut [0u8; 4],
        )
        .unwrap_err();
        assert_eq!(e.errno, Errno::Stale);
        assert_eq!(store.lock().unwrap().lent(), (1 << 20, 1));
        *store.lock().unwrap() = Arc::new(Donations::new(0, 1));
        let b = tier(&addr, &k, up);
        let e = b.write_at(0, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    }
}
