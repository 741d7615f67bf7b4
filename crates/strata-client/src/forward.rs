//! The transport to **another node's engine**, through this node's daemon:
//! a request is encoded with the shared-memory codec into a record and an
//! argument area (data inline), sent on the local daemon's control socket
//! as `Forward`, and the daemon passes it over the cluster to the owner
//! node, which runs it and answers with its reply and, for a read, the bytes
//! the reply's extents cover. The client has no network side and no secret:
//! its daemon is the only cluster member on the node.
//!
//! Bounds: one request carries at most `FORWARD_DATA_BYTES_MAX` of data
//! (larger puts go in pieces, larger reads are answered in parts: both are
//! the callers' usual loops); every call has the cluster's deadline on the
//! daemon's side and the client's socket timeout here.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use strata_proto::control::{
    self, ControlReply, ControlRequest, FORWARD_ARG_BYTES_MAX, FORWARD_DATA_BYTES_MAX,
};
use strata_proto::msg::{DataRef, Request};
use strata_proto::types::{ReadExtent, TIER_HOLE};
use strata_proto::Errno;
use strata_transport_shm::{codec, RequestRecord, ResponseRecord};

use crate::transport::{Answer, Lane, Ticket, Transport};
use crate::{err, Result};

/// Longest a forwarded call may take before the client gives up (the
/// daemon's own deadline, `cluster.call_timeout`, normally ends it first).
const FORWARD_SOCKET_TIMEOUT: Duration = Duration::from_secs(3600);

/// Writes with `MSG_NOSIGNAL`: a daemon that closed the connection is an
/// error here, never a SIGPIPE killing the program (C programs keep the
/// default SIGPIPE action).
struct NoSigPipe<'a>(&'a UnixStream);

impl Write for NoSigPipe<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        rustix::net::send(self.0, b, rustix::net::SendFlags::NOSIGNAL).map_err(Into::into)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Idle connections to the daemon one transport keeps for later requests.
const IDLE_CONNECTIONS_MAX: usize = 8;

/// The way to node `node`, through the daemon at `socket`.
pub struct ForwardTransport {
    pub node: u32,
    pub socket: PathBuf,
    /// Connections a finished request left open (one request at a time on each).
    idle: std::sync::Mutex<Vec<UnixStream>>,
}

impl ForwardTransport {
    pub fn new(node: u32, socket: PathBuf) -> ForwardTransport {
        ForwardTransport {
            node,
            socket,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A connection (`true`: from the pool, it may have died meanwhile).
    fn take(&self) -> std::io::Result<(UnixStream, bool)> {
        if let Some(s) = self.idle.lock().ok().and_then(|mut v| v.pop()) {
            return Ok((s, true));
        }
        Ok((self.connect()?, false))
    }

    fn connect(&self) -> std::io::Result<UnixStream> {
        let s = UnixStream::connect(&self.socket)?;
        s.set_read_timeout(Some(FORWARD_SOCKET_TIMEOUT))?;
        Ok(s)
    }

    fn give_back(&self, s: UnixStream) {
        if let Ok(mut v) = self.idle.lock() {
            if v.len() < IDLE_CONNECTIONS_MAX {
                v.push(s);
            }
        }
    }
}

struct ForwardLane<'t> {
    t: &'t ForwardTransport,
    next_tag: u64,
    /// The answer of the last submitted request, by tag.
    answer: Option<(u64, Answer)>,
    /// Bytes of the data extents of the last read, in reply order.
    data: Vec<u8>,
    /// The last reply's argument area.
    arg_back: Vec<u8>,
}

impl ForwardLane<'_> {
    fn send(&mut self, req: &Request) -> Result<Ticket> {
        let op = codec::op_of(req);
        let mut rec = RequestRecord::default();
        // Sized to the request (names are short): a buffer of the maximum
        // would be zeroed on every request (glibc serves it from the heap
        // once its mmap threshold has grown) — ~0.5 ms for 9 MiB.
        let data_len = match req {
            Request::Put {
                data: DataRef::Inline(d),
                ..
            } => d.len(),
            _ => 0,
        };
        let mut arg =
            vec![0u8; (data_len + 8192).min(FORWARD_ARG_BYTES_MAX + FORWARD_DATA_BYTES_MAX)];
        let cannot = |e| err(e, "request the forwarding path cannot carry");
        match codec::encode_request(req, &mut rec, &mut arg) {
            Ok(()) => {}
            // Long names: once more with the largest area.
            Err(Errno::Name) => {
                arg = vec![0u8; FORWARD_ARG_BYTES_MAX + FORWARD_DATA_BYTES_MAX];
                rec = RequestRecord::default();
                codec::encode_request(req, &mut rec, &mut arg).map_err(cannot)?;
            }
            Err(e) => return Err(cannot(e)),
        }
        let used = rec.name_len as usize + rec.name2_len as usize + data_len;
        arg.truncate(used);
        self.next_tag += 1;
        rec.tag = self.next_tag;
        let (reply, data) = self.round_trip(rec, &arg)?;
        self.data = data;
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
}

impl ForwardLane<'_> {
    /// Sends the request to the daemon; its response record and the read's
    /// bytes (the argument area goes to `arg_back`).
    fn round_trip(&mut self, rec: RequestRecord, arg: &[u8]) -> Result<(ResponseRecord, Vec<u8>)> {
        let down = |e: std::io::Error| {
            err(
                Errno::NoDaemon,
                format!("forwarding through {}: {e}", self.t.socket.display()),
            )
        };
        let frame = ControlRequest::Forward {
            node: self.t.node,
            record: rec.to_wire(),
            arg_len: arg.len() as u64,
        };
        let send = |s: &mut UnixStream| -> std::io::Result<()> {
            let mut w = NoSigPipe(s);
            control::write_frame(&mut w, &frame)?;
            w.write_all(arg)
        };
        let (mut s, pooled) = self.t.take().map_err(down)?;
        if let Err(e) = send(&mut s) {
            // A pooled connection the daemon closed meanwhile (a restart):
            // nothing was sent, so one fresh attempt is safe.
            if !pooled {
                return Err(down(e));
            }
            s = self.t.connect().map_err(down)?;
            send(&mut s).map_err(down)?;
        }
        let reply: ControlReply = control::read_frame(&mut s).map_err(down)?;
        match reply {
            ControlReply::Forwarded {
                record,
                arg_len,
                data_len,
            } => {
                if arg_len as usize > FORWARD_ARG_BYTES_MAX
                    || data_len as usize > FORWARD_DATA_BYTES_MAX
                {
                    return Err(err(Errno::Malformed, "forwarded reply too large"));
                }
                let r = ResponseRecord::from_wire(&record)
                    .ok_or_else(|| err(Errno::Malformed, "malformed forwarded reply"))?;
                self.arg_back.clear();
                self.arg_back.resize(arg_len as usize, 0);
                s.read_exact(&mut self.arg_back).map_err(down)?;
                let mut data = vec![0u8; data_len as usize];
                s.read_exact(&mut data).map_err(down)?;
                self.t.give_back(s);
                Ok((r, data))
            }
            // The daemon may close the connection after an error: not pooled.
            ControlReply::Error { code, message } => Err(err(
                Errno::from_code(code).unwrap_or(Errno::Internal),
                message,
            )),
            other => Err(err(
                Errno::Internal,
                format!("unexpected forward reply {other:?}"),
            )),
        }
    }
}

impl Lane for ForwardLane<'_> {
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
        let mut at = 0usize;
        for e in exts {
            let off = e
                .logical_off
                .checked_sub(base)
                .ok_or_else(|| err(Errno::Malformed, "extent before the read"))?
                as usize;
            let len = e.len as usize;
            let d = dst
                .get_mut(off..off.saturating_add(len))
                .ok_or_else(|| err(Errno::Internal, "extent outside the buffer"))?;
            if e.tier == TIER_HOLE {
                d.fill(0);
                continue;
            }
            let src = self
                .data
                .get(at..at + len)
                .ok_or_else(|| err(Errno::Malformed, "forwarded read shorter than its extents"))?;
            d.copy_from_slice(src);
            at += len;
        }
        Ok(())
    }

    fn release(&mut self, _pin: u64) {
        // The owner released the pin when it read the bytes.
    }
}

impl Transport for ForwardTransport {
    fn with_lane(
        &self,
        _at: Option<u32>,
        f: &mut dyn FnMut(&mut dyn Lane) -> Result<()>,
    ) -> Result<()> {
        let mut lane = ForwardLane {
            t: self,
            next_tag: 0,
            answer: None,
            data: Vec::new(),
            arg_back: Vec::new(),
        };
        f(&mut lane)
    }

    fn data_max_bytes(&self) -> usize {
        FORWARD_DATA_BYTES_MAX
    }

    fn daemon_alive(&self) -> bool {
        UnixStream::connect(&self.socket).is_ok()
    }

    fn direct_gen(&self) -> u64 {
        0
    }
}
