//! strata-net: **the network side of a daemon**, in Mercury's layers
//! (seed 003), each replaceable without touching the others:
//!
//! - [`transport`] — the network abstraction: a [`transport::Transport`]
//!   connects and listens, handing out byte streams. [`transport::TcpTransport`]
//!   for real networks; [`faults::FaultyTransport`] wraps any transport with
//!   seeded delays, resets, refused connects and partitions for tests.
//! - [`auth`] — the cluster secret and the handshake every connection
//!   starts with (both sides prove the secret; a stranger is refused).
//! - [`bulk`] — the bulk layer's connections: blob bytes on TCP
//!   connections of their own (frames in `strata_proto::bulk`), dialed by a
//!   daemon and handed to the client that asked.
//! - [`donate`] — remote tiers: memory a node lends another (the donor's
//!   store and the requester's `TierBackend`), on bulk connections.
//! - [`tls`] — optional TLS (rustls) under all of it: a transport wrapping
//!   any other, and relays for the bulk sockets handed to clients.
//! - [`rpc`] — the control RPC (tonic/gRPC, `proto/cluster.proto`) over
//!   authenticated connections, every call with a deadline.
//!
//! **Architecture Invariant:** nothing here blocks without a deadline, and
//! nothing here knows the engine: a daemon implements the generated
//! service trait ([`pb::cluster_server::Cluster`]) on top of it.
//!
//! **API Boundary:** the RPC is async (tokio), run by the daemon on its own
//! runtime, apart from the engine's poller; the bulk layer is blocking
//! (its sockets end up in client processes and in per-connection threads).
#![forbid(unsafe_code)]

pub mod auth;
pub mod bulk;
pub mod donate;
pub mod faults;
pub mod rpc;
pub mod tls;
pub mod transport;

/// The generated protocol types and service stubs.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("strata.cluster.v1");
}

pub use auth::Secret;
pub use transport::{Conn, Listener, TcpTransport, Transport};
