//! strata-net: **the network side of a daemon**, in Mercury's layers
//! (seed 003), each replaceable without touching the others:
//!
//! - [`transport`] — the network abstraction: a [`transport::Transport`]
//!   connects and listens, handing out byte streams. [`transport::TcpTransport`]
//!   for real networks; [`faults::FaultyTransport`] wraps any transport with
//!   seeded delays, resets, refused connects and partitions for tests.
//! - [`auth`] — the cluster secret and the handshake every connection
//!   starts with (both sides prove the secret; a stranger is refused).
//! - [`rpc`] — the control RPC (tonic/gRPC, `proto/cluster.proto`) over
//!   authenticated connections, every call with a deadline.
//!
//! **Architecture Invariant:** nothing here blocks without a deadline, and
//! nothing here knows the engine: a daemon implements the generated
//! service trait ([`pb::cluster_server::Cluster`]) on top of it.
//!
//! **API Boundary:** async (tokio); the daemon runs it on its own runtime
//! thread, apart from the engine's poller.
#![forbid(unsafe_code)]

pub mod auth;
pub mod faults;
pub mod rpc;
pub mod transport;

/// The generated protocol types and service stubs.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("strata.cluster.v1");
}

pub use auth::Secret;
pub use transport::{Conn, Listener, TcpTransport, Transport};
