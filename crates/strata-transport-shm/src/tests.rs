//! Round trips of every request and reply through the slot encoding, and
//! decoding of arbitrary (hostile) slots.

use std::borrow::Cow;

use proptest::prelude::*;
use strata_proto::msg::{DataRef, FileRef, PutMode, Reply, Request, Through};
use strata_proto::types::*;

use crate::codec::*;
use crate::record::{Op, RequestRecord, ResponseRecord};

const ARG_BYTES: usize = 8192;
/// Number of `Request` variants `build` produces.
const REQUEST_KINDS: u8 = 44;

/// Owned material a request is built from (requests borrow names and data).
#[derive(Debug, Clone)]
struct Raw {
    kind: u8,
    a: u64,
    b: u64,
    c: u64,
    s1: String,
    s2: String,
    data: Vec<u8>,
    bits: [bool; 4],
    dest: DestInfo,
    score: f32,
}

fn dest_strategy() -> impl Strategy<Value = DestInfo> {
    (
        any::<bool>(),
        any::<u32>(),
        any::<[u64; 5]>(),
        any::<(u32, u32, u32)>(),
    )
        .prop_map(|(exists, mode, w, (uid, gid, nlink))| DestInfo {
            exists,
            mode,
            size: w[0],
            mtime_ns: w[1],
            atime_ns: w[2],
            uid,
            gid,
            ino: w[3],
            dev: w[4],
            nlink,
        })
}

fn raw_strategy() -> impl Strategy<Value = Raw> {
    (
        0..REQUEST_KINDS,
        any::<[u64; 3]>(),
        "[a-z/é0-9]{0,40}",
        "[a-z/.0-9]{0,40}",
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<[bool; 4]>(),
        dest_strategy(),
        -1.0e6f32..1.0e6,
    )
        .prop_map(|(kind, [a, b, c], s1, s2, data, bits, dest, score)| Raw {
            kind,
            a,
            b,
            c,
            s1,
            s2,
            data,
            bits,
            dest,
            score,
        })
}

fn persist_of(v: u64) -> Persist {
    Persist::from_u32((v % 3) as u32).unwrap()
}

fn data_of(r: &Raw) -> DataRef<'_> {
    if r.bits[3] {
        DataRef::Inline(&r.data)
    } else {
        DataRef::Lease { off: r.b, len: r.c }
    }
}

fn file_of(r: &Raw) -> FileRef<'_> {
    if r.bits[2] {
        FileRef::Path(&r.s1)
    } else {
        FileRef::Id(r.a.max(1))
    }
}

/// A valid request of kind `r.kind` (every variant is reachable).
fn build(r: &Raw) -> Request<'_> {
    let [x, y, z, w] = r.bits;
    let (a, b, c) = (r.a, r.b, r.c);
    let (s1, s2) = (r.s1.as_str(), r.s2.as_str());
    match r.kind {
        0 => Request::Nop,
        1 => Request::ChannelOpen,
        2 => Request::ChannelClose,
        3 => Request::BucketOpen {
            name: s1,
            create: x,
            excl: y,
        },
        4 => Request::BucketInfo { bucket: a },
        5 => Request::BucketList { cursor: b },
        6 => Request::BucketRename {
            bucket: a,
            new_name: s1,
        },
        7 => Request::BucketDestroy { bucket: a },
        8 => Request::BucketTag {
            bucket: a,
            key: s1,
            value: s2,
        },
        9 => Request::BucketTags { bucket: a },
        10 => Request::Lease { want_bytes: b },
        11 => Request::LeaseReturn,
        12 => Request::Put {
            bucket: a,
            name: s1,
            data: data_of(r),
            mode: match c % 3 {
                0 => PutMode::Replace { excl: x },
                1 => PutMode::At(b),
                _ => PutMode::Append,
            },
            policy: match a % 4 {
                0 => None,
                1 => Some(PolicyChoice::MinimizeIoTime),
                2 => Some(PolicyChoice::RoundRobin),
                _ => Some(PolicyChoice::Random),
            },
        },
        13 => Request::Get {
            bucket: a,
            name: s1,
            offset: b,
            len: c,
        },
        14 => Request::Delete {
            bucket: a,
            name: s1,
        },
        15 => Request::Rename {
            bucket: a,
            from: s1,
            to: s2,
            replace: x,
        },
        16 => Request::Stat {
            bucket: a,
            name: s1,
        },
        17 => Request::BlobList {
            bucket: a,
            after: (!s1.is_empty() && x).then_some(s1),
        },
        18 => Request::Score {
            bucket: a,
            name: s1,
            score: y.then_some(r.score),
            stationary: x,
        },
        19 => Request::Unpin,
        20 => Request::FileOpen {
            path: s1,
            open: OpenFile {
                create: x,
                excl: y,
                trunc: z,
                mode: (a & 0o7777) as u32,
                persist: persist_of(b),
                page_shift: (c % 256) as u32,
                dest: w.then_some(r.dest),
                dest_assumed: w && z,
                owner: x.then_some((b as u32, (b >> 32) as u32)),
            },
        },
        21 => Request::FileStat {
            file: file_of(r),
            dest: w.then_some(r.dest),
        },
        22 => Request::FileWrite {
            file: a,
            at: x.then_some(b),
            data: data_of(r),
        },
        23 => Request::FileRead {
            file: a,
            offset: b,
            len: c,
        },
        24 => Request::FileFill {
            file: a,
            page_off: b,
            data: data_of(r),
            keep: x,
            gen: c,
        },
        25 => Request::FileTruncate { file: a, size: b },
        26 => Request::FileUnlink { path: s1, claim: x },
        27 => Request::FileRename {
            from: s1,
            to: s2,
            dest_renamed: x,
            tree: y,
            unbacked_only: x && !y,
            unheld_only: y && !x,
        },
        28 => Request::FileSync {
            file: a,
            dest: x,
            direct: y,
        },
        29 => Request::FileSyncState {
            file: a,
            gen: b,
            dest: x,
        },
        30 => Request::FilePath { file: a },
        31 => Request::FileList { dir: s1, after: s2 },
        32 => Request::FileHold { file: a },
        33 => Request::FileClose { file: a },
        34 => Request::FileSetAttr {
            file: file_of(r),
            attr: SetAttr {
                mode: (x && !y).then_some((b & 0o7777) as u32),
                owner: y.then_some((b as u32, (b >> 32) as u32)),
                mtime_ns: z.then_some(c),
                atime_ns: w.then_some(a),
            },
        },
        35 => Request::FileIdle {
            path: s1,
            unlinked: y,
        },
        36 => Request::FileThrough {
            file: a,
            at: x.then_some(b),
            len: c,
            first: y,
        },
        37 => Request::FileThroughDone {
            file: a,
            offset: b,
            len: c,
            synced: x,
        },
        38 => Request::BucketFlush { bucket: a },
        42 => Request::DirectNotice,
        43 => Request::ReadAhead {
            file: a,
            offset: b,
            len: c,
            page: a ^ b,
        },
        40 => Request::FileRemoteLost {
            file: a,
            holder: (c >> 40) as u32,
            first_page: b,
            pages: c,
            gen: a ^ b,
        },
        39 => Request::FilePublish {
            file: a,
            holder: (b >> 40) as u32,
            first_page: b,
            pages: c,
            size: a ^ c,
        },
        _ => Request::FileLink {
            existing: s1,
            new: s2,
        },
    }
}

fn decode_slot<'a>(rec: &RequestRecord, arg: &'a [u8]) -> Result<Request<'a>, strata_proto::Errno> {
    let names = (rec.name_len + rec.name2_len) as usize;
    decode_request(rec, &arg[..names], &arg[names..])
}

fn attr_of_raw(r: &Raw) -> FileAttr {
    FileAttr {
        id: r.a,
        size: r.b,
        mode: (r.c & 0o7777) as u32,
        persist: persist_of(r.c >> 20),
        page_bytes: 1 << (r.a % 27),
        mtime_ns: r.b ^ 1,
        ctime_ns: r.c,
        atime_ns: r.a ^ r.b,
        uid: r.a as u32,
        gid: (r.a >> 32) as u32,
        dirty: r.bits[0],
        dest_size: r.c >> 3,
        nlink: (r.b >> 40) as u32,
        direct: r.bits[1],
        holders: (r.c >> 50) as u32,
    }
}

/// A valid reply to a request of `op`, from the same owned material.
fn reply_for(op: Op, r: &Raw) -> Reply<'static> {
    let [x, y, ..] = r.bits;
    let names: Vec<String> = [&r.s1, &r.s2]
        .into_iter()
        .filter(|s| !x || !s.is_empty())
        .cloned()
        .collect();
    let msg = || y.then(|| r.s2.clone());
    match op {
        Op::Nop
        | Op::ChannelOpen
        | Op::ChannelClose
        | Op::BucketRename
        | Op::BucketDestroy
        | Op::BucketTag
        | Op::LeaseReturn
        | Op::Delete
        | Op::Rename
        | Op::Score
        | Op::Unpin
        | Op::FileTruncate
        | Op::FileHold
        | Op::FileClose
        | Op::DirectNotice
        | Op::ReadAhead => Reply::Done,
        Op::BucketOpen => Reply::Bucket {
            id: r.a,
            created: x,
        },
        Op::BucketInfo => Reply::BucketInfo {
            bytes: r.a,
            blobs: r.b,
        },
        Op::BucketList => Reply::BucketNames {
            names,
            next_cursor: r.c,
        },
        Op::BucketTags => Reply::Tags(vec![(r.s1.clone(), r.s2.clone()); (r.a % 4) as usize]),
        Op::Lease => Reply::Lease { off: r.a, len: r.b },
        Op::Put | Op::FileThroughDone | Op::FilePublish | Op::FileRemoteLost => Reply::Size(r.a),
        Op::Get | Op::FileRead => Reply::Extents {
            size: r.a,
            covered: r.b,
            pin: r.c,
            extents: Cow::Owned(
                (0..(r.a % 9))
                    .map(|i| ReadExtent {
                        tier: (r.b as u32).wrapping_add(i as u32),
                        epoch: 0,
                        logical_off: r.c.wrapping_mul(i),
                        phys_off: r.a ^ i,
                        len: r.b >> i,
                    })
                    .collect(),
            ),
        },
        Op::Stat => Reply::BlobStat(BlobStat {
            size: r.a,
            access_count: r.b,
            atime_ns: r.c,
            mtime_ns: r.a ^ 7,
            ctime_ns: r.b ^ 7,
            score: r.score,
            user_score: x.then_some(-r.score),
            stationary: y,
            extent_count: r.c as u32,
            tier_mask: (r.c >> 32) as u32,
            dirty: r.bits[2],
        }),
        Op::BlobList => Reply::BlobNames { names, more: y },
        Op::FileOpen => Reply::FileOpened {
            id: r.a,
            created: x,
            attr: attr_of_raw(r),
        },
        Op::FileStat => Reply::FileAttr(attr_of_raw(r)),
        Op::FileWrite if x => Reply::NeedFill { page_off: r.b },
        Op::FileWrite => Reply::Written { at: r.a, size: r.b },
        Op::FileFill => Reply::Filled { inserted: x },
        Op::FileUnlink => Reply::Unlinked(Unlinked {
            existed: x,
            dest_may_exist: y,
            still_open: r.bits[2],
            flush_busy: r.bits[3],
            orphan_with_dest: Some(r.a >> 8).filter(|&id| id != 0),
        }),
        Op::FileRename => Reply::Moved(r.a),
        Op::FileSync | Op::BucketFlush => Reply::SyncGen(r.a),
        Op::FileSyncState => Reply::SyncState {
            done: x,
            failed: msg(),
        },
        Op::FilePath => Reply::Path(r.s1.clone()),
        Op::FileList => Reply::FileNames { names, more: y },
        Op::FileSetAttr => Reply::Persist(persist_of(r.a)),
        Op::FileIdle => Reply::Idle(x),
        Op::FileThrough if x => Reply::Through(Through::Granted {
            at: r.a,
            mode: r.b as u32,
            path: r.s1.clone(),
        }),
        Op::FileThrough => Reply::Through(Through::Wait { failed: msg() }),
        Op::FileLink => Reply::Linked { id: r.a },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_request_survives_a_slot(raw in raw_strategy(), tag in any::<u64>()) {
        let req = build(&raw);
        let mut rec = RequestRecord { tag, ..RequestRecord::default() };
        let mut arg = vec![0u8; ARG_BYTES];
        encode_request(&req, &mut rec, &mut arg).unwrap();
        prop_assert_eq!(rec.tag, tag);
        prop_assert_eq!(Op::from_u32(rec.op), Some(op_of(&req)));
        let back = decode_slot(&rec, &arg).unwrap();
        prop_assert_eq!(back, req);
    }

    #[test]
    fn every_reply_survives_a_slot(raw in raw_strategy(), errno in 0usize..80) {
        let op = op_of(&build(&raw));
        let res = match strata_proto::Errno::ALL.get(errno) {
            // NeedFill is a reply of its own (`Reply::NeedFill`).
            Some(&e) if e != strata_proto::Errno::NeedFill => Err(e),
            _ => Ok(reply_for(op, &raw)),
        };
        let mut resp = ResponseRecord { tag: 9, ..ResponseRecord::default() };
        let mut arg = vec![0u8; ARG_BYTES];
        encode_reply(&res, &mut resp, &mut arg).unwrap();
        prop_assert_eq!(resp.tag, 9);
        let back = decode_reply(op, &resp, &arg);
        if let Ok(reply) = &back {
            // What the codec decodes for an op is an answer to it.
            prop_assert!(reply.answers(&build(&raw)), "{:?} for {:?}", reply, op);
        }
        prop_assert_eq!(back, res);
    }

    /// A hostile client writes anything into its slot: the daemon decodes
    /// it or refuses it, never panics, never reads past the slot.
    #[test]
    fn arbitrary_slots_decode_or_fail_cleanly(
        words in any::<[u64; 6]>(),
        lens in any::<(u32, u32)>(),
        arg in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let rec = RequestRecord {
            op: (words[0] % 80) as u32,
            flags: words[0] as u32 >> 8 | (words[1] as u32 & 0x3F_FFFF),
            bucket: words[1],
            offset: words[2],
            len: words[3] % 1024,
            data_off: words[4],
            aux: words[5],
            name_len: lens.0 % 300,
            name2_len: lens.1 % 300,
            ..RequestRecord::default()
        };
        let names = (rec.name_len + rec.name2_len) as usize;
        if names <= arg.len() {
            let _ = decode_request(&rec, &arg[..names], &arg[names..]);
        }
        let resp = ResponseRecord {
            status: (words[0] >> 40) as i32 % 30,
            arg_len: lens.0 % 700,
            val0: words[1],
            val1: words[2],
            val2: words[3],
            tag: 0,
        };
        let _ = decode_reply(Op::from_u32((words[5] % 74) as u32).unwrap_or(Op::Nop), &resp, &arg);
    }
}

#[test]
fn names_that_do_not_fit_are_refused_not_cut() {
    let long = "x".repeat(100);
    let req = Request::FileLink {
        existing: &long,
        new: &long,
    };
    let mut rec = RequestRecord::default();
    let mut arg = vec![0u8; 150];
    assert_eq!(
        encode_request(&req, &mut rec, &mut arg),
        Err(strata_proto::Errno::Name)
    );
    let reply: Result<Reply, _> = Ok(Reply::Path(long.clone() + &long));
    let mut resp = ResponseRecord::default();
    assert_eq!(
        encode_reply(&reply, &mut resp, &mut arg),
        Err(strata_proto::Errno::Range)
    );
}

#[test]
fn inline_data_beyond_the_slot_is_malformed() {
    let rec = RequestRecord {
        op: Op::Put as u32,
        flags: crate::record::flags::SRC_ARG,
        len: 100,
        name_len: 2,
        ..RequestRecord::default()
    };
    let arg = [b'a'; 50];
    assert_eq!(
        decode_request(&rec, &arg[..2], &arg[2..]),
        Err(strata_proto::Errno::Malformed)
    );
}

/// A file opened with a persist mode that does not exist is refused before
/// the daemon looks at it (moved here from the daemon's files_tests, where
/// the typed `OpenFile` can no longer express it).
#[test]
fn an_unknown_persist_mode_is_invalid() {
    let rec = RequestRecord {
        op: Op::FileOpen as u32,
        flags: crate::record::flags::CREATE,
        aux: 0o640 | 7 << 16,
        name_len: 2,
        ..RequestRecord::default()
    };
    assert_eq!(
        decode_request(&rec, b"/x", &[]),
        Err(strata_proto::Errno::Inval)
    );
}

/// The policy bits are checked on every op, not only on puts.
#[test]
fn an_unknown_policy_is_invalid_on_any_op() {
    let rec = RequestRecord {
        op: Op::BucketOpen as u32,
        flags: 9 << crate::record::flags::POLICY_SHIFT,
        name_len: 1,
        ..RequestRecord::default()
    };
    assert_eq!(
        decode_request(&rec, b"x", &[]),
        Err(strata_proto::Errno::Inval)
    );
}
