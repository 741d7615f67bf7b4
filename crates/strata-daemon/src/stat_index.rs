//! The daemon's stat index: attributes of quiet file records clients read
//! for a `stat` by path without a round trip (`strata_transport_shm::
//! stat_index`), kept in step with the records through
//! [`strata_meta::StatPublished`] (which records qualify: the engine's
//! `files_statix.rs`).
//!
//! **Architecture Invariant:** an entry is forgotten before its record, its
//! name, its holders or its links change, so a published entry is always
//! what `FileStat` by its path answers now.

use strata_meta::{BucketId, StatPublished};
use strata_proto::types::FileAttr;
use strata_transport_shm::stat_index::StatWriter;

pub struct StatIndex {
    writer: StatWriter,
}

impl StatIndex {
    pub fn create(name: &str, entries: u32) -> std::io::Result<StatIndex> {
        Ok(StatIndex {
            writer: StatWriter::create(name, entries)?,
        })
    }
}

impl StatPublished for StatIndex {
    #[inline]
    fn forget(&mut self, id: BucketId) {
        self.writer.forget(id.0);
    }

    fn publish(&mut self, path: &str, attr: &FileAttr) {
        debug_assert!(attr.holders == 0 && !attr.direct);
        self.writer.publish(path.as_bytes(), attr);
    }

    fn peek(&self, id: BucketId) -> Option<(Vec<u8>, FileAttr)> {
        self.writer.peek(id.0)
    }

    fn published_ids(&self) -> Vec<BucketId> {
        self.writer
            .published_ids()
            .into_iter()
            .map(BucketId)
            .collect()
    }

    fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.writer.entries() as u64,
            self.writer.published() as u64,
            self.writer.published_total,
            self.writer.forgotten_total,
        )
    }
}
