//! Helpers shared by the multi-process and fault tests: deterministic
//! random bytes, a checksum, and re-executing this test binary as a worker.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// splitmix64: fast deterministic bytes (content only, not crypto).
pub fn fill(seed: u64, buf: &mut [u8]) {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&next().to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let v = next().to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&v[..n]);
}

pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, &mut v);
    v
}

/// A 64-bit checksum (FNV-style over words, plus the length). Any changed,
/// missing or extra byte changes it with overwhelming probability.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (data.len() as u64).wrapping_mul(0x100_0000_01b3);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h ^ (h >> 33)
}

/// Re-runs this test binary, executing only the test `entry` (which must
/// check `env_flag` and return at once when it is absent).
pub fn spawn_self(
    entry: &str,
    env_flag: &str,
    envs: &[(&str, String)],
    capture_stdout: bool,
) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args([
        entry,
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ]);
    c.env(env_flag, "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.stdin(Stdio::null());
    if capture_stdout {
        c.stdout(Stdio::piped());
    }
    c.spawn().expect("spawn worker")
}

/// Waits for a child with a generous limit (a guard against hangs only).
pub fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "worker pid {} still running after {:?}: hung",
                child.id(),
                limit
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` until it returns true; panics after `limit` (hang guard).
pub fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The error code of a call expected to fail.
pub fn errno_of<T>(r: strata_client::Result<T>) -> strata_client::Errno {
    match r {
        Ok(_) => panic!("expected an error, got Ok"),
        Err(e) => e.errno,
    }
}
