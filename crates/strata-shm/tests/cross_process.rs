//! Cross-process tests: the ring, doorbells and futexes work between two
//! processes mapping the same segment (at different addresses).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use strata_shm::{futex, Doorbell, Ring, RingError, ShmSegment, WaitResult};

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "strata-shm-xp-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = ShmSegment::unlink(&self.0);
    }
}

const GUARD: Option<Duration> = Some(Duration::from_secs(120));

/// fork(): the child (touching only the shared ring/doorbells, then `_exit`)
/// pushes 1..=N through a small ring; the parent pops and checks the order.
#[test]
fn fork_ring_and_doorbells() {
    const N: u64 = 200_000;
    const CAP: u32 = 32;
    let name = unique("fork");
    let _c = Cleanup(name.clone());
    let bells = Ring::bytes_for(CAP).next_multiple_of(64);
    let seg = ShmSegment::create(&name, bells + 128).unwrap();
    seg.populate(0..seg.len());
    // SAFETY: test: the buffer is a live, 64-aligned, zeroed allocation large enough for a ring of this capacity.
    let ring = unsafe { Ring::init(seg.as_ptr(), CAP) };
    // SAFETY: test: the doorbells lie inside the live buffer, 64-aligned, zeroed; the buffer outlives the threads that use them.
    let data = unsafe { Doorbell::from_ptr(seg.as_ptr().add(bells)) };
    // SAFETY: test: the doorbells lie inside the live buffer, 64-aligned, zeroed; the buffer outlives the threads that use them.
    let space = unsafe { Doorbell::from_ptr(seg.as_ptr().add(bells + 64)) };

    // SAFETY: test: the child only touches the shared mapping and calls _exit; it runs no destructor and takes no lock.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Child: no allocation, no panics; report failures via the exit code.
        // Attach independently, as a real peer would.
        // SAFETY: test: the pointer is a live allocation of at least the given length (or NULL / misaligned on purpose: attach refuses those).
        let code = match unsafe { Ring::attach(seg.as_ptr(), seg.len()) } {
            Err(_) => 10,
            Ok(r) => {
                let mut code = 0;
                'outer: for v in 1..=N {
                    loop {
                        match r.push(v) {
                            Ok(()) => {
                                data.ring();
                                break;
                            }
                            Err(RingError::Full) => {
                                if !space.wait_until(
                                    || !r.is_full(),
                                    Duration::from_micros(10),
                                    GUARD,
                                ) {
                                    code = 11;
                                    break 'outer;
                                }
                            }
                            Err(_) => {
                                code = 12;
                                break 'outer;
                            }
                        }
                    }
                }
                code
            }
        };
        // SAFETY: test: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }

    let mut expect = 1u64;
    while expect <= N {
        match ring.pop().unwrap() {
            Some(v) => {
                assert_eq!(v, expect);
                expect += 1;
                space.ring();
            }
            None => assert!(data.wait_until(|| !ring.is_empty(), Duration::from_micros(10), GUARD)),
        }
    }
    let mut status = 0;
    // SAFETY: test: `status` is a live local; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    assert_eq!(libc::WEXITSTATUS(status), 0);
    assert_eq!(ring.pop(), Ok(None));
}

const CHILD_ENV: &str = "STRATA_SHM_TEST_CHILD_SEGMENT";
// Word offsets in the re-exec test's segment.
const READY: usize = 0;
const GO: usize = 64;
const ACK: usize = 128;

fn word(seg: &ShmSegment, off: usize) -> &AtomicU32 {
    assert!(off + 4 <= seg.len());
    // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
    unsafe { &*(seg.as_ptr().add(off) as *const AtomicU32) }
}

/// Re-executes this test binary so that a genuinely separate process opens
/// the segment by name and does futex wait/wake with us in both directions.
#[test]
fn reexec_futex_wait_wake() {
    let name = unique("exec");
    let _c = Cleanup(name.clone());
    let seg = ShmSegment::create(&name, 4096).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_futex_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &name)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();

    // Wait (futex, woken by the child) until the child is about to sleep.
    let ready = word(&seg, READY);
    while ready.load(Ordering::SeqCst) == 0 {
        let _ = futex::wait(ready, 0, Some(Duration::from_secs(1)));
        if let Some(st) = child.try_wait().unwrap() {
            panic!("child exited early: {st}");
        }
    }
    // Release it.
    word(&seg, GO).store(1, Ordering::SeqCst);
    futex::wake(word(&seg, GO), 1);

    let st = child.wait().unwrap();
    assert!(st.success(), "child failed: {st}");
    assert_eq!(word(&seg, ACK).load(Ordering::SeqCst), 2);
}

/// The child half of `reexec_futex_wait_wake`; a no-op unless spawned by it.
#[test]
fn child_futex_entry() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seg = ShmSegment::open(&name).unwrap();
    let go = word(&seg, GO);
    word(&seg, READY).store(1, Ordering::SeqCst);
    futex::wake(word(&seg, READY), u32::MAX);
    let mut rounds = 0;
    while go.load(Ordering::SeqCst) == 0 {
        let r = futex::wait(go, 0, Some(Duration::from_secs(1)));
        assert_ne!(r, WaitResult::Interrupted);
        rounds += 1;
        assert!(rounds < 120, "never woken");
    }
    word(&seg, ACK).store(go.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
}
