//! Read-ahead of remote pages (issue 15, build 3; the client's side is
//! `strata_client::replica`).
//!
//! A process reading a file sequentially whose pages another node holds
//! sends its node's daemon `ReadAhead` hints for the range ahead of it.
//! The poller hands each hint to this module's *worker*, a thread with a
//! `strata_client::Client` of its own daemon (`set_read_ahead_worker`):
//! it asks the file's owner where the range lives and copies the pages
//! other nodes hold into this node's replicas (`Client::file_read_ahead`),
//! so the reader finds them in shared memory instead of fetching them over
//! the network when it gets there. The worker is started at the first
//! hint: a single node, or a cluster nobody reads across, never has one.
//!
//! **Architecture invariant:** the poller never waits for the worker — a
//! hint is queued without blocking or dropped (the queue holds at most
//! `HINTS_QUEUED_MAX`); the worker only does what any client may do
//! (replicas are never stale: `strata_engine::files_replica`), so a lost,
//! late or failed hint costs speed, never bytes.
//!
//! **API boundary:** [`ReadAhead::start`] and [`ReadAhead::hint`].

use std::path::PathBuf;
use std::sync::mpsc;

/// Hints waiting for the worker; beyond this, new ones are dropped.
pub const HINTS_QUEUED_MAX: usize = 64;

/// One `ReadAhead` request: `[offset, offset+len)` of `file`, into
/// replica pages of `page` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    pub file: u64,
    pub offset: u64,
    pub len: u64,
    pub page: u64,
}

/// The poller's end of the worker.
pub struct ReadAhead {
    tx: mpsc::SyncSender<Hint>,
    /// Hints dropped because the queue was full.
    pub dropped_total: u64,
    /// Hints handed to the worker.
    pub queued_total: u64,
}

impl ReadAhead {
    /// Starts the worker, a client of the daemon at `socket` (this one).
    pub fn start(socket: PathBuf) -> std::io::Result<ReadAhead> {
        let (tx, rx) = mpsc::sync_channel(HINTS_QUEUED_MAX);
        std::thread::Builder::new()
            .name("strata-readahead".into())
            .stack_size(256 << 10)
            .spawn(move || worker(socket, rx))?;
        Ok(ReadAhead {
            tx,
            dropped_total: 0,
            queued_total: 0,
        })
    }

    /// Queues `h` for the worker without waiting; drops it when the queue
    /// is full (or the worker is gone).
    pub fn hint(&mut self, h: Hint) {
        debug_assert!(h.len > 0);
        match self.tx.try_send(h) {
            Ok(()) => self.queued_total += 1,
            Err(_) => self.dropped_total += 1,
        }
    }
}

/// The worker: connects at its first hint (the daemon serves by then),
/// then reads ahead hint after hint. Ends when the poller's sender goes.
fn worker(socket: PathBuf, rx: mpsc::Receiver<Hint>) {
    let mut client: Option<strata_client::Client> = None;
    // One buffer for every extent (≤ the longest hint, READ_AHEAD_BYTES_MAX).
    let mut buf = Vec::new();
    // Bounded by the poller: it sends at most one hint per client request.
    while let Ok(h) = rx.recv() {
        if client.is_none() {
            match strata_client::Client::connect_to(&socket) {
                Ok(c) => {
                    c.set_read_ahead_worker();
                    client = Some(c);
                }
                Err(e) => {
                    tracing::debug!("read-ahead worker cannot connect: {e}");
                    continue;
                }
            }
        }
        let Some(c) = client.as_ref() else {
            continue;
        };
        match c.file_read_ahead(h.file, h.offset, h.len, h.page, &mut buf) {
            Ok(n) => tracing::trace!(?h, fetched = n, "read ahead"),
            Err(e) => {
                tracing::debug!(?h, "read-ahead failed: {e}");
                if e.errno == strata_proto::Errno::NoDaemon {
                    client = None;
                }
            }
        }
    }
}
