//! Error codes shared by the daemon, the Rust client and the C ABI.
//!
//! The numeric values are part of the wire format and of `include/strata.h`:
//! never renumber, only append.

/// Every error strata reports. `code()` is the stable number; the C ABI
/// returns its negation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(i32)]
pub enum Errno {
    #[error("invalid argument")]
    Inval = 1,
    #[error("no such bucket")]
    NoBucket = 2,
    #[error("no such blob")]
    NoBlob = 3,
    #[error("already exists")]
    Exists = 4,
    #[error("name too long or empty")]
    Name = 5,
    #[error("a metadata limit was reached (see `strata status`)")]
    Limit = 6,
    #[error("request malformed (bad ring entry)")]
    Malformed = 7,
    #[error("daemon unreachable: start it with `strata daemon start`")]
    NoDaemon = 8,
    #[error("protocol version mismatch between client and daemon")]
    Version = 9,
    #[error("I/O error on a tier")]
    Io = 10,
    #[error("out of space on every tier and spill failed")]
    NoSpace = 11,
    #[error("too many in-flight requests or channels")]
    Busy = 12,
    #[error("buffer too small")]
    Range = 13,
    #[error("daemon is shutting down")]
    Shutdown = 14,
    #[error("internal error")]
    Internal = 15,
    #[error("bucket not empty")]
    NotEmpty = 16,
    #[error("operation timed out")]
    Timeout = 17,
    #[error("no such file")]
    NoFile = 18,
    #[error("destination state needed (client must stat the destination)")]
    NeedDest = 19,
    #[error("page must be filled from the destination first")]
    NeedFill = 20,
    #[error("is a directory")]
    IsDir = 21,
    #[error("no room in the buffer: write through to the destination (FileThrough)")]
    WriteThrough = 22,
    #[error("durability impossible: no non-volatile tier (journal) to keep the data on")]
    NotDurable = 23,
    #[error("permission denied: the daemon belongs to another user")]
    Perm = 24,
    #[error("size beyond the configured maximum")]
    TooBig = 25,
    #[error("the record may be stale: the client must stat the destination")]
    Stale = 26,
    #[error("a cluster node that holds this is down or unreachable: see `strata cluster status`")]
    NodeDown = 27,
    #[error("over quota: the bucket or path prefix holds its configured limit of bytes (strata status shows the quotas)")]
    Quota = 28,
}

impl Errno {
    pub const ALL: [Errno; 28] = [
        Errno::Inval,
        Errno::NoBucket,
        Errno::NoBlob,
        Errno::Exists,
        Errno::Name,
        Errno::Limit,
        Errno::Malformed,
        Errno::NoDaemon,
        Errno::Version,
        Errno::Io,
        Errno::NoSpace,
        Errno::Busy,
        Errno::Range,
        Errno::Shutdown,
        Errno::Internal,
        Errno::NotEmpty,
        Errno::Timeout,
        Errno::NoFile,
        Errno::NeedDest,
        Errno::NeedFill,
        Errno::IsDir,
        Errno::WriteThrough,
        Errno::NotDurable,
        Errno::Perm,
        Errno::TooBig,
        Errno::Stale,
        Errno::NodeDown,
        Errno::Quota,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<Errno> {
        Errno::ALL.iter().copied().find(|e| e.code() == code)
    }

    /// Stable identifier used in JSON output and the C header.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Inval => "STRATA_EINVAL",
            Errno::NoBucket => "STRATA_ENOBUCKET",
            Errno::NoBlob => "STRATA_ENOBLOB",
            Errno::Exists => "STRATA_EEXIST",
            Errno::Name => "STRATA_ENAME",
            Errno::Limit => "STRATA_ELIMIT",
            Errno::Malformed => "STRATA_EMALFORMED",
            Errno::NoDaemon => "STRATA_ENODAEMON",
            Errno::Version => "STRATA_EVERSION",
            Errno::Io => "STRATA_EIO",
            Errno::NoSpace => "STRATA_ENOSPC",
            Errno::Busy => "STRATA_EBUSY",
            Errno::Range => "STRATA_ERANGE",
            Errno::Shutdown => "STRATA_ESHUTDOWN",
            Errno::Internal => "STRATA_EINTERNAL",
            Errno::NotEmpty => "STRATA_ENOTEMPTY",
            Errno::Timeout => "STRATA_ETIMEDOUT",
            Errno::NoFile => "STRATA_ENOFILE",
            Errno::NeedDest => "STRATA_ENEEDDEST",
            Errno::NeedFill => "STRATA_ENEEDFILL",
            Errno::IsDir => "STRATA_EISDIR",
            Errno::WriteThrough => "STRATA_EWRITETHROUGH",
            Errno::NotDurable => "STRATA_ENOTDURABLE",
            Errno::Perm => "STRATA_EPERM",
            Errno::TooBig => "STRATA_ETOOBIG",
            Errno::Stale => "STRATA_ESTALE",
            Errno::NodeDown => "STRATA_ENODEDOWN",
            Errno::Quota => "STRATA_EQUOTA",
        }
    }
}

pub type Result<T, E = Errno> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn codes_roundtrip() {
        for e in Errno::ALL {
            assert_eq!(Errno::from_code(e.code()), Some(e));
        }
        assert_eq!(Errno::from_code(0), None);
        assert_eq!(Errno::from_code(999), None);
    }
}
