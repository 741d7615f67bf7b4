//! The transport to **another node's engine**: the bulk layer. The client
//! asks its own daemon for a connection to the owner node (control
//! `BulkConnect`); the daemon dials it, proves the cluster secret and hands
//! the socket over (SCM_RIGHTS) — the client holds no secret and never
//! listens. On it, a request is encoded with the shared-memory codec into
//! a record and its names, followed by the put's bytes written straight
//! from the caller's buffer, in one frame of `strata_proto::bulk`; the
//! owner runs it and answers with its reply and, for a read, the bytes the
//! reply's extents cover.
//!
//! Bounds: one request carries at most `FORWARD_DATA_BYTES_MAX` of data
//! (larger puts go in pieces, larger reads are answered in parts: both are
//! the callers' usual loops, which send up to `BULK_STREAMS_MAX` pieces side
//! by side, each on its own connection: pipelined); a transport keeps at most
//! `IDLE_CONNECTIONS_MAX` idle connections; every read and write has the
//! cluster's call deadline (the socket's timeouts), after which the call
//! fails with `NodeDown` naming the node.

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use strata_proto::bulk::{self as frame, Kind};
use strata_proto::control::{
    self, ControlReply, ControlRequest, FORWARD_ARG_BYTES_MAX, FORWARD_DATA_BYTES_MAX,
};
use strata_proto::msg::{DataRef, Request};
use strata_proto::types::{ReadExtent, TIER_HOLE, TIER_LENT};
use strata_proto::Errno;
use strata_transport_shm::{codec, RequestRecord, ResponseRecord, RESPONSE_WIRE_BYTES};

use crate::transport::{Answer, Lane, Ticket, Transport};
use crate::{err, Result};

/// How long asking the local daemon for a connection may take (it dials
/// with the cluster's deadline and answers `NodeDown` after it).
const DIAL_SOCKET_TIMEOUT: Duration = Duration::from_secs(3600);

/// Idle connections to one node a transport keeps for later requests.
const IDLE_CONNECTIONS_MAX: usize = 8;

/// Pieces of one large put or get in flight at once, each on a connection
/// of its own (so the owner reads piece 2 while it stores piece 1). The
/// bytes in flight per call are bounded by this × `FORWARD_DATA_BYTES_MAX`.
pub const BULK_STREAMS_MAX: usize = 4;

/// A bulk connection and the node it reaches.
struct Conn {
    s: TcpStream,
}

/// The way to node `node`: bulk connections the daemon at `socket` dials.
pub struct RemoteTransport {
    pub node: u32,
    pub socket: PathBuf,
    /// This client's id at its own daemon (the owner keeps its file holds
    /// apart and drops them when it goes).
    pub client: u64,
    /// Connections a finished request left open (one request at a time on each).
    idle: std::sync::Mutex<Vec<Conn>>,
    /// The node's name and bulk address, once known (error messages).
    peer: std::sync::Mutex<String>,
    /// The memory this client's node lends that node (its donation epoch
    /// and a read-only descriptor), once asked for: `TIER_LENT` extents.
    lent: std::sync::Mutex<Option<(u32, std::fs::File)>>,
    /// The process that made this transport. Another process sharing its
    /// memory (a `vfork` child on its way to `exec`, whose descriptor table
    /// is its own) must neither use nor drop the pooled connections and
    /// the cached descriptor — they are the parent's descriptors — and must
    /// not leave its own in them: it dials for each request and closes
    /// what it dialed ([`RemoteTransport::foreign`]).
    pid: u32,
}

impl RemoteTransport {
    pub fn new(node: u32, socket: PathBuf, client: u64) -> RemoteTransport {
        RemoteTransport {
            node,
            socket,
            client,
            idle: std::sync::Mutex::new(Vec::new()),
            peer: std::sync::Mutex::new(format!("node {node}")),
            lent: std::sync::Mutex::new(None),
            pid: std::process::id(),
        }
    }

    /// True in another process than the one that made this transport but
    /// shares its memory (a `vfork` child): see `pid`.
    fn foreign(&self) -> bool {
        std::process::id() != self.pid
    }

    /// A descriptor the daemon passed: adopted by this process's adapter,
    /// unless this is a `vfork` child (the adapter's table is the parent's).
    fn adopt(&self, fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
        if self.foreign() {
            fd
        } else {
            crate::adopt_fd(fd)
        }
    }

    /// A connection (`true`: from the pool). Pooled connections the peer
    /// closed meanwhile (a restart) are dropped here.
    fn take(&self) -> Result<(Conn, bool)> {
        if self.foreign() {
            return Ok((self.connect()?, false));
        }
        while let Some(c) = self.idle.lock().ok().and_then(|mut v| v.pop()) {
            if alive(&c.s) {
                return Ok((c, true));
            }
        }
        Ok((self.connect()?, false))
    }

    /// Asks the local daemon for a new connection to the node.
    fn connect(&self) -> Result<Conn> {
        let no_daemon = |e: std::io::Error| {
            err(
                Errno::NoDaemon,
                format!(
                    "asking {} for a bulk connection: {e}",
                    self.socket.display()
                ),
            )
        };
        let mut u = UnixStream::connect(&self.socket).map_err(no_daemon)?;
        u.set_read_timeout(Some(DIAL_SOCKET_TIMEOUT))
            .map_err(no_daemon)?;
        let ask = ControlRequest::BulkConnect {
            node: self.node,
            client: self.client,
        };
        control::write_frame(&mut u, &ask).map_err(no_daemon)?;
        match control::read_frame(&mut u).map_err(no_daemon)? {
            ControlReply::BulkConnected {
                node,
                name,
                address,
                timeout_ms,
            } if node == self.node => {
                let s = TcpStream::from(self.adopt(control::recv_fd(&u).map_err(no_daemon)?));
                let t = Some(Duration::from_millis(timeout_ms.max(1)));
                s.set_read_timeout(t).map_err(no_daemon)?;
                s.set_write_timeout(t).map_err(no_daemon)?;
                if let Ok(mut p) = self.peer.lock() {
                    *p = format!("node {node} ({name}, {address})");
                }
                Ok(Conn { s })
            }
            ControlReply::Error { code, message } => Err(crate::daemon_error(code, message)),
            other => Err(err(
                Errno::Internal,
                format!("unexpected answer to BulkConnect: {other:?}"),
            )),
        }
    }

    fn give_back(&self, c: Conn) {
        if self.foreign() {
            // this process's own connection: closed here, never pooled
            return;
        }
        if let Ok(mut v) = self.idle.lock() {
            if v.len() < IDLE_CONNECTIONS_MAX {
                v.push(c);
            }
        }
    }

    /// Reads `dst.len()` bytes at `off` of the memory node `self.node`
    /// lends this client's node (a remote tier of its daemon), in donation
    /// epoch `epoch` (the extent's): a donation lost since is an error,
    /// never zeros.
    pub(crate) fn donation_read(&self, epoch: u32, off: u64, dst: &mut [u8]) -> Result<()> {
        use strata_proto::donation::{self as don, Op, Record};
        // Bounded by the frame bound per call.
        for (i, chunk) in dst.chunks_mut(frame::DATA_BYTES_MAX).enumerate() {
            let (c, _) = self.take()?;
            let rec = Record {
                op: Op::Read,
                epoch,
                off: off + (i * frame::DATA_BYTES_MAX) as u64,
                len: chunk.len() as u64,
                nonce: 0,
            };
            match don::call(&c.s, &rec, &[], chunk) {
                Ok(_) => self.give_back(c),
                Err(e) => {
                    let peer = self.peer.lock().map(|p| p.clone()).unwrap_or_default();
                    if e.answered {
                        self.give_back(c);
                    }
                    return Err(match e.errno {
                        Errno::Stale => err(
                            Errno::Io,
                            format!("these bytes were in memory {peer} lent this node, and {peer} restarted: they are lost ({})", e.message),
                        ),
                        Errno::NodeDown | Errno::Timeout => err(
                            Errno::NodeDown,
                            format!("{peer} is down or unreachable: {}", e.message),
                        ),
                        x => err(x, format!("reading memory {peer} lends: {}", e.message)),
                    });
                }
            }
        }
        Ok(())
    }

    /// Reads `dst.len()` bytes at `off` of the memory this client's node
    /// lends node `self.node`, in donation `epoch` (a `TIER_LENT` extent of
    /// that node's answer): from this node's memory, no network.
    fn lent_read(&self, epoch: u32, off: u64, dst: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut own = None;
        let mut shared = None;
        // a vfork child asks for its own descriptor and keeps none
        let g = if self.foreign() {
            &mut own
        } else {
            &mut **shared.insert(self.lent.lock().unwrap_or_else(|p| p.into_inner()))
        };
        // At most one refresh: the lender's memory is asked for again when
        // the cached one is from another epoch.
        for fresh in [false, true] {
            if fresh || g.is_none() {
                *g = Some(self.ask_lent()?);
            }
            let (have, f) = g.as_ref().expect("set above");
            if *have == epoch {
                return f.read_exact_at(dst, off).map_err(|e| {
                    err(
                        Errno::Io,
                        format!("reading memory this node lends node {}: {e}", self.node),
                    )
                });
            }
        }
        Err(err(
            Errno::Io,
            format!(
                "the memory this node lent node {} for these bytes is gone (one of the two daemons restarted)",
                self.node
            ),
        ))
    }

    /// Asks the local daemon for the memory it lends node `self.node`.
    fn ask_lent(&self) -> Result<(u32, std::fs::File)> {
        let no_daemon = |e: std::io::Error| {
            err(
                Errno::NoDaemon,
                format!("asking {} for lent memory: {e}", self.socket.display()),
            )
        };
        let mut u = UnixStream::connect(&self.socket).map_err(no_daemon)?;
        u.set_read_timeout(Some(DIAL_SOCKET_TIMEOUT))
            .map_err(no_daemon)?;
        control::write_frame(&mut u, &ControlRequest::Lent { node: self.node })
            .map_err(no_daemon)?;
        match control::read_frame(&mut u).map_err(no_daemon)? {
            ControlReply::Lent { node, epoch, .. } if node == self.node => {
                let fd = self.adopt(control::recv_fd(&u).map_err(no_daemon)?);
                Ok((epoch, std::fs::File::from(fd)))
            }
            ControlReply::Error { code, message } => Err(crate::daemon_error(code, message)),
            other => Err(err(
                Errno::Internal,
                format!("unexpected answer to Lent: {other:?}"),
            )),
        }
    }

    fn down(&self, e: std::io::Error) -> crate::Error {
        let peer = self.peer.lock().map(|p| p.clone()).unwrap_or_default();
        err(
            Errno::NodeDown,
            format!("{peer} is down or unreachable: {e}"),
        )
    }
}

/// Ends a `Held` reply: `Release`, and the owner's empty reply saying its
/// hold was still in force.
fn release_held(c: &Conn) -> std::io::Result<()> {
    frame::write_frame(&mut frame::NoSigPipe(&c.s), Kind::Release, &[], &[], &[])?;
    let mut r = &c.s;
    let h = frame::read_header(&mut r)?;
    if h.kind != Kind::Reply || h.record_len != 0 || h.arg_len != 0 || h.data_len != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no acknowledgement of the release",
        ));
    }
    Ok(())
}

/// True when a pooled connection has nothing unread and is not closed.
fn alive(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        rustix::net::recv(
            s,
            &mut b,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT
        ),
        Err(rustix::io::Errno::AGAIN)
    )
}

struct RemoteLane<'t> {
    t: &'t RemoteTransport,
    next_tag: u64,
    /// The answer of the last submitted request, by tag.
    answer: Option<(u64, Answer)>,
    /// The last reply's argument area.
    arg_back: Vec<u8>,
    /// Bytes of the current reply read so far (0: none, a retry is safe).
    got: usize,
    /// The connection of the last read while its bytes (the data extents,
    /// in reply order) are still in the socket: `read_extents` reads them
    /// straight into the caller's buffer.
    pending: std::cell::RefCell<Option<Pending>>,
}

struct Pending {
    c: Conn,
    /// Data bytes not read yet.
    left: usize,
    /// A `Held` reply: the owner keeps the extents in place until this
    /// lane releases them (`release_held`).
    held: bool,
}

impl RemoteLane<'_> {
    /// Reads and drops what the last read left in its socket (a caller that
    /// did not want the bytes), then pools the connection; drops it on error.
    fn settle(&self) {
        let Some(mut p) = self.pending.borrow_mut().take() else {
            return;
        };
        let mut sink = [0u8; 64 << 10];
        while p.left > 0 {
            let n = p.left.min(sink.len());
            if p.c.s.read_exact(&mut sink[..n]).is_err() {
                return;
            }
            p.left -= n;
        }
        if p.held && release_held(&p.c).is_err() {
            return;
        }
        self.t.give_back(p.c);
    }

    fn send(&mut self, req: &Request) -> Result<Ticket> {
        let op = codec::op_of(req);
        let mut rec = RequestRecord::default();
        // The record and names are encoded without the bytes a put or a
        // file write carries, which are written from the caller's buffer
        // after them.
        let none = DataRef::Inline(&[]);
        let (bare, data): (Request, &[u8]) = match *req {
            Request::Put {
                bucket,
                name,
                data: DataRef::Inline(d),
                mode,
                policy,
            } => (
                Request::Put {
                    bucket,
                    name,
                    data: none,
                    mode,
                    policy,
                },
                d,
            ),
            Request::FileWrite {
                file,
                at,
                data: DataRef::Inline(d),
            } => (
                Request::FileWrite {
                    file,
                    at,
                    data: none,
                },
                d,
            ),
            Request::FileFill {
                file,
                page_off,
                data: DataRef::Inline(d),
                keep,
                gen,
            } => (
                Request::FileFill {
                    file,
                    page_off,
                    data: none,
                    keep,
                    gen,
                },
                d,
            ),
            ref other => (other.clone(), &[]),
        };
        let cannot = |e| err(e, "request the bulk path cannot carry");
        let mut names = vec![0u8; 4096];
        encode_grow(&bare, &mut rec, &mut names).map_err(cannot)?;
        rec.len = if data.is_empty() {
            rec.len
        } else {
            data.len() as u64
        };
        // What the argument area holds besides the data: the names, and
        // what the destination looked like for an open or a stat.
        let dest_info = match req {
            Request::FileOpen { open, .. } => open.dest.is_some(),
            Request::FileStat { dest, .. } => dest.is_some(),
            _ => false,
        };
        let tail = if dest_info {
            std::mem::size_of::<strata_transport_shm::record::WireDestInfo>()
        } else {
            0
        };
        names.truncate(rec.name_len as usize + rec.name2_len as usize + tail);
        self.next_tag += 1;
        rec.tag = self.next_tag;
        let reply = self.round_trip(&rec, &names, data)?;
        let answer = codec::decode_reply(op, &reply, &self.arg_back);
        self.answer = Some((rec.tag, answer));
        Ok(Ticket {
            lane: 0,
            slot: 0,
            tag: rec.tag,
            code: op as u32,
            data_len: 0,
        })
    }

    /// Sends the request; its response record (the reply's argument area
    /// goes to `arg_back`; a read's bytes stay in the socket, `pending`,
    /// until `read_extents` takes them).
    fn round_trip(
        &mut self,
        rec: &RequestRecord,
        names: &[u8],
        data: &[u8],
    ) -> Result<ResponseRecord> {
        let wire = rec.to_wire();
        let send = |c: &Conn| {
            frame::write_frame(
                &mut frame::NoSigPipe(&c.s),
                Kind::Request,
                &wire,
                &[names, data],
                &[],
            )
        };
        self.settle();
        let (mut c, pooled) = self.t.take()?;
        let mut res = send(&c).and_then(|_| self.read_reply(&mut c));
        if let (Err(e), true) = (&res, pooled) {
            // A pooled connection the owner closed before reading (its
            // restart): the request was not run; one fresh attempt.
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::UnexpectedEof
            ) && self.got == 0
            {
                c = self.t.connect()?;
                res = send(&c).and_then(|_| self.read_reply(&mut c));
            }
        }
        match res {
            Ok(Ok((r, 0, false))) => {
                self.t.give_back(c);
                Ok(r)
            }
            Ok(Ok((r, left, held))) => {
                *self.pending.borrow_mut() = Some(Pending { c, left, held });
                Ok(r)
            }
            // An error frame: the owner closes the connection after it.
            Ok(Err(e)) => Err(e),
            Err(e) => Err(self.t.down(e)),
        }
    }

    /// Reads a reply frame up to its data (`self.got`: bytes of it read so
    /// far); the response record and the data bytes left in the socket.
    fn read_reply(
        &mut self,
        c: &mut Conn,
    ) -> std::io::Result<Result<(ResponseRecord, usize, bool)>> {
        self.got = 0;
        let h = frame::read_header(&mut c.s)?;
        self.got = frame::HEADER_BYTES;
        let mut rec = vec![0u8; h.record_len as usize];
        c.s.read_exact(&mut rec)?;
        self.arg_back.clear();
        self.arg_back.resize(h.arg_len as usize, 0);
        c.s.read_exact(&mut self.arg_back)?;
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        match h.kind {
            Kind::Reply | Kind::Held if rec.len() == RESPONSE_WIRE_BYTES => Ok(Ok((
                ResponseRecord::from_wire(&rec).ok_or_else(|| bad("malformed response record"))?,
                h.data_len as usize,
                h.kind == Kind::Held,
            ))),
            Kind::Error => Ok(Err(err(
                frame::error_code(&rec),
                String::from_utf8_lossy(&self.arg_back).into_owned(),
            ))),
            _ => Err(bad("unexpected bulk frame")),
        }
    }
}

/// Encodes `req`'s record and names into `names`, growing it once for long
/// names.
fn encode_grow(
    req: &Request,
    rec: &mut RequestRecord,
    names: &mut Vec<u8>,
) -> std::result::Result<(), Errno> {
    match codec::encode_request(req, rec, names) {
        Err(Errno::Name) => {
            names.resize(FORWARD_ARG_BYTES_MAX, 0);
            *rec = RequestRecord::default();
            codec::encode_request(req, rec, names)
        }
        r => r,
    }
}

impl Lane for RemoteLane<'_> {
    fn submit(&mut self, req: &Request) -> Result<Ticket> {
        self.send(req)
    }

    fn submit_data<'d>(
        &mut self,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Option<Ticket>> {
        if data.len() > FORWARD_DATA_BYTES_MAX {
            return Ok(None);
        }
        let mut t = self.send(&make(DataRef::Inline(data)))?;
        t.data_len = data.len();
        Ok(Some(t))
    }

    fn submit_inline<'d>(
        &mut self,
        name_len: usize,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Ticket> {
        let room = (FORWARD_ARG_BYTES_MAX + FORWARD_DATA_BYTES_MAX).saturating_sub(name_len);
        let n = data.len().min(room).min(FORWARD_DATA_BYTES_MAX);
        let mut t = self.send(&make(DataRef::Inline(&data[..n])))?;
        t.data_len = n;
        Ok(t)
    }

    fn wait(&mut self, t: Ticket) -> Result<Answer> {
        match self.answer.take() {
            Some((tag, a)) if tag == t.tag => Ok(a),
            _ => Err(err(
                Errno::Internal,
                "waiting for a request this lane did not send",
            )),
        }
    }

    fn notify(&mut self, req: &Request) -> Result<()> {
        self.send(req).map(|_| ())
    }

    fn read_extents(&self, exts: &[ReadExtent], base: u64, dst: &mut [u8]) -> Result<()> {
        let mut slot = self.pending.borrow_mut();
        for e in exts {
            let d = crate::transport::extent_dst(e, base, dst)?;
            if e.tier == TIER_HOLE {
                d.fill(0);
                continue;
            }
            if e.tier == TIER_LENT {
                if !slot.as_ref().is_some_and(|p| p.held) {
                    return Err(err(Errno::Malformed, "lent extent in a reply not held"));
                }
                self.t.lent_read(e.epoch, e.phys_off, d)?;
                continue;
            }
            let p = slot
                .as_mut()
                .filter(|p| p.left >= d.len())
                .ok_or_else(|| err(Errno::Malformed, "remote read shorter than its extents"))?;
            if let Err(e) = p.c.s.read_exact(d) {
                *slot = None;
                return Err(self.t.down(e));
            }
            p.left -= d.len();
        }
        if slot.as_ref().is_some_and(|p| p.left == 0) {
            if let Some(p) = slot.take() {
                // The owner's ack proves the lent bytes stayed in place
                // while they were read.
                if p.held {
                    release_held(&p.c).map_err(|e| {
                        err(
                            Errno::NodeDown,
                            format!("{}: the answer's hold ended before its bytes were read ({e}); read again", self.t.node),
                        )
                    })?;
                }
                self.t.give_back(p.c);
            }
        }
        Ok(())
    }

    fn release(&mut self, _pin: u64) {
        // The owner released its pin once it sent the bytes; bytes the
        // caller did not read are dropped here.
        self.settle();
    }
}

impl Transport for RemoteTransport {
    fn with_lane(
        &self,
        _at: Option<u32>,
        f: &mut dyn FnMut(&mut dyn Lane) -> Result<()>,
    ) -> Result<()> {
        let mut lane = RemoteLane {
            t: self,
            next_tag: 0,
            answer: None,
            arg_back: Vec::new(),
            got: 0,
            pending: std::cell::RefCell::new(None),
        };
        let r = f(&mut lane);
        lane.settle();
        r
    }

    fn data_max_bytes(&self) -> usize {
        FORWARD_DATA_BYTES_MAX
    }

    fn streams_max(&self) -> usize {
        BULK_STREAMS_MAX
    }

    fn daemon_alive(&self) -> bool {
        UnixStream::connect(&self.socket).is_ok()
    }

    fn direct_gen(&self) -> u64 {
        0
    }
}
