//! The daemon's get index: which native blobs clients may read straight
//! out of the arena (`strata_transport_shm::index`), kept in step with the
//! metadata through [`strata_meta::Published`].
//!
//! **Architecture Invariant:** an entry names a blob whose bytes are one
//! extent on the RAM tier, covering it whole; the store forgets the entry
//! before the blob changes (`MetaStore::index_forget`), so a published
//! entry is always the blob's current place.

use strata_meta::{Blob, BlobId, Published};
use strata_transport_shm::index::IndexWriter;

pub struct GetIndex {
    writer: IndexWriter,
    ram_tier: u32,
    hits_total: u64,
}

impl GetIndex {
    pub fn create(name: &str, entries: u32, ram_tier: u32) -> std::io::Result<GetIndex> {
        Ok(GetIndex {
            writer: IndexWriter::create(name, entries)?,
            ram_tier,
            hits_total: 0,
        })
    }
}

impl Published for GetIndex {
    fn forget(&mut self, id: BlobId) -> u64 {
        let mut lost = 0;
        self.writer.forget(id.0, &mut |_, h| lost += h);
        self.hits_total += lost;
        lost
    }

    fn offer(&mut self, blob: &Blob) {
        if self.writer.is_published(blob.id.0) {
            return;
        }
        let [e] = blob.extents.as_slice() else {
            return;
        };
        if e.is_hole() || e.tier != self.ram_tier || e.logical_off != 0 || e.len != blob.size {
            return;
        }
        let hits = &mut self.hits_total;
        self.writer.publish(
            blob.id.0,
            blob.bucket.0,
            blob.name.as_bytes(),
            e.phys_off,
            blob.size,
            &mut |_, h| *hits += h,
        );
    }

    fn harvest(&mut self, f: &mut dyn FnMut(BlobId, u64)) {
        let n = self.writer.harvest(&mut |b, h| f(BlobId(b), h));
        self.hits_total += n;
    }

    fn take_hits(&mut self, id: BlobId) -> u64 {
        let n = self.writer.take_hits(id.0);
        self.hits_total += n;
        n
    }

    fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.writer.entries() as u64,
            self.writer.published() as u64,
            self.writer.published_total,
            self.hits_total,
        )
    }
}
