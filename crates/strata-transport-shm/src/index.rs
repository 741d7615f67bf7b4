//! The get index: where small blobs sit in the arena, published by the
//! daemon in a shared-memory segment of its own, so that a client reads
//! such a blob straight out of the arena, without a round trip (issue 18,
//! target 4).
//!
//! A get through the rings needs the daemon scheduled; on two oversubscribed
//! cores that wait is bimodal (µs or a scheduler tick). A client that finds
//! the blob here copies it under a *sequence lock* instead:
//!
//! ```text
//! daemon (one writer, the poller thread)      client (any number of readers)
//!   seq += 1            (odd: changing)         s1 = seq            (odd: miss)
//!   fence(Release)                              key == (bucket, name)?
//!   write key, arena offset, size               copy arena[off + at ..]
//!   seq += 1            (even: stable)          fence(Acquire); seq == s1? else miss
//! ```
//!
//! A miss (no entry, a changing entry, a copy that raced a change) falls
//! back to the ring, which is always right: the index is a hint, never the
//! truth.
//!
//! What the daemon no longer sees: direct reads are counted as accesses
//! (clients add to `hits`; the daemon harvests every 100 ms and before a
//! stat), but the prefetcher's successor model learns from gets through
//! the daemon only, and the I/O log would miss them (the index is off
//! while `trace.enabled`). `daemon.get_index: 0` turns it off; a client
//! with `STRATA_CLIENT_GET_INDEX=0` does not use it.
//!
//! **Architecture Invariant:** the daemon *forgets* a blob's entry (seq made
//! odd, then key cleared) **before** it changes the blob's bytes in place,
//! replaces or frees its extent, renames or deletes it. Since space is
//! handed to another writer only after it is freed, any copy that could see
//! foreign bytes ends with a changed `seq` and is discarded. Entries name
//! only single-extent blobs on the RAM tier of this node, whole.
//! **API Boundary:** clients only read entries and add to `hits`; the
//! daemon never reads anything a client could have written except `hits`
//! (a count it clamps), and keeps the entry → blob map to itself. A reader
//! checks the offset and size against its own arena mapping before copying.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use strata_shm::ShmSegment;

pub const INDEX_MAGIC: u64 = 0x5354_5241_5441_4958; // "STRATAIX"
pub const INDEX_VERSION: u32 = 1;
/// Longest blob name an entry holds (longer names are never indexed).
pub const NAME_MAX_BYTES: usize = 64;
/// Entries per set: a key hashes to a set and may sit in any of its ways.
pub const WAYS: usize = 4;
/// Most entries an index may have (64 MiB of segment).
pub const ENTRIES_MAX: u32 = 1 << 19;
/// Hits taken from one entry per harvest at most (a client's count is not trusted).
pub const HITS_PER_HARVEST_MAX: u64 = 1 << 32;

#[repr(C, align(64))]
pub struct IndexHeader {
    pub magic: u64,
    pub version: u32,
    /// Number of sets; entries = sets × WAYS.
    pub sets: u32,
    pub _pad: [u64; 6],
}

/// One published blob (128 bytes). Every field is atomic so that readers
/// racing the writer read torn values at worst, which `seq` rejects.
#[repr(C, align(128))]
pub struct Entry {
    /// Even: stable; odd: being changed by the daemon. Only ever grows.
    pub seq: AtomicU64,
    pub bucket: AtomicU64,
    /// Arena offset of the blob's first byte.
    pub off: AtomicU64,
    pub size: AtomicU64,
    /// 0: the entry is empty.
    pub name_len: AtomicU32,
    pub _pad: u32,
    pub name: [AtomicU64; NAME_MAX_BYTES / 8],
    /// Direct reads since the daemon last harvested (clients add). In the
    /// entry's second cache line, so that readers counting do not take the
    /// line with `seq` and the key away from each other.
    pub hits: AtomicU64,
}

const HEADER_BYTES: usize = std::mem::size_of::<IndexHeader>();
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
const _: () = assert!(HEADER_BYTES == 64 && ENTRY_BYTES == 128);

/// Segment bytes of an index of `sets` sets.
pub fn segment_bytes(sets: u32) -> usize {
    // The header is padded to an entry's alignment.
    ENTRY_BYTES + sets as usize * WAYS * ENTRY_BYTES
}

/// The set a key hashes to (FNV-1a over the bucket id and the name; both
/// sides of the segment use this one function).
fn set_of(bucket: u64, name: &[u8], sets: u32) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bucket.to_le_bytes().iter().chain(name) {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % sets as u64) as usize
}

/// The name as the words an entry stores (zero-padded).
fn name_words(name: &[u8]) -> [u64; NAME_MAX_BYTES / 8] {
    debug_assert!(name.len() <= NAME_MAX_BYTES);
    let mut w = [0u64; NAME_MAX_BYTES / 8];
    for (i, chunk) in name.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w[i] = u64::from_le_bytes(b);
    }
    w
}

fn entries_of(seg: &ShmSegment, sets: u32) -> &[Entry] {
    let n = sets as usize * WAYS;
    assert!(seg.len() >= segment_bytes(sets), "index segment too small");
    // SAFETY: the segment is page-aligned and at least `segment_bytes(sets)`
    // long (checked above); entries start one entry-size in (128-aligned);
    // `Entry` is all atomics and integers, valid for any bits; the mapping
    // lives as long as `seg`, which outlives the returned borrow.
    unsafe { std::slice::from_raw_parts(seg.as_ptr().add(ENTRY_BYTES) as *const Entry, n) }
}

/// The daemon's side: publishes and forgets entries (one thread).
pub struct IndexWriter {
    seg: ShmSegment,
    sets: u32,
    /// Blob id → entry index; `owner[i]` is the reverse (u64::MAX: empty).
    slot_of: HashMap<u64, u32>,
    owner: Vec<u64>,
    /// Per set: the way to evict next when all are taken (round robin).
    victim: Vec<u8>,
    pub published_total: u64,
    pub forgotten_total: u64,
    pub evicted_total: u64,
}

impl IndexWriter {
    /// Creates segment `name` for about `entries` entries (rounded up to a
    /// whole number of sets; at least one set, at most [`ENTRIES_MAX`]).
    pub fn create(name: &str, entries: u32) -> std::io::Result<IndexWriter> {
        let sets = entries
            .clamp(WAYS as u32, ENTRIES_MAX)
            .div_ceil(WAYS as u32);
        let seg = ShmSegment::create_or_replace(name, segment_bytes(sets))?;
        // SAFETY: fresh zero-filled segment of at least HEADER_BYTES,
        // page-aligned; no client maps it before the hello names it.
        unsafe {
            let h = &mut *(seg.as_ptr() as *mut IndexHeader);
            h.magic = INDEX_MAGIC;
            h.version = INDEX_VERSION;
            h.sets = sets;
        }
        let n = sets as usize * WAYS;
        Ok(IndexWriter {
            seg,
            sets,
            slot_of: HashMap::new(),
            owner: vec![u64::MAX; n],
            victim: vec![0; sets as usize],
            published_total: 0,
            forgotten_total: 0,
            evicted_total: 0,
        })
    }

    pub fn segment_name(&self) -> &str {
        self.seg.name()
    }

    pub fn entries(&self) -> usize {
        self.owner.len()
    }

    /// Entries naming a blob now.
    pub fn published(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_published(&self, blob: u64) -> bool {
        self.slot_of.contains_key(&blob)
    }

    fn entry(&self, i: u32) -> &Entry {
        &entries_of(&self.seg, self.sets)[i as usize]
    }

    /// Begins a change of entry `i` (seq odd); returns the seq to end with.
    fn begin(&self, i: u32) -> u64 {
        let e = self.entry(i);
        let s = e.seq.load(Ordering::Relaxed);
        debug_assert!(
            s.is_multiple_of(2),
            "one writer: entries are stable between calls"
        );
        e.seq.store(s + 1, Ordering::Relaxed);
        // Readers that see any later store also see the odd seq.
        fence(Ordering::Release);
        s + 2
    }

    fn end(&self, i: u32, seq: u64) {
        self.entry(i).seq.store(seq, Ordering::Release);
    }

    /// Entry for `blob` = `(bucket, name)`: `size` bytes at arena offset
    /// `off`. Returns false when the name is too long (nothing published).
    /// An entry of another blob may be evicted (its hits are handed to `lost`).
    pub fn publish(
        &mut self,
        blob: u64,
        bucket: u64,
        name: &[u8],
        off: u64,
        size: u64,
        lost: &mut dyn FnMut(u64, u64),
    ) -> bool {
        if name.is_empty() || name.len() > NAME_MAX_BYTES || blob == u64::MAX {
            return false;
        }
        let i = match self.slot_of.get(&blob) {
            Some(&i) => i,
            None => {
                let set = set_of(bucket, name, self.sets);
                let base = set * WAYS;
                let free = (0..WAYS).find(|w| self.owner[base + w] == u64::MAX);
                let i = match free {
                    Some(w) => (base + w) as u32,
                    None => {
                        let w = self.victim[set] as usize % WAYS;
                        self.victim[set] = ((w + 1) % WAYS) as u8;
                        let i = (base + w) as u32;
                        let old = self.owner[i as usize];
                        self.forget(old, lost);
                        self.evicted_total += 1;
                        i
                    }
                };
                self.slot_of.insert(blob, i);
                self.owner[i as usize] = blob;
                i
            }
        };
        let seq = self.begin(i);
        let e = self.entry(i);
        e.bucket.store(bucket, Ordering::Relaxed);
        e.off.store(off, Ordering::Relaxed);
        e.size.store(size, Ordering::Relaxed);
        for (dst, w) in e.name.iter().zip(name_words(name)) {
            dst.store(w, Ordering::Relaxed);
        }
        e.name_len.store(name.len() as u32, Ordering::Relaxed);
        self.end(i, seq);
        self.published_total += 1;
        true
    }

    /// Clears `blob`'s entry, if it has one, before its bytes or extent
    /// change; its unharvested hits go to `lost(blob, hits)`.
    pub fn forget(&mut self, blob: u64, lost: &mut dyn FnMut(u64, u64)) {
        let Some(i) = self.slot_of.remove(&blob) else {
            return;
        };
        let seq = self.begin(i);
        let e = self.entry(i);
        e.name_len.store(0, Ordering::Relaxed);
        let hits = e.hits.swap(0, Ordering::Relaxed);
        self.end(i, seq);
        self.owner[i as usize] = u64::MAX;
        self.forgotten_total += 1;
        if hits > 0 {
            lost(blob, hits.min(HITS_PER_HARVEST_MAX));
        }
    }

    /// Clears every entry (e.g. the arena is being dropped).
    pub fn forget_all(&mut self, lost: &mut dyn FnMut(u64, u64)) {
        let blobs: Vec<u64> = self.slot_of.keys().copied().collect();
        for b in blobs {
            self.forget(b, lost);
        }
    }

    /// `blob`'s direct reads since the last harvest (its entry stays).
    pub fn take_hits(&mut self, blob: u64) -> u64 {
        match self.slot_of.get(&blob) {
            Some(&i) => self
                .entry(i)
                .hits
                .swap(0, Ordering::Relaxed)
                .min(HITS_PER_HARVEST_MAX),
            None => 0,
        }
    }

    /// Hands each published blob's direct reads since the last harvest to
    /// `f(blob, hits)`. Bounded by the number of entries.
    pub fn harvest(&mut self, f: &mut dyn FnMut(u64, u64)) -> u64 {
        let mut total = 0u64;
        for (&blob, &i) in &self.slot_of {
            let h = self.entry(i).hits.swap(0, Ordering::Relaxed);
            if h > 0 {
                let h = h.min(HITS_PER_HARVEST_MAX);
                total += h;
                f(blob, h);
            }
        }
        total
    }
}

/// A client's side: maps the daemon's index read-write (for `hits`).
pub struct IndexReader {
    seg: ShmSegment,
    sets: u32,
}

/// What a direct read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The blob's size.
    pub size: u64,
    /// Bytes copied (from the requested offset, short at the blob's end).
    pub copied: usize,
}

impl IndexReader {
    /// Maps segment `name` and checks its header.
    pub fn open(name: &str) -> std::io::Result<IndexReader> {
        let seg = ShmSegment::open(name)?;
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
        if seg.len() < HEADER_BYTES {
            return Err(bad("index segment shorter than its header"));
        }
        // SAFETY: at least HEADER_BYTES mapped (checked), page-aligned;
        // plain integers valid for any bits; read once here.
        let (magic, version, sets) = unsafe {
            let h = &*(seg.as_ptr() as *const IndexHeader);
            (h.magic, h.version, h.sets)
        };
        if magic != INDEX_MAGIC || version != INDEX_VERSION {
            return Err(bad("index segment header does not match"));
        }
        if sets == 0 || sets as u64 * WAYS as u64 > ENTRIES_MAX as u64 + WAYS as u64 {
            return Err(bad("index segment announces an impossible size"));
        }
        if seg.len() < segment_bytes(sets) {
            return Err(bad("index segment smaller than its header says"));
        }
        Ok(IndexReader { seg, sets })
    }

    /// Copies blob `(bucket, name)` from byte `at` into `dst`, straight from
    /// `arena` (the client's mapping of it, `arena_len` bytes), when the
    /// index holds a stable entry for it. `None`: ask the daemon.
    pub fn read(
        &self,
        bucket: u64,
        name: &[u8],
        at: u64,
        arena: *const u8,
        arena_len: u64,
        dst: &mut [u8],
    ) -> Option<Found> {
        self.read_with(bucket, name, arena, arena_len, |size, src| {
            let from = at.min(size) as usize;
            let n = dst.len().min(size as usize - from);
            // SAFETY: `src` points at `size` mapped bytes (checked by
            // read_with); from + n ≤ size; dst holds ≥ n bytes and is ours.
            unsafe { std::ptr::copy_nonoverlapping(src.add(from), dst.as_mut_ptr(), n) };
            n
        })
        .map(|(size, copied)| Found { size, copied })
    }

    /// The whole blob, appended to `out` (cleared first). `max_bytes`:
    /// larger blobs are left to the daemon's path.
    pub fn read_vec(
        &self,
        bucket: u64,
        name: &[u8],
        arena: *const u8,
        arena_len: u64,
        max_bytes: u64,
        out: &mut Vec<u8>,
    ) -> Option<u64> {
        self.read_with(bucket, name, arena, arena_len, |size, src| {
            out.clear();
            if size > max_bytes || out.try_reserve_exact(size as usize).is_err() {
                return usize::MAX;
            }
            // SAFETY: as in `read`: `size` mapped bytes at `src`; `out` has
            // capacity for them and every byte is written before set_len.
            unsafe {
                std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), size as usize);
                out.set_len(size as usize);
            }
            size as usize
        })
        .and_then(|(size, n)| (n != usize::MAX).then_some(size))
    }

    /// Finds a stable entry, calls `copy(size, src)` on its bytes, and
    /// returns its result only if the entry did not change meanwhile
    /// (`usize::MAX` from `copy`: refused, not counted as a hit).
    fn read_with(
        &self,
        bucket: u64,
        name: &[u8],
        arena: *const u8,
        arena_len: u64,
        copy: impl FnOnce(u64, *const u8) -> usize,
    ) -> Option<(u64, usize)> {
        if name.is_empty() || name.len() > NAME_MAX_BYTES {
            return None;
        }
        let want = name_words(name);
        let words = name.len().div_ceil(8);
        let set = set_of(bucket, name, self.sets);
        let entries = entries_of(&self.seg, self.sets);
        for e in &entries[set * WAYS..(set + 1) * WAYS] {
            let s1 = e.seq.load(Ordering::Acquire);
            if !s1.is_multiple_of(2) {
                continue;
            }
            if e.name_len.load(Ordering::Relaxed) as usize != name.len()
                || e.bucket.load(Ordering::Relaxed) != bucket
                // Words past the name are zero on both sides (the writer
                // pads): only the name's own words are compared, which keeps
                // a short name's lookup in the entry's first cache line.
                || e.name[..words]
                    .iter()
                    .zip(&want[..words])
                    .any(|(a, w)| a.load(Ordering::Relaxed) != *w)
            {
                continue;
            }
            let off = e.off.load(Ordering::Relaxed);
            let size = e.size.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if e.seq.load(Ordering::Relaxed) != s1 {
                return None;
            }
            // A stable entry that does not fit our mapping: not ours to read.
            if off.checked_add(size).is_none_or(|end| end > arena_len) {
                return None;
            }
            // SAFETY: off + size ≤ arena_len (checked), so the pointer stays
            // inside the caller's mapping of the arena.
            let n = copy(size, unsafe { arena.add(off as usize) });
            fence(Ordering::Acquire);
            if e.seq.load(Ordering::Relaxed) != s1 {
                return None;
            }
            if n != usize::MAX {
                e.hits.fetch_add(1, Ordering::Relaxed);
            }
            return Some((size, n));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn unique(tag: &str) -> String {
        format!(
            "strata-ix-test-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
    }

    struct Arena(ShmSegment);
    impl Arena {
        fn new(tag: &str, len: usize) -> Arena {
            Arena(ShmSegment::create(&unique(tag), len).unwrap())
        }
        fn write(&self, off: usize, b: &[u8]) {
            assert!(off + b.len() <= self.0.len());
            // SAFETY: inside the mapped test arena (asserted just above).
            unsafe { std::ptr::copy(b.as_ptr(), self.0.as_ptr().add(off), b.len()) }
        }
    }
    impl Drop for Arena {
        fn drop(&mut self) {
            let _ = ShmSegment::unlink(self.0.name());
        }
    }

    fn none(_: u64, _: u64) {}

    #[test]
    fn a_published_blob_is_read_and_a_forgotten_one_is_not() {
        let name = unique("pub");
        let mut w = IndexWriter::create(&name, 64).unwrap();
        let r = IndexReader::open(&name).unwrap();
        let a = Arena::new("pub-a", 1 << 16);
        a.write(4096, b"hello world");
        assert!(w.publish(7, 3, b"k1", 4096, 11, &mut none));
        let mut buf = [0u8; 32];
        let (p, l) = (a.0.as_ptr() as *const u8, a.0.len() as u64);
        let f = r.read(3, b"k1", 0, p, l, &mut buf).unwrap();
        assert_eq!((f.size, f.copied), (11, 11));
        assert_eq!(&buf[..11], b"hello world");
        let f = r.read(3, b"k1", 6, p, l, &mut buf[..3]).unwrap();
        assert_eq!((f.copied, &buf[..3]), (3, &b"wor"[..]));
        assert_eq!(r.read(3, b"k1", 99, p, l, &mut buf).unwrap().copied, 0);
        // Other bucket, other name, prefix of the name: misses.
        assert!(r.read(4, b"k1", 0, p, l, &mut buf).is_none());
        assert!(r.read(3, b"k", 0, p, l, &mut buf).is_none());
        assert!(r.read(3, b"k10", 0, p, l, &mut buf).is_none());
        let mut v = Vec::new();
        assert_eq!(r.read_vec(3, b"k1", p, l, 1 << 20, &mut v), Some(11));
        assert_eq!(v, b"hello world");
        assert_eq!(r.read_vec(3, b"k1", p, l, 4, &mut v), None, "over max");
        let mut hits = 0;
        w.harvest(&mut |b, h| {
            assert_eq!(b, 7);
            hits += h
        });
        assert_eq!(hits, 4, "three reads and one whole-blob read counted");
        w.forget(7, &mut none);
        assert!(r.read(3, b"k1", 0, p, l, &mut buf).is_none());
        assert_eq!(w.published(), 0);
        let _ = ShmSegment::unlink(&name);
    }

    #[test]
    fn an_entry_beyond_the_readers_arena_is_not_read() {
        let name = unique("oob");
        let mut w = IndexWriter::create(&name, 8).unwrap();
        let r = IndexReader::open(&name).unwrap();
        let a = Arena::new("oob-a", 4096);
        w.publish(1, 1, b"x", 4000, 200, &mut none);
        let mut buf = [0u8; 8];
        assert!(r
            .read(1, b"x", 0, a.0.as_ptr(), a.0.len() as u64, &mut buf)
            .is_none());
        w.publish(1, 1, b"x", u64::MAX - 4, 200, &mut none);
        assert!(r
            .read(1, b"x", 0, a.0.as_ptr(), a.0.len() as u64, &mut buf)
            .is_none());
        let _ = ShmSegment::unlink(&name);
    }

    #[test]
    fn a_full_set_evicts_round_robin_and_long_names_are_refused() {
        let name = unique("evict");
        // One set: every key shares it.
        let mut w = IndexWriter::create(&name, WAYS as u32).unwrap();
        let r = IndexReader::open(&name).unwrap();
        let a = Arena::new("evict-a", 1 << 16);
        let (p, l) = (a.0.as_ptr() as *const u8, a.0.len() as u64);
        for i in 0..(WAYS as u64 + 2) {
            assert!(w.publish(i, 1, format!("b{i}").as_bytes(), i * 64, 8, &mut none));
        }
        assert_eq!(w.published(), WAYS);
        assert_eq!(w.evicted_total, 2);
        let mut buf = [0u8; 8];
        let present: Vec<u64> = (0..WAYS as u64 + 2)
            .filter(|i| {
                r.read(1, format!("b{i}").as_bytes(), 0, p, l, &mut buf)
                    .is_some()
            })
            .collect();
        assert_eq!(present, vec![2, 3, 4, 5], "the two oldest went");
        let long = vec![b'n'; NAME_MAX_BYTES + 1];
        assert!(!w.publish(99, 1, &long, 0, 8, &mut none));
        let _ = ShmSegment::unlink(&name);
    }

    /// A writer moves blobs between two arena places, each holding the
    /// blob's id in every byte, and scribbles over the place it left (as
    /// another client would after a free); readers never return a mix.
    #[test]
    fn readers_never_see_bytes_of_a_place_the_writer_left() {
        let name = unique("race");
        let mut w = IndexWriter::create(&name, 64).unwrap();
        let a = Arc::new(Arena::new("race-a", 1 << 20));
        const BLOBS: u64 = 8;
        const LEN: usize = 4096;
        let place = |blob: u64, gen: u64| ((blob * 2 + gen % 2) as usize) * LEN;
        for b in 0..BLOBS {
            a.write(place(b, 0), &[b as u8; LEN]);
            w.publish(
                b,
                1,
                format!("blob{b}").as_bytes(),
                place(b, 0) as u64,
                LEN as u64,
                &mut none,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        for t in 0..2 {
            let (a, stop, name) = (a.clone(), stop.clone(), name.clone());
            readers.push(std::thread::spawn(move || {
                let r = IndexReader::open(&name).unwrap();
                let mut buf = vec![0u8; LEN];
                let (mut hit, mut miss) = (0u64, 0u64);
                let mut i = t as u64;
                // Bounded by the writer's rounds (it sets stop).
                while !stop.load(Ordering::Relaxed) {
                    let b = i % BLOBS;
                    i += 1;
                    match r.read(
                        1,
                        format!("blob{b}").as_bytes(),
                        0,
                        a.0.as_ptr(),
                        a.0.len() as u64,
                        &mut buf,
                    ) {
                        Some(f) => {
                            assert_eq!(f.copied, LEN);
                            assert!(buf.iter().all(|&x| x == b as u8), "torn read of blob {b}");
                            hit += 1;
                        }
                        None => miss += 1,
                    }
                }
                (hit, miss)
            }));
        }
        for gen in 1..20_000u64 {
            let b = gen % BLOBS;
            // New place written, entry moved, old place scribbled.
            a.write(place(b, gen), &[b as u8; LEN]);
            w.forget(b, &mut none);
            a.write(place(b, gen - 1), &[0xEE; LEN]);
            w.publish(
                b,
                1,
                format!("blob{b}").as_bytes(),
                place(b, gen) as u64,
                LEN as u64,
                &mut none,
            );
        }
        stop.store(true, Ordering::Relaxed);
        let mut hits = 0;
        for r in readers {
            hits += r.join().unwrap().0;
        }
        assert!(hits > 0, "some reads went direct");
        let _ = ShmSegment::unlink(&name);
    }
}
