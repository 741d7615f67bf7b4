//! The **bulk path's frames**: how a native-API request and its blob bytes
//! travel to the node that owns its name, and how the answer and the bytes
//! a read covered come back — binary, not protobuf, on a TCP connection
//! of its own (one request at a time per connection; a client keeps
//! several per peer).
//!
//! ```text
//! header (24 bytes, little-endian): magic "SBK1" | kind u8 | 0 0 0 |
//!                                   record_len u32 | arg_len u32 | data_len u64
//! request: header | request record (wire form) | names, then the put's bytes
//! reply:   header | response record | reply argument area | bytes read
//! error:   header | errno u32 | message (UTF-8)
//! ```
//!
//! The same connections carry remote tiers' frames (`crate::donation`).
//!
//! Every length is checked against its bound before a byte of the body is
//! read, so a hostile peer cannot make a side allocate more than
//! `ARG_BYTES_MAX + DATA_BYTES_MAX`.

use std::io::{self, Read, Write};

use crate::control::{FORWARD_ARG_BYTES_MAX, FORWARD_DATA_BYTES_MAX};
use crate::Errno;

pub const MAGIC: [u8; 4] = *b"SBK1";
pub const HEADER_BYTES: usize = 24;
/// Largest record (the request record's wire form is 144 bytes).
pub const RECORD_BYTES_MAX: usize = 512;
/// Largest argument area: names, and a request's inline bytes.
pub const ARG_BYTES_MAX: usize = FORWARD_ARG_BYTES_MAX + FORWARD_DATA_BYTES_MAX;
/// Largest data section: the bytes one reply's extents cover.
pub const DATA_BYTES_MAX: usize = FORWARD_DATA_BYTES_MAX;
/// Bodies up to this size are sent with their header in one write (one
/// segment for a small request); larger ones are written from where they
/// lie, with no copy.
pub const COALESCE_BYTES_MAX: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Request = 1,
    Reply = 2,
    Error = 3,
    /// A remote tier's request (`crate::donation`).
    Donation = 4,
    /// A reply whose sender holds the read's extents pinned until the
    /// reader sends `Release` (extents `TIER_LENT`: the reader reads them
    /// from memory its own node lends the sender).
    Held = 5,
    /// The reader is done with a `Held` reply's extents (no body); answered
    /// with an empty `Reply` while the hold was still in force.
    Release = 6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub record_len: u32,
    pub arg_len: u32,
    pub data_len: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = self.kind as u8;
        h[8..12].copy_from_slice(&self.record_len.to_le_bytes());
        h[12..16].copy_from_slice(&self.arg_len.to_le_bytes());
        h[16..24].copy_from_slice(&self.data_len.to_le_bytes());
        h
    }

    /// `Malformed` for a wrong magic or kind, `TooBig` for a length over its
    /// bound.
    pub fn decode(h: &[u8; HEADER_BYTES]) -> Result<Header, Errno> {
        if h[..4] != MAGIC || h[5..8] != [0, 0, 0] {
            return Err(Errno::Malformed);
        }
        let kind = match h[4] {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::Error,
            4 => Kind::Donation,
            5 => Kind::Held,
            6 => Kind::Release,
            _ => return Err(Errno::Malformed),
        };
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let hd = Header {
            kind,
            record_len: u32_at(8),
            arg_len: u32_at(12),
            data_len: u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
        };
        if hd.record_len as usize > RECORD_BYTES_MAX
            || hd.arg_len as usize > ARG_BYTES_MAX
            || hd.data_len > DATA_BYTES_MAX as u64
        {
            return Err(Errno::TooBig);
        }
        Ok(hd)
    }
}

/// Writes on a socket with `MSG_NOSIGNAL`: a peer that closed the
/// connection is an error, never a SIGPIPE killing the process (C programs
/// keep the default SIGPIPE action).
pub struct NoSigPipe<'a, S: std::os::fd::AsFd>(pub &'a S);

impl<S: std::os::fd::AsFd> Write for NoSigPipe<'_, S> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.0, b, rustix::net::SendFlags::NOSIGNAL).map_err(Into::into)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes one frame: small ones in one write, large parts from their place.
pub fn write_frame<W: Write>(
    w: &mut W,
    kind: Kind,
    record: &[u8],
    arg: &[&[u8]],
    data: &[u8],
) -> io::Result<()> {
    let mut head = frame_head(kind, record, arg, data.len() as u64)?;
    let arg_len: usize = arg.iter().map(|a| a.len()).sum();
    // Data joins the head only behind a coalesced argument area.
    if !data.is_empty()
        && arg_len <= COALESCE_BYTES_MAX
        && head.len() + data.len() <= COALESCE_BYTES_MAX
    {
        head.extend_from_slice(data);
        return w.write_all(&head);
    }
    flush_head(w, &head, arg)?;
    if !data.is_empty() {
        w.write_all(data)?;
    }
    Ok(())
}

/// Writes a frame's header, record and argument area; its `data_len`
/// bytes of data are the caller's to write next (from where they lie).
pub fn write_head<W: Write>(
    w: &mut W,
    kind: Kind,
    record: &[u8],
    arg: &[&[u8]],
    data_len: u64,
) -> io::Result<()> {
    let head = frame_head(kind, record, arg, data_len)?;
    flush_head(w, &head, arg)
}

/// The header, the record and the argument parts small enough to coalesce.
fn frame_head(kind: Kind, record: &[u8], arg: &[&[u8]], data_len: u64) -> io::Result<Vec<u8>> {
    let arg_len: usize = arg.iter().map(|a| a.len()).sum();
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("bulk frame: {what}"));
    if record.len() > RECORD_BYTES_MAX {
        return Err(bad("record too large"));
    }
    if arg_len > ARG_BYTES_MAX || data_len > DATA_BYTES_MAX as u64 {
        return Err(bad("body too large"));
    }
    let h = Header {
        kind,
        record_len: record.len() as u32,
        arg_len: arg_len as u32,
        data_len,
    }
    .encode();
    let mut head = Vec::with_capacity(HEADER_BYTES + record.len() + COALESCE_BYTES_MAX);
    head.extend_from_slice(&h);
    head.extend_from_slice(record);
    if arg_len <= COALESCE_BYTES_MAX {
        for a in arg {
            head.extend_from_slice(a);
        }
    }
    Ok(head)
}

/// Writes `head`, then the argument parts it did not take.
fn flush_head<W: Write>(w: &mut W, head: &[u8], arg: &[&[u8]]) -> io::Result<()> {
    w.write_all(head)?;
    let arg_len: usize = arg.iter().map(|a| a.len()).sum();
    if arg_len > COALESCE_BYTES_MAX {
        for a in arg {
            w.write_all(a)?;
        }
    }
    Ok(())
}

/// Reads a header; `UnexpectedEof` when the peer closed between frames.
pub fn read_header<R: Read>(r: &mut R) -> io::Result<Header> {
    let mut h = [0u8; HEADER_BYTES];
    r.read_exact(&mut h)?;
    Header::decode(&h).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bulk frame header refused: {e}"),
        )
    })
}

/// An error frame's body: the errno and the message.
pub fn error_body(e: Errno, message: &str) -> ([u8; 4], Vec<u8>) {
    let mut m = message.as_bytes().to_vec();
    m.truncate(FORWARD_ARG_BYTES_MAX);
    (e.code().to_le_bytes(), m)
}

/// Sends an error frame (best effort: the connection is usually closed
/// after it, or the peer has gone).
/// Sends an error frame on `w` (and flushes it), best effort: the
/// connection is being closed anyway.
pub fn send_error_on<W: Write>(w: &mut W, e: Errno, message: &str) {
    let (rec, msg) = error_body(e, message);
    let _ = write_frame(w, Kind::Error, &rec, &[&msg], &[]).and_then(|_| w.flush());
}

/// Sends an error frame on socket `s`, best effort (see [`send_error_on`]).
pub fn send_error<S: std::os::fd::AsFd>(s: &S, e: Errno, message: &str) {
    let (rec, msg) = error_body(e, message);
    let _ = write_frame(&mut NoSigPipe(s), Kind::Error, &rec, &[&msg], &[]);
}

/// The errno of an error frame's record (`Internal` if unknown).
pub fn error_code(record: &[u8]) -> Errno {
    record
        .get(..4)
        .and_then(|b| Errno::from_code(i32::from_le_bytes(b.try_into().ok()?)))
        .unwrap_or(Errno::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_bounds_refuse() {
        let h = Header {
            kind: Kind::Reply,
            record_len: 40,
            arg_len: 7,
            data_len: 1 << 20,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert_eq!(Header::decode(&bad), Err(Errno::Malformed));
        let mut bad = h.encode();
        bad[4] = 9;
        assert_eq!(Header::decode(&bad), Err(Errno::Malformed));
        let big = Header {
            data_len: DATA_BYTES_MAX as u64 + 1,
            ..h
        };
        assert_eq!(Header::decode(&big.encode()), Err(Errno::TooBig));
        let big = Header {
            record_len: RECORD_BYTES_MAX as u32 + 1,
            ..h
        };
        assert_eq!(Header::decode(&big.encode()), Err(Errno::TooBig));
    }

    #[test]
    fn frames_read_back_whatever_their_size() {
        for (arg, data) in [
            (3usize, 0usize),
            (100, 5),
            (70 << 10, 0),
            (10, 1 << 20),
            (0, 0),
        ] {
            let a: Vec<u8> = (0..arg).map(|i| i as u8).collect();
            let d: Vec<u8> = (0..data).map(|i| (i * 7) as u8).collect();
            let mut out = Vec::new();
            write_frame(
                &mut out,
                Kind::Request,
                b"rec",
                &[&a[..arg / 2], &a[arg / 2..]],
                &d,
            )
            .unwrap();
            let mut r = &out[..];
            let h = read_header(&mut r).unwrap();
            assert_eq!(
                (h.record_len, h.arg_len, h.data_len),
                (3, arg as u32, data as u64)
            );
            assert_eq!(&r[..3], b"rec");
            assert_eq!(&r[3..3 + arg], &a[..]);
            assert_eq!(&r[3 + arg..], &d[..]);
        }
    }

    #[test]
    fn error_frames_carry_code_and_message() {
        let (rec, msg) = error_body(Errno::NodeDown, "node 2 is down");
        assert_eq!(error_code(&rec), Errno::NodeDown);
        assert_eq!(msg, b"node 2 is down");
        assert_eq!(error_code(b"\xff\xff"), Errno::Internal);
    }

    proptest::proptest! {
        /// Any 24 bytes: a header within every bound, or an error — never a
        /// panic, never a length over its bound.
        #[test]
        fn any_header_bytes_decode_within_bounds_or_fail(b in proptest::array::uniform24(0u8..)) {
            if let Ok(h) = Header::decode(&b) {
                proptest::prop_assert!(h.record_len as usize <= RECORD_BYTES_MAX);
                proptest::prop_assert!(h.arg_len as usize <= ARG_BYTES_MAX);
                proptest::prop_assert!(h.data_len <= DATA_BYTES_MAX as u64);
                proptest::prop_assert_eq!(Header::decode(&h.encode()), Ok(h));
            }
        }

        /// A valid header with arbitrary lengths round-trips or is refused
        /// as too big, by the same bounds `write_frame` checks.
        #[test]
        fn lengths_are_refused_exactly_over_their_bounds(
            record_len in 0u32..1024,
            arg_len in 0u32..(ARG_BYTES_MAX as u32 * 2),
            data_len in 0u64..(DATA_BYTES_MAX as u64 * 2),
        ) {
            let h = Header { kind: Kind::Request, record_len, arg_len, data_len };
            let fits = record_len as usize <= RECORD_BYTES_MAX
                && arg_len as usize <= ARG_BYTES_MAX
                && data_len <= DATA_BYTES_MAX as u64;
            proptest::prop_assert_eq!(Header::decode(&h.encode()).is_ok(), fits);
        }
    }
}
