//! **Remote tiers' frames.** A node (the *requester*) keeps blob bytes in
//! memory another node (the *donor*) lends it when its own tiers are full:
//! a *donation*, addressed by offset like a tier file, at most the donor's
//! grant long. The frames ride the bulk connections of
//! [`crate::bulk`] (kind [`Kind::Donation`]), which already carry the
//! dialer's node id after the cluster-secret handshake: a donation is only
//! ever reached by the node it was lent to (its daemon, or a client process
//! of that node through a connection its daemon dialed).
//!
//! ```text
//! request: header (kind Donation) | record (32 bytes) | a write's bytes
//! reply:   header (kind Reply)    | record (32 bytes) | a read's bytes
//! record:  op u32 | epoch u32 | off u64 | len u64 | nonce u64   (little-endian)
//! ```
//!
//! **Epochs** make a lost donation an error, never zeros: `Attach` answers
//! the donation's epoch (random, never 0); every other op names the epoch
//! it addresses and the donor refuses a mismatch with `Stale` — after the
//! donor restarted, or after the requester restarted and attached anew.
//! The requester's `nonce` (one per requester process) lets a repeated
//! `Attach` of the same process find its donation again.

use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::bulk::{self as frame, Kind};
use crate::Errno;

/// Bytes of a donation record.
pub const RECORD_BYTES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Op {
    /// Ask for (or find again) this node's donation: `len` = bytes wanted;
    /// the reply's `epoch` and `len` (bytes granted).
    Attach = 1,
    /// Store the frame's data at `off`.
    Write = 2,
    /// Answer `len` bytes at `off`.
    Read = 3,
    /// Give `[off, off+len)` back to the donor's memory (reads as zeros).
    Release = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub op: Op,
    pub epoch: u32,
    pub off: u64,
    pub len: u64,
    pub nonce: u64,
}

impl Record {
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[..4].copy_from_slice(&(self.op as u32).to_le_bytes());
        b[4..8].copy_from_slice(&self.epoch.to_le_bytes());
        b[8..16].copy_from_slice(&self.off.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// `None` for an unknown op.
    pub fn decode(b: &[u8; RECORD_BYTES]) -> Option<Record> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let op = match u32_at(0) {
            1 => Op::Attach,
            2 => Op::Write,
            3 => Op::Read,
            4 => Op::Release,
            _ => return None,
        };
        Some(Record {
            op,
            epoch: u32_at(4),
            off: u64_at(8),
            len: u64_at(16),
            nonce: u64_at(24),
        })
    }
}

/// A failed call: the donor's (or the connection's) error and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub errno: Errno,
    pub message: String,
    /// The connection is still usable (the donor answered with an error).
    pub answered: bool,
}

impl CallError {
    fn io(e: io::Error) -> CallError {
        let errno = match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Errno::Timeout,
            _ => Errno::NodeDown,
        };
        CallError {
            errno,
            message: e.to_string(),
            answered: false,
        }
    }
}

/// One donation call on a bulk connection: sends `rec` with `out` (a
/// write's bytes), reads the answer and, for a read, exactly `inp.len()`
/// bytes into `inp`. Returns the donor's reply record.
pub fn call(s: &TcpStream, rec: &Record, out: &[u8], inp: &mut [u8]) -> Result<Record, CallError> {
    assert!(
        out.is_empty() || rec.op == Op::Write,
        "only a write sends data"
    );
    assert!(
        inp.is_empty() || rec.op == Op::Read,
        "only a read receives data"
    );
    frame::write_frame(
        &mut frame::NoSigPipe(s),
        Kind::Donation,
        &rec.encode(),
        &[],
        out,
    )
    .map_err(CallError::io)?;
    let mut r = s;
    let h = frame::read_header(&mut r).map_err(CallError::io)?;
    match h.kind {
        Kind::Error => {
            let mut body = vec![0u8; h.record_len as usize + h.arg_len as usize];
            r.read_exact(&mut body).map_err(CallError::io)?;
            let (code, msg) = body.split_at((h.record_len as usize).min(body.len()));
            Err(CallError {
                errno: frame::error_code(code),
                message: String::from_utf8_lossy(msg).into_owned(),
                answered: h.data_len == 0,
            })
        }
        Kind::Reply
            if h.record_len as usize == RECORD_BYTES
                && h.arg_len == 0
                && h.data_len == inp.len() as u64 =>
        {
            let mut b = [0u8; RECORD_BYTES];
            r.read_exact(&mut b).map_err(CallError::io)?;
            r.read_exact(inp).map_err(CallError::io)?;
            Record::decode(&b).ok_or_else(|| CallError {
                errno: Errno::Malformed,
                message: "malformed donation reply".into(),
                answered: false,
            })
        }
        _ => Err(CallError {
            errno: Errno::Malformed,
            message: format!("unexpected donation answer {h:?}"),
            answered: false,
        }),
    }
}

/// The donor's reply: the record, then the caller writes a read's bytes.
pub fn write_reply<W: Write>(w: &mut W, rec: &Record, data_len: u64) -> io::Result<()> {
    frame::write_head(w, Kind::Reply, &rec.encode(), &[], data_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_unknown_ops_refuse() {
        for op in [Op::Attach, Op::Write, Op::Read, Op::Release] {
            let r = Record {
                op,
                epoch: 0xdead_beef,
                off: 1 << 40,
                len: 12345,
                nonce: u64::MAX - 3,
            };
            assert_eq!(Record::decode(&r.encode()), Some(r));
        }
        let mut b = [0u8; RECORD_BYTES];
        assert_eq!(Record::decode(&b), None);
        b[0] = 5;
        assert_eq!(Record::decode(&b), None);
    }

    proptest::proptest! {
        /// Any 32 bytes decode to a record that encodes back to them, or to nothing.
        #[test]
        fn any_record_bytes_decode_or_refuse(v in proptest::collection::vec(0u8.., RECORD_BYTES)) {
            let b: [u8; RECORD_BYTES] = v.try_into().unwrap();
            if let Some(r) = Record::decode(&b) {
                proptest::prop_assert_eq!(r.encode(), b);
            }
        }
    }
}
