//! strata-transport-shm: the shared-memory transport between a client and
//! the daemon on one node.
//!
//! A client maps a segment of its own (rings and request slots, `layout`)
//! and the daemon's arena. Each request is a typed `strata_proto::Request`
//! encoded into a slot (`codec`, `record`); bulk bytes travel by reference
//! to arena space the daemon leased to the channel (`DataRef::Lease`) or
//! inline in the slot. The daemon decodes, runs the request, encodes the
//! typed `Reply` back into the same slot.
//!
//! **Architecture Invariant:** the daemon trusts nothing read from a slot —
//! `decode_request` checks every length against the slot and every name for
//! UTF-8; encode then decode is the identity for every valid message
//! (property-tested below).
//! **API Boundary:** only this crate knows the record layout; every other
//! crate speaks `strata_proto::msg`.
pub mod codec;
pub mod index;
pub mod layout;
pub mod record;
pub mod stat_index;

pub use codec::{decode_reply, decode_request, encode_reply, encode_request, op_of};
pub use record::{
    Op, Pod, RequestRecord, ResponseRecord, PROTOCOL_VERSION, RELEASES_MAX, REQUEST_WIRE_BYTES,
    RESPONSE_WIRE_BYTES,
};

#[cfg(test)]
mod tests;
