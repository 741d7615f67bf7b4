//! The write-ahead **journal**: metadata of data that lives on non-volatile
//! tiers, so that a daemon killed at any moment (or a machine that loses
//! its unsynced state) comes back with it.
//!
//! What is journaled (decided by `jpoller.rs`, the poller side):
//! * native buckets (name, tags) and their blobs whose bytes are all on
//!   non-volatile tiers;
//! * DEFAULT files that need a flush and WORKFLOW files (their file record:
//!   size, mode, owner, times, page size, destination state) and their page
//!   blobs on non-volatile tiers — dirty pages only for DEFAULT files (clean
//!   pages are at the destination already).
//!
//! **Format.** `strata.journal` in the first non-volatile tier's directory:
//! the 8-byte magic `STRJNL01`, then frames
//! `[magic u16][kind u8][flags u8][len u32][crc32 u32][payload len bytes]`,
//! the CRC over bytes 2..8 of the header and the payload. Records are
//! *states*, not deltas (`BucketSet`, `BlobSet` carry everything), so
//! replay is a fold keyed by name where the last record wins, and a torn
//! tail or a corrupt record costs only the records it covers.
//!
//! **Bytes inside records.** A `BlobData` record carries an fsync'ed page's
//! data (its ranges, bytes and sealed CRC) while the page stays in RAM: one
//! journal write and one `fdatasync` make the fsync durable. It is live
//! until a later record of its key supersedes it (the page clean at its
//! destination, dropped, renamed, or moved to a tier whose bytes are known
//! durable); replay writes its bytes to a non-volatile tier and fdatasyncs
//! that before the journal is rewritten. The fold counts their live bytes
//! (`State::inline_bytes`), which bounds compaction's work.
//!
//! **Threads.** The poller hands batches of [`Record`]s to the journal
//! thread ([`Writer`]), which encodes and appends them, `fdatasync`s when a
//! waiter asks or `journal.sync_interval` passed, publishes the synced
//! batch sequence number, and compacts (rewrites the live records into a
//! new file, fsync, rename) when the file is larger than
//! `journal.compact_min` and twice the live records.
//!
//! **Invariants.** A record is written only after the bytes it points to
//! were written to the tier file (the poller writes tier bytes before it
//! emits; the stash thread fdatasyncs before it reports). Space freed from
//! a non-volatile tier is not reused before the batch recording the free
//! is durable (the poller's quarantine). Replay never applies a record
//! whose CRC fails; it reports it and continues with the next valid frame.
//!
//! ## The journal's three files
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! The **journal** is three files. `journal.rs` is the format and the journal thread: frames
//! `[magic u16][kind u8][flags u8][len u32][crc32 u32][payload]` after an 8-byte file magic;
//! records are *states* (`Tier`, `BucketSet` with the file image, `BucketDrop`, `BlobSet`
//! with size, dirty flag, sealed CRC and extents, `BlobDrop`), so replay is a fold keyed by
//! name where the last record wins; the thread appends batches, fdatasyncs when a waiter
//! asks or `journal.sync_interval` passed (group commit), publishes the synced batch number,
//! and compacts (live records → tmp file, fdatasync, rename, fsync of the directory) in the
//! background. `jpoller.rs` is the poller's side: `MetaStore` records which blobs and buckets
//! changed (`touched`, one set insert per mutation, only when a journal is kept); at most
//! every 10 ms (at once when an fsync waits) the poller turns them into records,
//! using a *shadow* (id → key last journaled) to drop the old key of a blob that moved to
//! RAM, was renamed, deleted, or whose bucket was renamed. Journaled: native buckets and
//! their blobs wholly on non-volatile tiers; DEFAULT files needing a flush (dirty pages only)
//! and WORKFLOW files with pages on non-volatile tiers or a journal sync. Never: SCRATCH,
//! orphans, RAM. `jreplay.rs` applies the fold at start, verifying each blob: known tier
//! (matched by path), non-volatile, block-aligned, inside the tier file, no overlap (the
//! allocator's `reserve`), and the sealed CRC of fsync'ed pages (a mismatch is reported and
//! the bytes kept — they are the newest the application wrote); DEFAULT files come back
//! with their dirty pages only and rejoin the flusher's dirty set. Corrupt ranges are
//! skipped to the next valid frame, reported in `status` and logged, and a copy of the
//! damaged journal is kept; a torn last record is expected after a crash and ignored.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_meta::pagemap::PAGE_MAP_RUNS_MAX;
use strata_meta::Extent;

pub const FILE_MAGIC: &[u8; 8] = b"STRJNL01";
pub const FRAME_MAGIC: u16 = 0x5A17;
pub const HEADER_BYTES: usize = 12;
/// Largest payload of one metadata record (a blob with many extents and long names).
pub const RECORD_BYTES_MAX: usize = 1 << 20;
/// Largest data carried by one `BlobData` record (a page of the largest size).
pub const DATA_BYTES_MAX: usize = 1 << strata_meta::PAGE_SHIFT_MAX;
/// Largest frame payload: a `BlobData` record of the largest page.
pub const FRAME_BYTES_MAX: usize = DATA_BYTES_MAX + RECORD_BYTES_MAX;
/// Journal file name inside the tier directory.
pub const JOURNAL_NAME: &str = "strata.journal";
/// Corrupt ranges remembered for the replay report.
pub const REPORT_MESSAGES_MAX: usize = 64;

const K_TIER: u8 = 1;
const K_BUCKET_SET: u8 = 2;
const K_BUCKET_DROP: u8 = 3;
const K_BLOB_SET: u8 = 4;
const K_BLOB_DROP: u8 = 5;
const K_BLOB_DATA: u8 = 6;

/// The journaled image of a file record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileImage {
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub persist: u32,
    pub page_bytes: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub atime_ns: u64,
    pub dest_size: u64,
    pub dest_exists: bool,
    pub trunc_min: Option<u64>,
    /// A WORKFLOW file marked for stage-out (flushed like DEFAULT).
    pub stage_out: bool,
    /// The size at the file's last journal sync (fsync): replay never goes
    /// below it, nor above the larger of it and the restored pages.
    pub synced_size: u64,
    /// The record's id on this node (its low bits; 0 = not recorded, a
    /// journal written before ids were kept). Replay gives the file the
    /// same id: other nodes hold its pages under it (issue 15).
    pub id_local: u64,
    /// Pages other nodes hold and have not written to the destination
    /// (the owner's page map, unflushed runs only; at most
    /// `PAGE_MAP_RUNS_MAX`).
    pub held: Vec<HeldRun>,
}

/// Pages `first..=last` of a file, held by node `holder` at the owner's
/// generation `gen`, not yet at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldRun {
    pub holder: u32,
    pub first: u64,
    pub last: u64,
    pub gen: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Tier `index` of the writing daemon is the directory `path`.
    Tier {
        index: u32,
        path: String,
    },
    BucketSet {
        name: String,
        tags: Vec<(String, String)>,
        file: Option<FileImage>,
    },
    /// The bucket and every blob recorded under its name are gone.
    BucketDrop {
        name: String,
    },
    BlobSet {
        bucket: String,
        name: String,
        size: u64,
        dirty: bool,
        crc: Option<u32>,
        extents: Vec<Extent>,
    },
    BlobDrop {
        bucket: String,
        name: String,
    },
    /// A blob whose bytes ride inside the record (an fsync'ed page kept in
    /// RAM: one journal write and one `fdatasync` make it durable). Its
    /// data ranges `segs` (blob offset, length; ordered, disjoint, below
    /// `size`) hold `data` back to back; the rest of `[0, size)` is holes.
    /// `crc` is the sealed CRC of `data`. Replay writes the bytes to a
    /// non-volatile tier.
    BlobData {
        bucket: String,
        name: String,
        size: u64,
        crc: u32,
        segs: Vec<(u64, u64)>,
        data: Arc<Vec<u8>>,
    },
}

// ---- encoding -------------------------------------------------------------

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or("record payload too short")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        if n > RECORD_BYTES_MAX {
            return Err(format!("string of {n} bytes"));
        }
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "string not UTF-8".to_string())
    }
    fn done(&self) -> Result<(), String> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(format!(
                "{} trailing bytes in record",
                self.b.len() - self.at
            ))
        }
    }
}

impl Record {
    /// Appends this record as one frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut e = Enc(Vec::with_capacity(64));
        let kind = match self {
            Record::Tier { index, path } => {
                e.u32(*index);
                e.str(path);
                K_TIER
            }
            Record::BucketSet { name, tags, file } => {
                e.str(name);
                e.u32(tags.len() as u32);
                for (k, v) in tags {
                    e.str(k);
                    e.str(v);
                }
                match file {
                    None => e.u8(0),
                    Some(f) => {
                        e.u8(1);
                        e.u64(f.size);
                        e.u32(f.mode);
                        e.u32(f.uid);
                        e.u32(f.gid);
                        e.u32(f.persist);
                        e.u64(f.page_bytes);
                        e.u64(f.mtime_ns);
                        e.u64(f.ctime_ns);
                        e.u64(f.atime_ns);
                        e.u64(f.dest_size);
                        e.u8(f.dest_exists as u8);
                        match f.trunc_min {
                            None => e.u8(0),
                            Some(t) => {
                                e.u8(1);
                                e.u64(t);
                            }
                        }
                        e.u8(f.stage_out as u8);
                        e.u64(f.synced_size);
                        // Since issue 15 (optional on decode: older
                        // journals end here).
                        assert!(
                            f.held.len() <= PAGE_MAP_RUNS_MAX,
                            "{} held runs",
                            f.held.len()
                        );
                        e.u64(f.id_local);
                        e.u32(f.held.len() as u32);
                        for r in &f.held {
                            assert!(r.first <= r.last, "a held run is not empty");
                            e.u32(r.holder);
                            e.u64(r.first);
                            e.u64(r.last);
                            e.u64(r.gen);
                        }
                    }
                }
                K_BUCKET_SET
            }
            Record::BucketDrop { name } => {
                e.str(name);
                K_BUCKET_DROP
            }
            Record::BlobSet {
                bucket,
                name,
                size,
                dirty,
                crc,
                extents,
            } => {
                e.str(bucket);
                e.str(name);
                e.u64(*size);
                e.u8(*dirty as u8 | (crc.is_some() as u8) << 1);
                e.u32(crc.unwrap_or(0));
                e.u32(extents.len() as u32);
                for x in extents {
                    e.u64(x.logical_off);
                    e.u64(x.len);
                    e.u32(x.tier);
                    e.u64(x.phys_off);
                }
                K_BLOB_SET
            }
            Record::BlobDrop { bucket, name } => {
                e.str(bucket);
                e.str(name);
                K_BLOB_DROP
            }
            Record::BlobData {
                bucket,
                name,
                size,
                crc,
                segs,
                data,
            } => {
                assert!(data.len() <= DATA_BYTES_MAX, "{} inline bytes", data.len());
                assert_eq!(
                    segs.iter().map(|s| s.1).sum::<u64>(),
                    data.len() as u64,
                    "inline ranges cover the data"
                );
                e.0.reserve(data.len() + 64 + 16 * segs.len());
                e.str(bucket);
                e.str(name);
                e.u64(*size);
                e.u32(*crc);
                e.u32(segs.len() as u32);
                for (off, len) in segs {
                    e.u64(*off);
                    e.u64(*len);
                }
                e.0.extend_from_slice(data);
                K_BLOB_DATA
            }
        };
        let payload = e.0;
        let max = if kind == K_BLOB_DATA {
            FRAME_BYTES_MAX
        } else {
            RECORD_BYTES_MAX
        };
        assert!(
            payload.len() <= max,
            "journal record of {} bytes",
            payload.len()
        );
        let start = out.len();
        out.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&out[start + 2..start + 8]);
        h.update(&payload);
        out.extend_from_slice(&h.finalize().to_le_bytes());
        out.extend_from_slice(&payload);
    }

    fn decode(kind: u8, payload: &[u8]) -> Result<Record, String> {
        let mut d = Dec { b: payload, at: 0 };
        let r = match kind {
            K_TIER => Record::Tier {
                index: d.u32()?,
                path: d.str()?,
            },
            K_BUCKET_SET => {
                let name = d.str()?;
                let n = d.u32()? as usize;
                if n > 4096 {
                    return Err(format!("{n} tags"));
                }
                let mut tags = Vec::with_capacity(n);
                for _ in 0..n {
                    tags.push((d.str()?, d.str()?));
                }
                let file = match d.u8()? {
                    0 => None,
                    1 => Some(FileImage {
                        size: d.u64()?,
                        mode: d.u32()?,
                        uid: d.u32()?,
                        gid: d.u32()?,
                        persist: d.u32()?,
                        page_bytes: d.u64()?,
                        mtime_ns: d.u64()?,
                        ctime_ns: d.u64()?,
                        atime_ns: d.u64()?,
                        dest_size: d.u64()?,
                        dest_exists: d.u8()? != 0,
                        trunc_min: match d.u8()? {
                            0 => None,
                            _ => Some(d.u64()?),
                        },
                        stage_out: d.u8()? != 0,
                        synced_size: d.u64()?,
                        id_local: 0,
                        held: Vec::new(),
                    }),
                    x => return Err(format!("bad file flag {x}")),
                };
                let mut file = file;
                if let Some(f) = file.as_mut().filter(|_| d.at < d.b.len()) {
                    f.id_local = d.u64()?;
                    if f.id_local > strata_meta::LOCAL_MASK {
                        return Err(format!("file id {:#x} out of range", f.id_local));
                    }
                    let n = d.u32()? as usize;
                    if n > PAGE_MAP_RUNS_MAX {
                        return Err(format!("{n} held runs"));
                    }
                    f.held.reserve(n);
                    for _ in 0..n {
                        let r = HeldRun {
                            holder: d.u32()?,
                            first: d.u64()?,
                            last: d.u64()?,
                            gen: d.u64()?,
                        };
                        if r.first > r.last {
                            return Err(format!("held run {}..{} reversed", r.first, r.last));
                        }
                        f.held.push(r);
                    }
                }
                Record::BucketSet { name, tags, file }
            }
            K_BUCKET_DROP => Record::BucketDrop { name: d.str()? },
            K_BLOB_SET => {
                let bucket = d.str()?;
                let name = d.str()?;
                let size = d.u64()?;
                let flags = d.u8()?;
                let crc = d.u32()?;
                let n = d.u32()? as usize;
                if n > RECORD_BYTES_MAX / 28 {
                    return Err(format!("{n} extents"));
                }
                let mut extents = Vec::with_capacity(n);
                for _ in 0..n {
                    extents.push(Extent {
                        logical_off: d.u64()?,
                        len: d.u64()?,
                        tier: d.u32()?,
                        phys_off: d.u64()?,
                    });
                }
                Record::BlobSet {
                    bucket,
                    name,
                    size,
                    dirty: flags & 1 != 0,
                    crc: (flags & 2 != 0).then_some(crc),
                    extents,
                }
            }
            K_BLOB_DROP => Record::BlobDrop {
                bucket: d.str()?,
                name: d.str()?,
            },
            K_BLOB_DATA => {
                let bucket = d.str()?;
                let name = d.str()?;
                let size = d.u64()?;
                let crc = d.u32()?;
                let n = d.u32()? as usize;
                if n > RECORD_BYTES_MAX / 16 {
                    return Err(format!("{n} inline ranges"));
                }
                let mut segs = Vec::with_capacity(n);
                let (mut at, mut total) = (0u64, 0u64);
                for _ in 0..n {
                    let (off, len) = (d.u64()?, d.u64()?);
                    if len == 0 || off < at || off.checked_add(len).is_none_or(|e| e > size) {
                        return Err(format!(
                            "inline range {off}+{len} out of order or past {size}"
                        ));
                    }
                    at = off + len;
                    total += len;
                    segs.push((off, len));
                }
                if total as usize != d.b.len() - d.at || total as usize > DATA_BYTES_MAX {
                    return Err(format!(
                        "inline ranges cover {total} bytes, the record carries {}",
                        d.b.len() - d.at
                    ));
                }
                let data = Arc::new(d.take(total as usize)?.to_vec());
                Record::BlobData {
                    bucket,
                    name,
                    size,
                    crc,
                    segs,
                    data,
                }
            }
            k => return Err(format!("unknown record kind {k}")),
        };
        d.done()?;
        Ok(r)
    }
}

/// Parses one frame at the start of `b`: Ok((record, frame length)), or why not.
fn parse_frame(b: &[u8]) -> Result<(Record, usize), String> {
    if b.len() < HEADER_BYTES {
        return Err("truncated header".into());
    }
    if u16::from_le_bytes([b[0], b[1]]) != FRAME_MAGIC {
        return Err("bad frame magic".into());
    }
    let kind = b[2];
    let len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
    let max = if kind == K_BLOB_DATA {
        FRAME_BYTES_MAX
    } else {
        RECORD_BYTES_MAX
    };
    if len > max {
        return Err(format!("frame length {len} too large"));
    }
    if b.len() < HEADER_BYTES + len {
        return Err("truncated payload".into());
    }
    let want = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let payload = &b[HEADER_BYTES..HEADER_BYTES + len];
    let mut h = crc32fast::Hasher::new();
    h.update(&b[2..8]);
    h.update(payload);
    if h.finalize() != want {
        return Err("checksum mismatch".into());
    }
    Ok((Record::decode(kind, payload)?, HEADER_BYTES + len))
}

// ---- the fold -------------------------------------------------------------

/// The live state a journal describes: the last record per key.
#[derive(Debug, Default, Clone)]
pub struct State {
    pub tiers: BTreeMap<u32, String>,
    pub buckets: BTreeMap<String, Record>,
    pub blobs: BTreeMap<(String, String), Record>,
    /// Bytes carried by the live `BlobData` records.
    pub inline_bytes: u64,
}

fn inline_len(r: Option<&Record>) -> u64 {
    match r {
        Some(Record::BlobData { data, .. }) => data.len() as u64,
        _ => 0,
    }
}

impl State {
    fn blob_insert(&mut self, key: (String, String), r: Record) {
        self.inline_bytes += inline_len(Some(&r));
        let old = self.blobs.insert(key, r);
        self.inline_bytes -= inline_len(old.as_ref());
    }

    fn blob_remove(&mut self, key: &(String, String)) {
        let old = self.blobs.remove(key);
        self.inline_bytes -= inline_len(old.as_ref());
    }

    pub fn apply(&mut self, r: Record) {
        match r {
            Record::Tier { index, ref path } => {
                self.tiers.insert(index, path.clone());
            }
            Record::BucketSet { ref name, .. } => {
                self.buckets.insert(name.clone(), r);
            }
            Record::BucketDrop { name } => {
                self.buckets.remove(&name);
                let keys: Vec<(String, String)> =
                    self.blobs_of(&name).map(|(k, _)| k.clone()).collect();
                for k in keys {
                    self.blob_remove(&k);
                }
            }
            Record::BlobSet {
                ref bucket,
                ref name,
                ..
            }
            | Record::BlobData {
                ref bucket,
                ref name,
                ..
            } => {
                self.blob_insert((bucket.clone(), name.clone()), r);
            }
            Record::BlobDrop { bucket, name } => {
                self.blob_remove(&(bucket, name));
            }
        }
    }

    /// The blob records under bucket name `name`.
    pub fn blobs_of<'a>(
        &'a self,
        name: &str,
    ) -> impl Iterator<Item = (&'a (String, String), &'a Record)> + 'a {
        let lo = (name.to_string(), String::new());
        let hi = (format!("{name}\0"), String::new());
        self.blobs.range(lo..hi)
    }

    pub fn records(&self) -> usize {
        self.tiers.len() + self.buckets.len() + self.blobs.len()
    }

    /// Every live record, in an order replay accepts (tiers, buckets, blobs).
    pub fn encode_all(&self, out: &mut Vec<u8>) {
        for (i, p) in &self.tiers {
            Record::Tier {
                index: *i,
                path: p.clone(),
            }
            .encode(out);
        }
        for r in self.buckets.values() {
            r.encode(out);
        }
        for r in self.blobs.values() {
            r.encode(out);
        }
    }
}

// ---- reading --------------------------------------------------------------

/// What reading a journal file found.
#[derive(Debug, Default)]
pub struct Scan {
    pub state: State,
    pub records: u64,
    pub bytes: u64,
    /// Byte ranges skipped because they held no valid frame, with the
    /// reason; the last one may be a torn tail (`torn_tail_bytes`).
    pub corrupt: Vec<(u64, u64, String)>,
    pub torn_tail_bytes: u64,
}

/// Reads and folds the journal at `path`. A missing file is an empty scan.
pub fn read(path: &Path) -> std::io::Result<Scan> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(e),
    };
    Ok(scan_bytes(&data))
}

pub fn scan_bytes(data: &[u8]) -> Scan {
    let mut s = Scan {
        bytes: data.len() as u64,
        ..Scan::default()
    };
    if data.is_empty() {
        return s;
    }
    let mut at = if data.len() >= FILE_MAGIC.len() && &data[..FILE_MAGIC.len()] == FILE_MAGIC {
        FILE_MAGIC.len()
    } else {
        s.corrupt.push((
            0,
            FILE_MAGIC.len().min(data.len()) as u64,
            "bad file magic".into(),
        ));
        FILE_MAGIC.len().min(data.len())
    };
    // Bounded: every iteration advances `at` by at least one byte.
    while at < data.len() {
        match parse_frame(&data[at..]) {
            Ok((r, n)) => {
                s.state.apply(r);
                s.records += 1;
                at += n;
            }
            Err(why) => {
                // Look for the next valid frame; what lies between is lost.
                let mut next = None;
                let mut probe = at + 1;
                while probe + HEADER_BYTES <= data.len() {
                    if data[probe] == FRAME_MAGIC.to_le_bytes()[0]
                        && data[probe + 1] == FRAME_MAGIC.to_le_bytes()[1]
                        && parse_frame(&data[probe..]).is_ok()
                    {
                        next = Some(probe);
                        break;
                    }
                    probe += 1;
                }
                match next {
                    Some(n) => {
                        s.corrupt.push((at as u64, (n - at) as u64, why));
                        at = n;
                    }
                    None if why.starts_with("truncated") => {
                        // An append cut short by the crash: expected.
                        s.torn_tail_bytes = (data.len() - at) as u64;
                        break;
                    }
                    None => {
                        // A whole frame that fails its checksum is damage, not a torn append.
                        s.corrupt.push((at as u64, (data.len() - at) as u64, why));
                        break;
                    }
                }
            }
        }
    }
    s
}

// ---- the journal thread ---------------------------------------------------

/// State shared between the poller and the journal thread.
#[derive(Debug, Default)]
pub struct Shared {
    /// Sequence number of the last batch appended to the file.
    pub written_seq: AtomicU64,
    /// Sequence number of the last batch known durable (fdatasync'ed).
    pub synced_seq: AtomicU64,
    /// The poller wants batches up to this one synced soon.
    pub sync_wanted: AtomicU64,
    /// The journal could not be written: nothing new is durable through it.
    pub failed: AtomicBool,
    pub file_bytes: AtomicU64,
    pub live_records: AtomicU64,
    pub compactions: AtomicU64,
    pub syncs: AtomicU64,
    /// Duration of each `fdatasync` of the journal file.
    pub sync_latency: crate::latency::LatencyHistogram,
    pub last_error: Mutex<Option<String>>,
}

pub enum Msg {
    Batch {
        seq: u64,
        records: Vec<Record>,
    },
    /// Sync now if `sync_wanted` is ahead of `synced_seq`.
    Kick,
    Stop,
}

pub struct WriterSettings {
    pub sync_interval: Duration,
    pub compact_min_bytes: u64,
}

/// The journal thread's state.
pub struct Writer {
    path: PathBuf,
    file: File,
    state: State,
    file_bytes: u64,
    unsynced: bool,
    last_sync: Instant,
    settings: WriterSettings,
    shared: Arc<Shared>,
    wake: Arc<dyn Fn() + Send + Sync>,
}

fn fsync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Writes `state` as a fresh journal at `path` (tmp file, fdatasync, rename,
/// fsync of the directory): the switch is atomic.
pub fn rewrite(path: &Path, state: &State) -> std::io::Result<u64> {
    let tmp = path.with_extension("journal.tmp");
    let mut buf = Vec::with_capacity(64 + state.records() * 96 + state.inline_bytes as usize);
    buf.extend_from_slice(FILE_MAGIC);
    state.encode_all(&mut buf);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // A journal names every buffered path: readable by its owner only.
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        f.write_all(&buf)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    fsync_dir(path);
    Ok(buf.len() as u64)
}

impl Writer {
    /// Atomically replaces the journal at `path` by `state` and returns a
    /// writer appending to it.
    pub fn create(
        path: &Path,
        state: State,
        settings: WriterSettings,
        shared: Arc<Shared>,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<Writer> {
        let bytes = rewrite(path, &state)?;
        let file = OpenOptions::new().append(true).open(path)?;
        shared.file_bytes.store(bytes, Ordering::Relaxed);
        shared
            .live_records
            .store(state.records() as u64, Ordering::Relaxed);
        Ok(Writer {
            path: path.to_path_buf(),
            file,
            state,
            file_bytes: bytes,
            unsynced: false,
            last_sync: Instant::now(),
            settings,
            shared,
            wake,
        })
    }

    fn fail(&self, what: &str, e: &std::io::Error) {
        tracing::error!(path = %self.path.display(), "journal {what} failed: {e}; fsync falls back to the destination");
        self.shared.failed.store(true, Ordering::SeqCst);
        *self
            .shared
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(format!("{what}: {e}"));
    }

    fn append(&mut self, seq: u64, records: Vec<Record>) {
        let mut buf = Vec::with_capacity(records.len() * 96);
        for r in &records {
            r.encode(&mut buf);
        }
        if let Err(e) = self.file.write_all(&buf) {
            self.fail("append", &e);
            return;
        }
        self.file_bytes += buf.len() as u64;
        for r in records {
            self.state.apply(r);
        }
        self.unsynced = true;
        self.shared.written_seq.store(seq, Ordering::SeqCst);
        self.shared
            .file_bytes
            .store(self.file_bytes, Ordering::Relaxed);
        self.shared
            .live_records
            .store(self.state.records() as u64, Ordering::Relaxed);
    }

    fn sync(&mut self) {
        if !self.unsynced {
            return;
        }
        let t0 = Instant::now();
        if let Err(e) = self.file.sync_data() {
            self.fail("fdatasync", &e);
            return;
        }
        self.shared.sync_latency.observe(t0.elapsed());
        self.unsynced = false;
        self.last_sync = Instant::now();
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        let w = self.shared.written_seq.load(Ordering::SeqCst);
        self.shared.synced_seq.store(w, Ordering::SeqCst);
        (self.wake)();
    }

    fn maybe_compact(&mut self) {
        // Cheap test first: the live records are at least their inline bytes.
        if self.file_bytes < self.settings.compact_min_bytes
            || self.file_bytes < 2 * self.state.inline_bytes
        {
            return;
        }
        let mut live = Vec::new();
        live.extend_from_slice(FILE_MAGIC);
        self.state.encode_all(&mut live);
        if self.file_bytes < 2 * live.len() as u64 {
            return;
        }
        let started = Instant::now();
        match rewrite(&self.path, &self.state)
            .and_then(|n| Ok((n, OpenOptions::new().append(true).open(&self.path)?)))
        {
            Ok((n, f)) => {
                tracing::info!(
                    from = self.file_bytes,
                    to = n,
                    records = self.state.records(),
                    ms = started.elapsed().as_millis() as u64,
                    "journal compacted"
                );
                self.file = f;
                self.file_bytes = n;
                // The rewrite was synced: everything written so far is durable.
                self.unsynced = true;
                self.sync();
                self.shared.compactions.fetch_add(1, Ordering::Relaxed);
                self.shared.file_bytes.store(n, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "journal compaction failed (kept appending): {e}")
            }
        }
    }

    /// The journal thread's loop; returns after `Msg::Stop` (or when the
    /// poller is gone) with everything written synced.
    pub fn run(mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            let timeout = if self.unsynced {
                self.settings
                    .sync_interval
                    .saturating_sub(self.last_sync.elapsed())
            } else {
                Duration::from_secs(3600)
            };
            let mut stop = false;
            match rx.recv_timeout(timeout) {
                Ok(Msg::Batch { seq, records }) => self.append(seq, records),
                Ok(Msg::Kick) => {}
                Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => stop = true,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            // Batch what is queued (bounded per round).
            for _ in 0..1024 {
                match rx.try_recv() {
                    Ok(Msg::Batch { seq, records }) => self.append(seq, records),
                    Ok(Msg::Kick) => {}
                    Ok(Msg::Stop) => stop = true,
                    Err(_) => break,
                }
            }
            let wanted = self.shared.sync_wanted.load(Ordering::SeqCst)
                > self.shared.synced_seq.load(Ordering::SeqCst);
            if stop || wanted || self.last_sync.elapsed() >= self.settings.sync_interval {
                self.sync();
            }
            if stop {
                return;
            }
            self.maybe_compact();
        }
    }
}

/// A handle the poller keeps: the thread, its channel and shared state.
pub struct Handle {
    pub path: PathBuf,
    pub tx: mpsc::Sender<Msg>,
    pub shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Handle {
    pub fn start(writer: Writer) -> std::io::Result<Handle> {
        let (tx, rx) = mpsc::channel();
        let path = writer.path.clone();
        let shared = writer.shared.clone();
        let thread = std::thread::Builder::new()
            .name("strata-journal".into())
            .spawn(move || writer.run(rx))?;
        Ok(Handle {
            path,
            tx,
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the thread after it synced everything sent so far.
    pub fn stop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Reads the bytes of a file range (tests, verification helpers).
    pub fn file_len(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CRC32 of `len` bytes of tier `tier` at `off` (replay verification).
pub fn crc_of_tier_range(
    tier: &dyn strata_tier::TierBackend,
    off: u64,
    len: u64,
    crc: &mut crc32fast::Hasher,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut done = 0u64;
    // Bounded: 1 MiB per round.
    while done < len {
        let n = (len - done).min(1 << 20) as usize;
        buf.resize(n, 0);
        tier.read_at(off + done, &mut buf[..n])?;
        crc.update(&buf[..n]);
        done += n as u64;
    }
    Ok(())
}
