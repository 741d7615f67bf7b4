//! The owner's side of the **bulk layer**: a listener on this node's bulk
//! port (cluster port + `strata_net::bulk::BULK_PORT_OFFSET`) and one
//! blocking thread per connection. A connection proves the cluster secret
//! and names the node that dialed it (`strata_net::bulk::accept_served`, in TLS with `cluster.tls`), then
//! carries frames of `strata_proto::bulk`, one request at a time: the
//! request goes to the poller as `Msg::Execute` (the engine's thread stays
//! the only one touching its state), the reply and the bytes a read covered
//! come back in one frame. Remote tiers' frames (`Kind::Donation`: memory
//! this node lends the dialer) are served by the connection's thread itself
//! (`strata_net::donate::Donations`).
//!
//! **Invariants:** at most `BULK_CONNECTIONS_MAX` connections are served
//! (more are closed, logged); a frame's lengths are checked before its body
//! is read; a malformed frame gets an error frame and the connection is
//! closed; no read or write waits longer than the call deadline once a
//! frame started (`BULK_IDLE_MAX` between frames).

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strata_net::bulk::Served;

use anyhow::Context;
use strata_proto::bulk::{self as frame, Kind};
use strata_proto::Errno;
use strata_transport_shm::record::flags;
use strata_transport_shm::{RequestRecord, REQUEST_WIRE_BYTES};

use super::State;
use crate::server::{remote_holder, ExecOut, Msg};
use std::io::Write;
use strata_proto::types::{TIER_DEST, TIER_HOLE, TIER_LENT, TIER_PENDING, TIER_REMOTE};

/// Bulk connections served at once (each one thread).
pub const BULK_CONNECTIONS_MAX: usize = 256;
/// How long a connection may stay idle between frames (clients keep a few
/// open for their next requests).
pub const BULK_IDLE_MAX: Duration = Duration::from_secs(3600);

/// The running listener.
pub struct Listening {
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listening {
    /// Stops accepting (connections in service end with their peer or the
    /// process).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Listens on `addr` (an error now fails the daemon's start).
pub fn listen(st: Arc<State>, addr: &str) -> anyhow::Result<Listening> {
    let a = strata_net::transport::resolve_blocking(addr)
        .with_context(|| format!("bulk address {addr}"))?;
    let l = TcpListener::bind(a)
        .with_context(|| format!("cannot listen on the bulk address {addr}"))?;
    let addr = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("strata-bulk-accept".into())
        .spawn(move || accept_loop(l, st, s2))
        .context("cannot spawn the bulk listener")?;
    Ok(Listening {
        stop,
        addr,
        thread: Some(thread),
    })
}

fn accept_loop(l: TcpListener, st: Arc<State>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in l.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let s = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("bulk accept failed: {e}");
                // EMFILE and the like: do not spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let peer = s
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        if active.fetch_add(1, Ordering::SeqCst) >= BULK_CONNECTIONS_MAX {
            active.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                peer,
                "bulk connection closed: {BULK_CONNECTIONS_MAX} already served"
            );
            continue;
        }
        let (st, a) = (st.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("strata-bulk".into())
            .stack_size(256 << 10)
            .spawn(move || {
                serve(s, &st, &peer);
                a.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            active.fetch_sub(1, Ordering::SeqCst);
            tracing::error!("cannot spawn a bulk connection thread: {e}");
        }
    }
}

/// How long a bulk thread polls for the engine's answer before it sleeps:
/// the engine usually answers within microseconds (its thread is awake,
/// it was just rung), and a sleeping thread takes longer than that to wake.
const ANSWER_SPIN: Duration = Duration::from_micros(20);

fn wait_answer<T>(mut rx: tokio::sync::oneshot::Receiver<T>) -> Option<T> {
    use tokio::sync::oneshot::error::TryRecvError;
    let start = std::time::Instant::now();
    // Bounded by ANSWER_SPIN, then a blocking wait.
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Closed) => return None,
            Err(TryRecvError::Empty) if start.elapsed() < ANSWER_SPIN => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => return rx.blocking_recv().ok(),
        }
    }
}

/// Puts at least this large are read from the socket straight into arena
/// space leased for them (one poller round trip more, one copy less).
const LEASED_PUT_BYTES_MIN: u64 = 64 << 10;

/// Reads the request's argument area (`arg_len` bytes: names, then a put's
/// data). A large put's data goes into a lease of the arena (returned with
/// the record pointing there); everything else into `arg`.
fn receive_body(
    s: &mut Served,
    st: &State,
    record: &mut RequestRecord,
    arg_len: u64,
    arg: &mut Vec<u8>,
) -> io::Result<Option<(u64, u64)>> {
    let names = u64::from(record.name_len) + u64::from(record.name2_len);
    let data = arg_len.saturating_sub(names);
    let put = record.op == strata_transport_shm::Op::Put as u32
        && record.flags & flags::SRC_ARG != 0
        && record.len == data;
    let ram = st.ram.and_then(|r| st.tiers.backend(r as u32).ok());
    let grant = match ram {
        Some(_) if put && names <= arg_len && data >= LEASED_PUT_BYTES_MIN => {
            let (reply, answer) = tokio::sync::oneshot::channel();
            st.send(Msg::Lease { want: data, reply })
                .ok()
                .and_then(|_| answer.blocking_recv().ok())
                .flatten()
        }
        _ => None,
    };
    let (Some(ram), Some((off, len))) = (ram, grant) else {
        arg.resize(arg_len as usize, 0);
        s.read_exact(arg)?;
        return Ok(None);
    };
    let give_back = |st: &State| {
        let _ = st.send(Msg::LeaseReturn { off, len });
    };
    if len < data {
        // The arena is short of one range this large: through `arg`.
        give_back(st);
        arg.resize(arg_len as usize, 0);
        s.read_exact(arg)?;
        return Ok(None);
    }
    arg.resize(names as usize, 0);
    let filled = s.read_exact(arg).and_then(|_| ram.fill_from(off, data, s));
    if let Err(e) = filled {
        give_back(st);
        return Err(e);
    }
    record.flags &= !flags::SRC_ARG;
    record.data_off = off;
    Ok(Some((off, len)))
}

/// Bytes read from a tier that is not mapped here, per write.
const SCRATCH_BYTES_MAX: u64 = 1 << 20;

/// Sends the reply and the bytes of a read's extents straight from the
/// tiers: a mapped tier (the RAM arena) from its memory, others through
/// `scratch` (the pin keeps the extents in place meanwhile).
fn send_reply(s: &mut Served, st: &State, out: &ExecOut, scratch: &mut Vec<u8>) -> io::Result<()> {
    // Holes carry no bytes, nor do extents the caller reads from memory its
    // own node lends this one (`TIER_LENT`), nor a file's pages the caller
    // reads from the destination (`TIER_DEST`) or asks for again once read
    // ahead (`TIER_PENDING`), nor pages another node holds (`TIER_REMOTE`).
    let held = || {
        out.extents.iter().filter(|e| {
            !matches!(
                e.tier,
                TIER_HOLE | TIER_LENT | TIER_DEST | TIER_PENDING | TIER_REMOTE
            )
        })
    };
    let total: u64 = held().map(|e| e.len).sum();
    // Bytes on remote tiers (memory another node lends) are fetched before
    // the header goes out: a lender that is down or lost them turns into an
    // error frame naming it, not a reply cut short. (≤ DATA_BYTES_MAX.)
    let mut fetched: Vec<Vec<u8>> = Vec::new();
    for e in held() {
        let b = st.tiers.backend(e.tier)?;
        if matches!(b.local(), strata_tier::Local::Remote { .. }) {
            let mut v = vec![0u8; e.len as usize];
            if let Err(x) = b.read_at(e.phys_off, &mut v) {
                let code = if x.kind() == io::ErrorKind::NotFound {
                    Errno::Io
                } else {
                    Errno::NodeDown
                };
                frame::send_error_on(s, code, &x.to_string());
                return Ok(());
            }
            fetched.push(v);
        }
    }
    let mut fetched = fetched.into_iter();
    let w = s;
    frame::write_head(
        w,
        if out.held { Kind::Held } else { Kind::Reply },
        &out.record.to_wire(),
        &[&out.arg],
        total,
    )?;
    for e in held() {
        let b = st.tiers.backend(e.tier)?;
        if let Some(m) = b.mapped(e.phys_off, e.len) {
            w.write_all(m)?;
            continue;
        }
        if matches!(b.local(), strata_tier::Local::Remote { .. }) {
            w.write_all(&fetched.next().expect("fetched above"))?;
            continue;
        }
        let mut done = 0u64;
        while done < e.len {
            let n = (e.len - done).min(SCRATCH_BYTES_MAX);
            if scratch.len() < n as usize {
                scratch.resize(n as usize, 0);
            }
            let buf = &mut scratch[..n as usize];
            b.read_at(e.phys_off + done, buf)?;
            w.write_all(buf)?;
            done += n;
        }
    }
    w.flush()
}

/// After a `Held` reply: waits (≤ `deadline`) for the reader's `Release`
/// and acknowledges it with an empty reply — the reader's proof that the
/// extents stayed in place while it read them. Anything else ends the
/// connection (the reader then reports its read failed).
fn await_release(s: &mut Served, deadline: Duration) -> io::Result<()> {
    s.set_read_timeout(Some(deadline))?;
    let h = frame::read_header(s)?;
    if h.kind != Kind::Release || h.record_len != 0 || h.arg_len != 0 || h.data_len != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "expected the release of a held reply",
        ));
    }
    frame::write_frame(s, Kind::Reply, &[], &[], &[])?;
    s.flush()
}

/// Serves one connection until its peer closes it or breaks the protocol.
fn serve(s: TcpStream, st: &State, peer: &str) {
    let setup = &st.setup;
    // With TLS, frames are read and written through the session.
    let (mut s, from, client) = match strata_net::bulk::accept_served(
        s,
        setup.transport.tls(),
        &setup.secret,
        setup.call_timeout,
    ) {
        Ok((s, id, client)) if (id as usize) < setup.membership.nodes.len() && id != setup.me => {
            (s, id, client)
        }
        Ok((_, id, _)) => {
            tracing::warn!(
                peer,
                id,
                "bulk connection refused: not another node of this cluster"
            );
            return;
        }
        Err(e) => {
            tracing::warn!(peer, "bulk connection refused: {e}");
            return;
        }
    };
    // This connection's requests run as its client's (pins, file holds).
    let holder = remote_holder(from, client);
    let mut arg = Vec::new();
    let mut scratch = Vec::new();
    // Bounded by the connection: it ends when the peer closes it, breaks the
    // protocol, or stays idle for BULK_IDLE_MAX.
    loop {
        if s.set_read_timeout(Some(BULK_IDLE_MAX)).is_err() {
            return;
        }
        let h = match frame::read_header(&mut s) {
            Ok(h) => h,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return,
            Err(e) => {
                tracing::warn!(peer, "bulk frame refused: {e}");
                frame::send_error_on(&mut s, Errno::Malformed, &e.to_string());
                return;
            }
        };
        if s.set_read_timeout(Some(setup.call_timeout)).is_err() {
            return;
        }
        if h.kind == Kind::Donation {
            // A remote tier's bytes: served here, never by the engine's thread.
            if let Err(e) = st.donations.serve(&mut s, from, &h) {
                tracing::debug!(peer, "donation frame ended the connection: {e}");
                return;
            }
            continue;
        }
        if h.kind != Kind::Request || h.record_len as usize != REQUEST_WIRE_BYTES || h.data_len != 0
        {
            tracing::warn!(peer, ?h, "bulk frame refused: not a request");
            frame::send_error_on(&mut s, Errno::Malformed, "expected a request frame");
            return;
        }
        let mut rec = [0u8; REQUEST_WIRE_BYTES];
        if let Err(e) = s.read_exact(&mut rec) {
            tracing::warn!(peer, "bulk request cut short: {e}");
            return;
        }
        let Some(mut record) = RequestRecord::from_wire(&rec) else {
            frame::send_error_on(&mut s, Errno::Malformed, "malformed request record");
            return;
        };
        let lease = match receive_body(&mut s, st, &mut record, h.arg_len as u64, &mut arg) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(peer, "bulk request cut short: {e}");
                return;
            }
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sent = st.send(Msg::Execute {
            from,
            holder,
            record,
            arg: std::mem::take(&mut arg),
            lease,
            reply,
        });
        let out = match sent.ok().and_then(|_| wait_answer(answer)) {
            Some(out) => out,
            None => {
                frame::send_error_on(&mut s, Errno::Shutdown, "the daemon is stopping");
                return;
            }
        };
        let mut sent = send_reply(&mut s, st, &out, &mut scratch);
        if out.held && sent.is_ok() {
            sent = await_release(&mut s, setup.call_timeout);
        }
        if out.pin != 0 {
            let _ = st.send(Msg::Unpin {
                client: holder,
                pin: out.pin,
            });
        }
        if let Err(e) = sent {
            tracing::debug!(peer, "bulk reply not delivered: {e}");
            return;
        }
        // The buffer comes back for the next request.
        arg = out.spent;
    }
}
