//! strata-proto: what every client and daemon must agree on, whatever
//! carries it — error codes, the typed requests and replies of the data
//! plane (`msg`) with the records they carry (`types`), and the JSON
//! control plane spoken over the daemon's Unix socket (`control`).
//!
//! **Architecture Invariant:** this crate holds no behaviour beyond
//! encoding; it performs no I/O except framing on a caller-supplied stream.
//! No transport detail (offsets in a shared segment, ring entries) appears
//! here: transports encode `msg` their own way (`strata-transport-shm`).
//! **API Boundary:** numeric values (error codes) are stable; they are
//! mirrored in `include/strata.h`.
#![forbid(unsafe_code)]
pub mod bulk;
pub mod control;
pub mod donation;
pub mod error;
pub mod msg;
pub mod types;

pub use error::{Errno, Result};
pub use msg::{DataRef, FileRef, PutMode, Reply, Request, Target, Through};
pub use types::{
    BlobStat, DestInfo, FileAttr, OpenFile, Persist, PolicyChoice, ReadExtent, SetAttr, Unlinked,
};
