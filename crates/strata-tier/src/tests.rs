//! Both backends behave alike through the trait: bytes written are read
//! back, out-of-range accesses are errors that move nothing.

use super::*;

fn ram(len: usize) -> (RamTier, String) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let name = format!("strata-tiertest-{}-{n}", std::process::id());
    (
        RamTier::new(ShmSegment::create_or_replace(&name, len).unwrap()),
        name,
    )
}

fn exercise(t: &dyn TierBackend, len: u64) {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    t.write_at(4096, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    t.read_at(4096, &mut back).unwrap();
    assert_eq!(back, data);
    t.sync().unwrap();
    // Out of range: an error, nothing moves.
    let mut one = [9u8; 1];
    assert!(t.read_at(u64::MAX, &mut one).is_err());
    assert!(t.write_at(u64::MAX, &[1]).is_err());
    assert_eq!(one, [9]);
    assert!(t.len_bytes().unwrap() >= len);
    // Released bytes read as zeros (a dir tier punches whole blocks).
    t.release(4096, 8192).unwrap();
    let mut z = vec![1u8; 8192];
    t.read_at(4096, &mut z).unwrap();
    if t.mapped(0, 1).is_none() {
        assert!(z.iter().all(|&b| b == 0), "punched range reads zeros");
    }
}

#[test]
fn ram_tier_reads_what_it_wrote_and_refuses_out_of_range() {
    let (t, name) = ram(1 << 20);
    exercise(&t, 1 << 20);
    let mut b = [0u8; 16];
    assert_eq!(
        t.read_at((1 << 20) - 8, &mut b).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert!(t.mapped((1 << 20) - 8, 16).is_none());
    assert_eq!(t.mapped(4096 + 8192, 3).map(|s| s.len()), Some(3));
    assert_eq!(t.local(), Local::Segment { name: name.clone() });
    // A second mapping (a worker, a client) sees the same bytes.
    t.write_at(100, b"shared").unwrap();
    let other = RamTier::attach(&name).unwrap();
    assert_eq!(other.mapped(100, 6), Some(&b"shared"[..]));
    let _ = ShmSegment::unlink(&name);
}

#[test]
fn dir_tier_reads_what_it_wrote_and_is_private_and_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let (t, lock) = DirTier::create("disk", dir.path(), 1 << 20).unwrap();
    exercise(&t, 1 << 20);
    let path = dir.path().join(DIR_TIER_FILE);
    assert_eq!(t.local(), Local::File { path: path.clone() });
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second daemon on the same directory is refused, named.
    let e = DirTier::create("disk", dir.path(), 1 << 20).err().unwrap();
    assert!(
        e.to_string().contains("in use by another strata daemon"),
        "{e}"
    );
    // The lock is the owner's: released on its drop while the backend lives.
    drop(lock);
    let (_again, _lock) = DirTier::create("disk", dir.path(), 1 << 20).unwrap();
    // A reader (a client) sees the bytes.
    t.write_at(0, b"tier").unwrap();
    let r = DirTier::open_read_only(&path).unwrap();
    let mut b = [0u8; 4];
    r.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"tier");
    assert!(r.write_at(0, b"x").is_err(), "read-only");
}

/// Large writes take the streaming copy: every alignment of source and
/// destination and every tail length gives the same bytes as a plain copy.
#[test]
fn large_writes_stream_the_same_bytes_at_every_alignment() {
    let len = 2 << 20;
    let (t, name) = ram(len);
    let src: Vec<u8> = (0..(STREAM_COPY_MIN_BYTES + 200) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (dst_off, src_off, cut) in [
        (0, 0, 0),
        (1, 0, 1),
        (17, 5, 63),
        (4095, 3, 17),
        (64, 1, 130),
    ] {
        let s = &src[src_off..src.len() - cut];
        assert!(s.len() >= STREAM_COPY_MIN_BYTES);
        t.write_at(0, &vec![0xAB; len]).unwrap();
        t.write_at(dst_off as u64, s).unwrap();
        let mut back = vec![0u8; s.len() + 2];
        t.read_at(dst_off as u64, &mut back[..s.len()]).unwrap();
        assert_eq!(&back[..s.len()], s, "dst {dst_off} src {src_off} cut {cut}");
        // The bytes around are untouched.
        let mut after = [0u8; 1];
        t.read_at((dst_off + s.len()) as u64, &mut after).unwrap();
        assert_eq!(after, [0xAB]);
        if dst_off > 0 {
            t.read_at(dst_off as u64 - 1, &mut after).unwrap();
            assert_eq!(after, [0xAB]);
        }
    }
    // A move within the arena (overlapping) still copies right.
    let pattern: Vec<u8> = (0..STREAM_COPY_MIN_BYTES as u32).map(|i| i as u8).collect();
    t.write_at(0, &pattern).unwrap();
    let inside = t.mapped(0, pattern.len() as u64).unwrap().to_vec();
    t.write_at(100, t.mapped(0, pattern.len() as u64).unwrap())
        .unwrap();
    let mut back = vec![0u8; pattern.len()];
    t.read_at(100, &mut back).unwrap();
    assert_eq!(back, inside);
    let _ = ShmSegment::unlink(&name);
}
