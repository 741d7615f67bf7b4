//! strata-proto: everything two processes must agree on byte for byte —
//! error codes, the request/response records of the shared-memory data
//! plane, the layout of the shared-memory segments, and the JSON control
//! plane spoken over the daemon's Unix socket.
//!
//! **Architecture Invariant:** this crate holds no behaviour beyond
//! encoding; it performs no I/O except framing on a caller-supplied stream.
//! **API Boundary:** numeric values (error codes, op codes, record sizes) are
//! stable; they are mirrored in `include/strata.h`.
pub mod control;
pub mod error;
pub mod layout;
pub mod wire;

pub use error::{Errno, Result};
