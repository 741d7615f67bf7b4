//! The stat index: attributes of quiet file records, published by the
//! daemon in a shared-memory segment of its own, so that a client answers a
//! `stat` by path without a round trip (issue 18, target 2).
//!
//! mdtest's stat phase (and `ls -l`, `make`, `find`) asks for attributes of
//! many files nobody holds open. Through the rings each stat is one request
//! to the daemon's one thread, and on two cores shared with four clients
//! that request waits for a core. An entry here carries what `FileStat`
//! would answer, under a *sequence lock* (as the get index, `index.rs`):
//!
//! ```text
//! daemon (one writer, the poller thread)      client (any number of readers)
//!   seq += 1            (odd: changing)         s1 = seq            (odd: miss)
//!   fence(Release)                              path == ours?
//!   write path, attributes                      copy attributes
//!   seq += 1            (even: stable)          fence(Acquire); seq == s1? else miss
//! ```
//!
//! A miss (no entry, a changing entry, a read that raced a change) falls
//! back to the ring, which is always right: the index is a hint, never the
//! truth.
//!
//! **Architecture Invariant:** the daemon *forgets* a record's entry (seq
//! made odd, then the path cleared) **before** any change to the record, its
//! names, its holders or its links is answered (`MetaStore::stat_forget`,
//! called by every mutable accessor of a record and by the engine's hold
//! and link changes). Entries are offered only for records whose `FileStat`
//! by path needs no look at the destination and that nobody holds: such a
//! record changes only through a request, and every request that changes it
//! forgets first. So an entry a reader finds stable is the answer the daemon
//! would give now; a stat that starts after a change was answered never
//! sees the old entry.
//! **API Boundary:** clients only read; the daemon never reads the segment
//! (it keeps the id → entry map to itself). A reader checks the path bytes
//! and decodes fields it cannot trust (`persist`) before answering.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use strata_proto::types::{FileAttr, Persist};
use strata_shm::ShmSegment;

pub const STAT_INDEX_MAGIC: u64 = 0x5354_5241_5441_5358; // "STRATASX"
pub const STAT_INDEX_VERSION: u32 = 1;
/// Longest path an entry holds (longer paths are never published: their
/// stats ask the daemon).
pub const PATH_MAX_BYTES: usize = 168;
/// Entries per set: a path hashes to a set and may sit in any of its ways.
pub const WAYS: usize = 4;
/// Most entries an index may have (128 MiB of segment).
pub const ENTRIES_MAX: u32 = 1 << 19;

#[repr(C, align(64))]
pub struct StatHeader {
    pub magic: u64,
    pub version: u32,
    /// Number of sets; entries = sets × WAYS.
    pub sets: u32,
    /// Entries published now (the writer keeps it; 0: a reader looks no
    /// further than this header).
    pub published: AtomicU64,
    pub _pad: [u64; 5],
}

/// One published record (256 bytes). Every field is atomic so that readers
/// racing the writer read torn values at worst, which `seq` rejects.
#[repr(C, align(256))]
pub struct StatEntry {
    /// Even: stable; odd: being changed by the daemon. Only ever grows.
    pub seq: AtomicU64,
    pub id: AtomicU64,
    pub size: AtomicU64,
    pub dest_size: AtomicU64,
    pub page_bytes: AtomicU64,
    pub mtime_ns: AtomicU64,
    pub ctime_ns: AtomicU64,
    pub atime_ns: AtomicU64,
    pub mode: AtomicU32,
    pub uid: AtomicU32,
    pub gid: AtomicU32,
    pub nlink: AtomicU32,
    /// Bits 0..2: `Persist`; bit 8: dirty.
    pub flags: AtomicU32,
    /// 0: the entry is empty.
    pub path_len: AtomicU32,
    pub path: [AtomicU64; PATH_MAX_BYTES / 8],
}

const HEADER_BYTES: usize = std::mem::size_of::<StatHeader>();
const ENTRY_BYTES: usize = std::mem::size_of::<StatEntry>();
const _: () = assert!(HEADER_BYTES == 64 && ENTRY_BYTES == 256);
const FLAG_DIRTY: u32 = 1 << 8;

/// Bytes of the tag array (one word per entry), rounded to whole entries.
fn tags_bytes(sets: u32) -> usize {
    (sets as usize * WAYS * 8).div_ceil(ENTRY_BYTES) * ENTRY_BYTES
}

/// Segment bytes of an index of `sets` sets: the header (padded to an
/// entry), the tags, the entries.
pub fn segment_bytes(sets: u32) -> usize {
    ENTRY_BYTES + tags_bytes(sets) + sets as usize * WAYS * ENTRY_BYTES
}

/// The path's hash (FNV-1a; both sides use this one function): its set is
/// `hash % sets`, its tag `hash | 1`.
fn hash_of(path: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn set_of(path: &[u8], sets: u32) -> usize {
    (hash_of(path) % sets as u64) as usize
}

/// Per entry, the tag of the path it holds (0: none): a lookup reads the
/// four tags of its set — one cache line of a small, dense array — and
/// touches an entry only when a tag matches. A hint only (the entry's path
/// decides): it keeps a miss from touching pages of the much larger entry
/// array (a first touch of a page costs a fault; measured on this VM, a
/// stat of a DEFAULT file 3.1 -> 5-24 us when every miss read its set's
/// entries).
fn tags_of(seg: &ShmSegment, sets: u32) -> &[AtomicU64] {
    let n = sets as usize * WAYS;
    assert!(
        seg.len() >= segment_bytes(sets),
        "stat index segment too small"
    );
    // SAFETY: the tags start one entry-size in (8-aligned), n words within
    // `segment_bytes(sets)` (checked); atomics are valid for any bits; the
    // mapping lives as long as `seg`.
    unsafe { std::slice::from_raw_parts(seg.as_ptr().add(ENTRY_BYTES) as *const AtomicU64, n) }
}

fn header_of(seg: &ShmSegment) -> &StatHeader {
    // SAFETY: the header lies at offset 0 of a page-aligned mapping of at
    // least HEADER_BYTES (checked by `create`/`open`); it lives as long as
    // `seg`; its fields are integers and atomics, valid for any bits.
    unsafe { &*(seg.as_ptr() as *const StatHeader) }
}

/// Word `i` of `path` as an entry stores it (zero-padded).
#[inline]
fn path_word(path: &[u8], i: usize) -> u64 {
    let chunk = &path[i * 8..path.len().min(i * 8 + 8)];
    let mut b = [0u8; 8];
    b[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(b)
}

fn entries_of(seg: &ShmSegment, sets: u32) -> &[StatEntry] {
    let n = sets as usize * WAYS;
    assert!(
        seg.len() >= segment_bytes(sets),
        "stat index segment too small"
    );
    // SAFETY: the segment is page-aligned and at least `segment_bytes(sets)`
    // long (checked above); entries start after the header and the tags,
    // a whole number of entries in (256-aligned);
    // `StatEntry` is all atomics, valid for any bits; the mapping lives as
    // long as `seg`, which outlives the returned borrow.
    unsafe {
        std::slice::from_raw_parts(
            seg.as_ptr().add(ENTRY_BYTES + tags_bytes(sets)) as *const StatEntry,
            n,
        )
    }
}

/// The daemon's side: publishes and forgets entries (one thread).
pub struct StatWriter {
    seg: ShmSegment,
    sets: u32,
    /// Record id → entry index; `owner[i]` is the reverse (u64::MAX: empty).
    slot_of: HashMap<u64, u32>,
    owner: Vec<u64>,
    /// Per set: the way to evict next when all are taken (round robin).
    victim: Vec<u8>,
    pub published_total: u64,
    pub forgotten_total: u64,
    pub evicted_total: u64,
}

impl StatWriter {
    /// Creates segment `name` for about `entries` entries (rounded up to a
    /// whole number of sets; at least one set, at most [`ENTRIES_MAX`]).
    pub fn create(name: &str, entries: u32) -> std::io::Result<StatWriter> {
        let sets = entries
            .clamp(WAYS as u32, ENTRIES_MAX)
            .div_ceil(WAYS as u32);
        let seg = ShmSegment::create_or_replace(name, segment_bytes(sets))?;
        // Every page allocated now (a few ms for the default 8 MiB): a
        // client's lookup of a set nobody wrote yet would otherwise
        // allocate and zero a page in the client's stat (measured: a stat
        // of a clean DEFAULT file 2.9 -> 4.6 us with the pages left to fault).
        for page in (0..seg.len()).step_by(4096) {
            // SAFETY: page < seg.len(): inside the mapping; a plain byte
            // store of the zero it already holds; no reader exists yet.
            unsafe { std::ptr::write_volatile(seg.as_ptr().add(page), 0u8) };
        }
        // SAFETY: fresh zero-filled segment of at least HEADER_BYTES,
        // page-aligned; no client maps it before the hello names it.
        unsafe {
            let h = &mut *(seg.as_ptr() as *mut StatHeader);
            h.magic = STAT_INDEX_MAGIC;
            h.version = STAT_INDEX_VERSION;
            h.sets = sets;
        }
        let n = sets as usize * WAYS;
        Ok(StatWriter {
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

    /// Entries naming a record now.
    pub fn published(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_published(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// The ids published now (for audits).
    pub fn published_ids(&self) -> Vec<u64> {
        self.slot_of.keys().copied().collect()
    }

    fn entry(&self, i: u32) -> &StatEntry {
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

    /// Entry for record `a.id` under `path`. Returns false when the path is
    /// empty or too long (nothing published). An entry of another record
    /// may be evicted. A record has one entry: publishing it under another
    /// path replaces the old one.
    pub fn publish(&mut self, path: &[u8], a: &FileAttr) -> bool {
        if path.is_empty() || path.len() > PATH_MAX_BYTES || a.id == u64::MAX {
            return false;
        }
        let set = set_of(path, self.sets);
        // One entry per path: another record's entry of this path (which
        // the daemon forgets before a name moves; this is the defence in
        // depth) goes first, so a reader can never pick an older one.
        for w in 0..WAYS {
            let other = self.owner[set * WAYS + w];
            if other != u64::MAX && other != a.id && self.holds_path(set * WAYS + w, path) {
                self.forget(other);
            }
        }
        let i = match self.slot_of.get(&a.id) {
            Some(&i) if i as usize / WAYS == set => i,
            other => {
                if other.is_some() {
                    self.forget(a.id);
                }
                let base = set * WAYS;
                let free = (0..WAYS).find(|w| self.owner[base + w] == u64::MAX);
                let i = match free {
                    Some(w) => (base + w) as u32,
                    None => {
                        let w = self.victim[set] as usize % WAYS;
                        self.victim[set] = ((w + 1) % WAYS) as u8;
                        let i = (base + w) as u32;
                        let old = self.owner[i as usize];
                        self.forget(old);
                        self.evicted_total += 1;
                        i
                    }
                };
                self.slot_of.insert(a.id, i);
                self.owner[i as usize] = a.id;
                i
            }
        };
        let seq = self.begin(i);
        let e = self.entry(i);
        e.id.store(a.id, Ordering::Relaxed);
        e.size.store(a.size, Ordering::Relaxed);
        e.dest_size.store(a.dest_size, Ordering::Relaxed);
        e.page_bytes.store(a.page_bytes, Ordering::Relaxed);
        e.mtime_ns.store(a.mtime_ns, Ordering::Relaxed);
        e.ctime_ns.store(a.ctime_ns, Ordering::Relaxed);
        e.atime_ns.store(a.atime_ns, Ordering::Relaxed);
        e.mode.store(a.mode, Ordering::Relaxed);
        e.uid.store(a.uid, Ordering::Relaxed);
        e.gid.store(a.gid, Ordering::Relaxed);
        e.nlink.store(a.nlink, Ordering::Relaxed);
        let dirty = if a.dirty { FLAG_DIRTY } else { 0 };
        e.flags.store(a.persist.as_u32() | dirty, Ordering::Relaxed);
        let words = path.len().div_ceil(8);
        for (k, dst) in e.path.iter().enumerate() {
            // words past the path are zeroed: readers compare only the
            // path's own words, and a shorter path must not match stale tails
            dst.store(
                if k < words { path_word(path, k) } else { 0 },
                Ordering::Relaxed,
            );
        }
        e.path_len.store(path.len() as u32, Ordering::Relaxed);
        self.end(i, seq);
        tags_of(&self.seg, self.sets)[i as usize].store(hash_of(path) | 1, Ordering::Release);
        header_of(&self.seg)
            .published
            .store(self.slot_of.len() as u64, Ordering::Release);
        self.published_total += 1;
        true
    }

    fn holds_path(&self, i: usize, path: &[u8]) -> bool {
        let e = self.entry(i as u32);
        e.path_len.load(Ordering::Relaxed) as usize == path.len()
            && (0..path.len().div_ceil(8))
                .all(|k| e.path[k].load(Ordering::Relaxed) == path_word(path, k))
    }

    /// Clears record `id`'s entry, if it has one, before the record changes.
    #[inline]
    pub fn forget(&mut self, id: u64) {
        if self.slot_of.is_empty() {
            return;
        }
        let Some(i) = self.slot_of.remove(&id) else {
            return;
        };
        tags_of(&self.seg, self.sets)[i as usize].store(0, Ordering::Relaxed);
        header_of(&self.seg)
            .published
            .store(self.slot_of.len() as u64, Ordering::Relaxed);
        let seq = self.begin(i);
        self.entry(i).path_len.store(0, Ordering::Relaxed);
        self.end(i, seq);
        self.owner[i as usize] = u64::MAX;
        self.forgotten_total += 1;
    }

    /// What entry `id` says now (for the daemon's audits), with its path.
    pub fn peek(&self, id: u64) -> Option<(Vec<u8>, FileAttr)> {
        let &i = self.slot_of.get(&id)?;
        let e = self.entry(i);
        let len = e.path_len.load(Ordering::Relaxed) as usize;
        let mut path = Vec::with_capacity(len);
        for k in 0..len.div_ceil(8) {
            path.extend_from_slice(&e.path[k].load(Ordering::Relaxed).to_le_bytes());
        }
        path.truncate(len);
        Some((path, attr_of(e)?))
    }
}

/// The attributes an entry holds (None: a `persist` no record has).
fn attr_of(e: &StatEntry) -> Option<FileAttr> {
    let flags = e.flags.load(Ordering::Relaxed);
    Some(FileAttr {
        id: e.id.load(Ordering::Relaxed),
        size: e.size.load(Ordering::Relaxed),
        mode: e.mode.load(Ordering::Relaxed),
        persist: Persist::from_u32(flags & 0xff)?,
        page_bytes: e.page_bytes.load(Ordering::Relaxed),
        mtime_ns: e.mtime_ns.load(Ordering::Relaxed),
        ctime_ns: e.ctime_ns.load(Ordering::Relaxed),
        atime_ns: e.atime_ns.load(Ordering::Relaxed),
        uid: e.uid.load(Ordering::Relaxed),
        gid: e.gid.load(Ordering::Relaxed),
        dirty: flags & FLAG_DIRTY != 0,
        dest_size: e.dest_size.load(Ordering::Relaxed),
        nlink: e.nlink.load(Ordering::Relaxed),
        direct: false,
        holders: 0,
    })
}

/// A client's side: maps the daemon's stat index (reads only).
pub struct StatReader {
    seg: ShmSegment,
    sets: u32,
}

impl StatReader {
    /// Maps segment `name` and checks its header.
    pub fn open(name: &str) -> std::io::Result<StatReader> {
        let seg = ShmSegment::open(name)?;
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
        if seg.len() < HEADER_BYTES {
            return Err(bad("stat index segment shorter than its header"));
        }
        // SAFETY: at least HEADER_BYTES mapped (checked), page-aligned;
        // plain integers valid for any bits; read once here.
        let (magic, version, sets) = unsafe {
            let h = &*(seg.as_ptr() as *const StatHeader);
            (h.magic, h.version, h.sets)
        };
        if magic != STAT_INDEX_MAGIC || version != STAT_INDEX_VERSION {
            return Err(bad("stat index segment header does not match"));
        }
        if sets == 0 || sets as u64 * WAYS as u64 > ENTRIES_MAX as u64 + WAYS as u64 {
            return Err(bad("stat index segment announces an impossible size"));
        }
        if seg.len() < segment_bytes(sets) {
            return Err(bad("stat index segment smaller than its header says"));
        }
        Ok(StatReader { seg, sets })
    }

    /// The attributes published for `path`, if a stable entry holds them.
    /// `None`: ask the daemon.
    pub fn lookup(&self, path: &[u8]) -> Option<FileAttr> {
        if path.is_empty() || path.len() > PATH_MAX_BYTES {
            return None;
        }
        if header_of(&self.seg).published.load(Ordering::Acquire) == 0 {
            return None;
        }
        let words = path.len().div_ceil(8);
        let hash = hash_of(path);
        let set = (hash % self.sets as u64) as usize;
        let tags = &tags_of(&self.seg, self.sets)[set * WAYS..(set + 1) * WAYS];
        let entries = entries_of(&self.seg, self.sets);
        for (e, tag) in entries[set * WAYS..(set + 1) * WAYS].iter().zip(tags) {
            if tag.load(Ordering::Acquire) != hash | 1 {
                continue;
            }
            let s1 = e.seq.load(Ordering::Acquire);
            if !s1.is_multiple_of(2) || e.path_len.load(Ordering::Relaxed) as usize != path.len() {
                continue;
            }
            if (0..words).any(|k| e.path[k].load(Ordering::Relaxed) != path_word(path, k)) {
                continue;
            }
            let a = attr_of(e);
            fence(Ordering::Acquire);
            if e.seq.load(Ordering::Relaxed) != s1 {
                return None;
            }
            return a;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(id: u64, size: u64) -> FileAttr {
        FileAttr {
            id,
            size,
            mode: 0o640,
            persist: Persist::Scratch,
            page_bytes: 1 << 20,
            mtime_ns: 11,
            ctime_ns: 12,
            atime_ns: 13,
            uid: 1000,
            gid: 100,
            dirty: true,
            dest_size: 7,
            nlink: 1,
            direct: false,
            holders: 0,
        }
    }

    fn pair(tag: &str, entries: u32) -> (StatWriter, StatReader) {
        let name = format!("strata-test-statix-{}-{tag}", std::process::id());
        let w = StatWriter::create(&name, entries).unwrap();
        let r = StatReader::open(&name).unwrap();
        // both are mapped: the name goes (nothing left in /dev/shm)
        ShmSegment::unlink(&name).unwrap();
        (w, r)
    }

    #[test]
    fn a_published_record_is_read_back_whole_and_forgotten_on_change() {
        let (mut w, r) = pair("roundtrip", 64);
        let p = b"/scratch/run/file.mdtest.0.17";
        assert!(w.publish(p, &attr(5, 4096)));
        assert_eq!(r.lookup(p), Some(attr(5, 4096)));
        assert_eq!(w.peek(5), Some((p.to_vec(), attr(5, 4096))));
        // a prefix, a longer name and another name are not it
        assert_eq!(r.lookup(b"/scratch/run/file.mdtest.0.1"), None);
        assert_eq!(r.lookup(b"/scratch/run/file.mdtest.0.170"), None);
        w.forget(5);
        assert_eq!(r.lookup(p), None);
        assert!(!w.is_published(5));
    }

    #[test]
    fn a_record_has_one_entry_and_a_new_path_replaces_the_old() {
        let (mut w, r) = pair("rename", 64);
        assert!(w.publish(b"/a/old-name-that-is-long", &attr(9, 1)));
        assert!(w.publish(b"/a/new", &attr(9, 2)));
        assert_eq!(r.lookup(b"/a/old-name-that-is-long"), None);
        assert_eq!(r.lookup(b"/a/new"), Some(attr(9, 2)));
        assert_eq!(w.published(), 1);
    }

    #[test]
    fn a_full_set_evicts_and_every_entry_found_is_its_own() {
        // one set of 4 ways: 40 records compete for it
        let (mut w, r) = pair("evict", 4);
        for id in 0..40u64 {
            let p = format!("/d/f{id}");
            assert!(w.publish(p.as_bytes(), &attr(id, id * 10)));
        }
        assert_eq!(w.published(), WAYS);
        let mut found = 0;
        for id in 0..40u64 {
            if let Some(a) = r.lookup(format!("/d/f{id}").as_bytes()) {
                assert_eq!(a, attr(id, id * 10));
                found += 1;
            }
        }
        assert_eq!(found, WAYS);
        assert!(w.evicted_total >= 36);
    }

    #[test]
    fn paths_too_long_or_empty_are_never_published() {
        let (mut w, r) = pair("long", 64);
        let long = vec![b'x'; PATH_MAX_BYTES + 1];
        assert!(!w.publish(&long, &attr(1, 1)));
        assert!(!w.publish(b"", &attr(2, 1)));
        assert_eq!(r.lookup(&long), None);
        let max = vec![b'y'; PATH_MAX_BYTES];
        assert!(w.publish(&max, &attr(3, 1)));
        assert_eq!(r.lookup(&max), Some(attr(3, 1)));
    }

    #[test]
    fn a_reader_racing_the_writer_sees_only_whole_entries() {
        // The writer republishes one path with size == mtime == id pairs;
        // a reader thread must never see a mix of two versions.
        let (mut w, r) = pair("race", 64);
        let p = b"/race/one";
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let reader = std::thread::spawn(move || {
            let mut seen = 0u64;
            for _ in 0..2_000_000u32 {
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(a) = r.lookup(p) {
                    assert_eq!(a.size, a.mtime_ns, "torn entry");
                    assert_eq!(a.size, a.dest_size, "torn entry");
                    seen += 1;
                }
            }
            seen
        });
        for v in 0..200_000u64 {
            let mut a = attr(1 + v % 3, v);
            a.mtime_ns = v;
            a.dest_size = v;
            w.publish(p, &a);
            if v % 7 == 0 {
                w.forget(1 + v % 3);
            }
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// By hand: `cargo test --release -p strata-transport-shm --lib
    /// publish_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn publish_cost() {
        let name = format!("strata-test-statix-{}-cost", std::process::id());
        let mut w = StatWriter::create(&name, 32768).unwrap();
        ShmSegment::unlink(&name).unwrap();
        let paths: Vec<String> = (0..4000)
            .map(|i| {
                format!(
                    "/tmp/strata-bench-abcdef/md/d{}/file.mdtest.{}.{i}",
                    i % 4,
                    i % 4
                )
            })
            .collect();
        let a = FileAttr {
            id: 0,
            size: 4096,
            mode: 0o644,
            persist: Persist::Default,
            page_bytes: 1 << 20,
            mtime_ns: 1,
            ctime_ns: 1,
            atime_ns: 1,
            uid: 0,
            gid: 0,
            dirty: true,
            dest_size: 0,
            nlink: 1,
            direct: false,
            holders: 0,
        };
        for round in 0..3 {
            let t = std::time::Instant::now();
            for (i, p) in paths.iter().enumerate() {
                w.publish(p.as_bytes(), &FileAttr { id: i as u64, ..a });
            }
            let pub_ns = t.elapsed().as_nanos() as f64 / paths.len() as f64;
            let t = std::time::Instant::now();
            for i in 0..paths.len() {
                w.forget(i as u64);
            }
            let forget_ns = t.elapsed().as_nanos() as f64 / paths.len() as f64;
            eprintln!("round {round}: publish {pub_ns:.0} ns, forget {forget_ns:.0} ns");
        }
    }
}
