//! Pages where written (issue 15, step 2; docs/FILES-ACROSS-NODES.md): the
//! owner's side. A node that wrote whole pages of a file owned here keeps
//! them in its shadow and *publishes* them (`FilePublish`); the owner
//! records them in the file's [`PageMap`], drops its own copies of those
//! pages (superseded), grows the size, and answers reads of them with
//! `TIER_REMOTE` runs naming the holder and the generation.
//!
//! Not wired to clients yet (no shadows): only this side, tested here.

use strata_meta::pagemap::{PageMap, Run};
use strata_meta::BucketId;
use strata_proto::{Errno, Result};

use crate::core::Core;
use crate::files::FILE_BYTES_MAX;

impl Core {
    /// `FilePublish`: `holder` keeps pages `first_page..first_page+pages`
    /// of file `id`; the file is at least `size` bytes now. Returns the
    /// generation issued.
    pub fn file_publish(
        &mut self,
        id: BucketId,
        holder: u32,
        first_page: u64,
        pages: u64,
        size: u64,
    ) -> Result<u64> {
        let rec = self.meta.file(id)?;
        let page = rec.page_bytes;
        if pages == 0 || size > FILE_BYTES_MAX || holder == id.node() {
            return Err(Errno::Inval);
        }
        let last = first_page.checked_add(pages - 1).ok_or(Errno::Inval)?;
        if last.checked_mul(page).is_none_or(|o| o >= FILE_BYTES_MAX) {
            return Err(Errno::Inval);
        }
        // whole pages only, below the size the holder reports (a partial
        // page goes to the owner as bytes)
        if (last + 1) * page > size {
            return Err(Errno::Inval);
        }
        if self.file_backed(id) || rec.dest_direct {
            // the file model's special states keep pages at the owner
            return Err(Errno::Busy);
        }
        let map = self.files.page_maps.entry(id).or_default();
        let gen = map.publish(holder, &[(first_page, last)])?;
        // our own copies of those pages are superseded
        let mine: Vec<u64> = self
            .meta
            .file_pages(id)?
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| (first_page..=last).contains(p))
            .collect();
        for p in mine {
            self.page_remove(id, p);
        }
        let rec = self.meta.file_mut(id)?;
        if size > rec.size {
            rec.size = size;
        }
        self.file_changed(id, true);
        Ok(gen)
    }

    /// The run of another node holding page `page` of file `id`.
    pub fn file_remote_page(&self, id: BucketId, page: u64) -> Option<Run> {
        self.files.page_maps.get(&id).and_then(|m| m.holder_of(page))
    }

    /// The file is cut to `pages_kept` pages: published runs beyond leave
    /// the map (their holders' copies are dead weight until they drop
    /// them). Returns the runs removed.
    pub fn file_unpublish_beyond(&mut self, id: BucketId, pages_kept: u64) -> Vec<Run> {
        let Some(m) = self.files.page_maps.get_mut(&id) else {
            return Vec::new();
        };
        let removed = m.truncate(pages_kept);
        if m.is_empty() {
            self.files.page_maps.remove(&id);
        }
        removed
    }

    /// The file's record is gone: its map goes too. Returns it (whose
    /// holders may drop their shadows).
    pub fn file_page_map_drop(&mut self, id: BucketId) -> Option<PageMap> {
        self.files.page_maps.remove(&id)
    }
}
