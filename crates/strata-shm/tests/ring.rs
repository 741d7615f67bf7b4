use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use strata_shm::{Doorbell, Ring, RingError};

/// A 64-byte-aligned zeroed heap buffer standing in for shared memory.
struct Buf {
    ptr: *mut u8,
    layout: Layout,
}
// SAFETY: the buffer is owned by the test and only reached through the
// ring's atomics.
unsafe impl Send for Buf {}
// SAFETY: as for Send.
unsafe impl Sync for Buf {}
impl Buf {
    fn new(len: usize) -> Buf {
        let layout = Layout::from_size_align(len.max(64), 64).unwrap();
        // SAFETY: test: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Buf { ptr, layout }
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off + 4 <= self.len());
        // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }
}
impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: test: `ptr` came from alloc_zeroed with this very layout and is freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push(u64),
    Pop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![any::<u64>().prop_map(Op::Push), Just(Op::Pop)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn matches_vecdeque_model(
        cap_log2 in 1u32..=6,
        start in prop_oneof![Just(0u32), Just(u32::MAX), (u32::MAX - 70)..=u32::MAX, any::<u32>()],
        ops in proptest::collection::vec(op(), 0..400),
    ) {
        let cap = 1u32 << cap_log2;
        let buf = Buf::new(Ring::bytes_for(cap));
        // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
        unsafe { Ring::init(buf.ptr, cap) };
        // Start the free-running indices near the wrap point.
        buf.u32_at(Ring::HEAD_OFFSET).store(start, Ordering::SeqCst);
        buf.u32_at(Ring::TAIL_OFFSET).store(start, Ordering::SeqCst);
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        let ring = unsafe { Ring::attach(buf.ptr, buf.len()) }.unwrap();
        prop_assert_eq!(ring.capacity(), cap);
        let mut model = VecDeque::new();
        for op in ops {
            match op {
                Op::Push(v) => {
                    let r = ring.push(v);
                    if model.len() == cap as usize {
                        prop_assert_eq!(r, Err(RingError::Full));
                    } else {
                        prop_assert_eq!(r, Ok(()));
                        model.push_back(v);
                    }
                }
                Op::Pop => prop_assert_eq!(ring.pop(), Ok(model.pop_front())),
            }
            prop_assert_eq!(ring.len(), Ok(model.len() as u32));
            prop_assert_eq!(ring.is_empty(), model.is_empty());
            prop_assert_eq!(ring.is_full(), model.len() == cap as usize);
        }
        // Drain.
        while let Some(v) = model.pop_front() {
            prop_assert_eq!(ring.pop(), Ok(Some(v)));
        }
        prop_assert_eq!(ring.pop(), Ok(None));
    }

    /// Arbitrary garbage in the header and indices never panics or goes out of bounds.
    #[test]
    fn garbage_never_panics(
        magic_ok in any::<bool>(),
        cap in any::<u32>(),
        head in any::<u32>(),
        tail in any::<u32>(),
        region in 0usize..4096,
        ops in proptest::collection::vec(op(), 0..50),
    ) {
        let buf = Buf::new(4096);
        buf.u32_at(0).store(if magic_ok { strata_shm::RING_MAGIC } else { cap ^ 1 }, Ordering::SeqCst);
        buf.u32_at(4).store(cap, Ordering::SeqCst);
        buf.u32_at(Ring::HEAD_OFFSET).store(head, Ordering::SeqCst);
        buf.u32_at(Ring::TAIL_OFFSET).store(tail, Ordering::SeqCst);
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        if let Ok(ring) = unsafe { Ring::attach(buf.ptr, region) } {
            prop_assert!(Ring::bytes_for(ring.capacity()) <= region);
            for op in ops {
                // Peer keeps scribbling on the indices meanwhile.
                buf.u32_at(Ring::HEAD_OFFSET).fetch_add(head % 3, Ordering::SeqCst);
                buf.u32_at(Ring::TAIL_OFFSET).fetch_add(tail % 5, Ordering::SeqCst);
                match op {
                    Op::Push(v) => { let _ = ring.push(v); }
                    Op::Pop => { let _ = ring.pop(); }
                }
                let _ = ring.len();
            }
        }
    }
}

#[test]
fn corrupt_headers_are_errors() {
    let cap = 8;
    let len = Ring::bytes_for(cap);
    let buf = Buf::new(len);

    // Never initialised.
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, len) }.unwrap_err(),
        RingError::BadMagic
    );

    // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
    unsafe { Ring::init(buf.ptr, cap) };
    // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
    assert!(unsafe { Ring::attach(buf.ptr, len) }.is_ok());

    // Region smaller than the header / than the advertised capacity.
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, 10) }.unwrap_err(),
        RingError::TooSmall
    );
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, len - 1) }.unwrap_err(),
        RingError::TooSmall
    );

    // Misaligned base.
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr.add(8), len - 8) }.unwrap_err(),
        RingError::Misaligned
    );
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(std::ptr::null_mut(), len) }.unwrap_err(),
        RingError::Misaligned
    );

    // Bad capacities.
    for bad in [0u32, 1, 3, 6, 131072, u32::MAX, 1 << 31] {
        buf.u32_at(4).store(bad, Ordering::SeqCst);
        assert_eq!(
            // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
            unsafe { Ring::attach(buf.ptr, len) }.unwrap_err(),
            RingError::BadCapacity,
            "cap {bad}"
        );
    }
    // Valid power of two but bigger than the region.
    buf.u32_at(4).store(1024, Ordering::SeqCst);
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, len) }.unwrap_err(),
        RingError::TooSmall
    );
    buf.u32_at(4).store(cap, Ordering::SeqCst);

    // Bad magic.
    buf.u32_at(0).store(0xdead_beef, Ordering::SeqCst);
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, len) }.unwrap_err(),
        RingError::BadMagic
    );
    buf.u32_at(0)
        .store(strata_shm::RING_MAGIC, Ordering::SeqCst);

    // Tail far ahead of head at attach time.
    buf.u32_at(Ring::HEAD_OFFSET).store(5, Ordering::SeqCst);
    buf.u32_at(Ring::TAIL_OFFSET)
        .store(5 + cap + 1, Ordering::SeqCst);
    assert_eq!(
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        unsafe { Ring::attach(buf.ptr, len) }.unwrap_err(),
        RingError::Corrupt
    );

    // Corruption after attach: pop, push and len all report Corrupt.
    buf.u32_at(Ring::TAIL_OFFSET).store(5, Ordering::SeqCst);
    // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
    let ring = unsafe { Ring::attach(buf.ptr, len) }.unwrap();
    ring.push(1).unwrap();
    assert_eq!(ring.pop(), Ok(Some(1)));
    buf.u32_at(Ring::TAIL_OFFSET)
        .store(1_000_000, Ordering::SeqCst);
    assert_eq!(ring.pop(), Err(RingError::Corrupt));
    assert_eq!(ring.push(2), Err(RingError::Corrupt));
    assert_eq!(ring.len(), Err(RingError::Corrupt));
    assert!(!ring.is_empty());
    // Head ahead of tail (consumer scribbled past the producer).
    buf.u32_at(Ring::TAIL_OFFSET).store(6, Ordering::SeqCst);
    buf.u32_at(Ring::HEAD_OFFSET).store(7, Ordering::SeqCst);
    assert_eq!(ring.pop(), Err(RingError::Corrupt));
    assert_eq!(ring.len(), Err(RingError::Corrupt));
    // The producer validates whenever it refreshes its cached head; until then
    // it may keep pushing, which is harmless (slot indices are always masked).
    let _ = ring.push(3);

    // A peer rewriting the capacity after attach has no effect on us.
    buf.u32_at(Ring::HEAD_OFFSET).store(6, Ordering::SeqCst);
    buf.u32_at(Ring::TAIL_OFFSET).store(6, Ordering::SeqCst);
    // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
    let ring = unsafe { Ring::attach(buf.ptr, len) }.unwrap();
    buf.u32_at(4).store(65536, Ordering::SeqCst);
    assert_eq!(ring.capacity(), cap);
    for i in 0..cap {
        ring.push(i as u64).unwrap();
    }
    assert_eq!(ring.push(99), Err(RingError::Full));
    for i in 0..cap {
        assert_eq!(ring.pop(), Ok(Some(i as u64)));
    }
    assert_eq!(ring.pop(), Ok(None));
}

#[test]
#[should_panic]
fn init_rejects_bad_capacity() {
    let buf = Buf::new(4096);
    // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
    unsafe { Ring::init(buf.ptr, 3) };
}

#[test]
fn max_capacity_layout() {
    assert_eq!(Ring::bytes_for(2), 192 + 16);
    assert_eq!(Ring::bytes_for(65536), 192 + 8 * 65536);
    let buf = Buf::new(Ring::bytes_for(65536));
    // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
    let ring = unsafe { Ring::init(buf.ptr, 65536) };
    for i in 0..65536u64 {
        ring.push(i).unwrap();
    }
    assert_eq!(ring.push(0), Err(RingError::Full));
    assert_eq!(ring.len(), Ok(65536));
}

/// Producer pushes 1..=1_000_000, consumer pops in order; both sleep on doorbells.
#[test]
fn two_threads_with_doorbells() {
    const N: u64 = 1_000_000;
    let cap = 64;
    let buf = Arc::new(Buf::new(Ring::bytes_for(cap) + 128));
    // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
    let ring = Arc::new(unsafe { Ring::init(buf.ptr, cap) });
    // Doorbells live right after the ring, as they would in a segment.
    let bells_off = Ring::bytes_for(cap).next_multiple_of(64);
    // SAFETY: test: the doorbells lie inside the live buffer, 64-aligned, zeroed; the buffer outlives the threads that use them.
    let data: &'static Doorbell = unsafe { Doorbell::from_ptr(buf.ptr.add(bells_off)) };
    // SAFETY: test: the doorbells lie inside the live buffer, 64-aligned, zeroed; the buffer outlives the threads that use them.
    let space: &'static Doorbell = unsafe { Doorbell::from_ptr(buf.ptr.add(bells_off + 64)) };
    let deadlock_guard = Some(Duration::from_secs(120));

    let producer = {
        let ring = ring.clone();
        let _keep = buf.clone();
        std::thread::spawn(move || {
            let _keep = _keep;
            for v in 1..=N {
                loop {
                    match ring.push(v) {
                        Ok(()) => {
                            data.ring();
                            break;
                        }
                        Err(RingError::Full) => {
                            let ok = space.wait_until(
                                || !ring.is_full(),
                                Duration::from_micros(20),
                                deadlock_guard,
                            );
                            assert!(ok, "producer stuck");
                        }
                        Err(e) => panic!("push: {e}"),
                    }
                }
            }
        })
    };
    let mut expect = 1u64;
    while expect <= N {
        match ring.pop().unwrap() {
            Some(v) => {
                assert_eq!(v, expect);
                expect += 1;
                space.ring();
            }
            None => {
                let ok = data.wait_until(
                    || !ring.is_empty(),
                    Duration::from_micros(20),
                    deadlock_guard,
                );
                assert!(ok, "consumer stuck");
            }
        }
    }
    producer.join().unwrap();
    assert_eq!(ring.pop(), Ok(None));
    assert_eq!(data.sleepers(), 0);
    assert_eq!(space.sleepers(), 0);
}
