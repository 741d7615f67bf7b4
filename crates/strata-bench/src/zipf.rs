//! YCSB's key generators, ported from `site.ycsb.generator`:
//! [`Zipfian`] (Gray et al., "Quickly generating billion-record synthetic
//! databases", SIGMOD 1994), [`ScrambledZipfian`] (zipfian popularity spread
//! over the key space by an FNV hash), [`SkewedLatest`] (zipfian over the
//! most recent inserts) and [`AckCounter`] (the insert sequence readers may
//! see), plus a small deterministic PRNG so the same seed gives the same key
//! sequence against every store.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// YCSB's default zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Item count of the underlying generator of [`ScrambledZipfian`] (YCSB's `ITEM_COUNT`).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// zeta(10^10, 0.99), precomputed as in YCSB's `ScrambledZipfianGenerator.ZETAN`.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1 over the 8 little-endian bytes of `val`
/// (as Java does it: sign bit cleared at the end).
pub fn fnv_hash64(val: u64) -> u64 {
    let mut v = val as i64;
    let mut hash = FNV_OFFSET_BASIS_64 as i64;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64 as i64);
    }
    hash.unsigned_abs()
}

/// xoshiro256** seeded through splitmix64: small, fast, reproducible.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// zeta(n, theta) = sum_{i=1..n} 1/i^theta.
pub fn zeta(n: u64, theta: f64) -> f64 {
    zeta_from(0, n, theta, 0.0)
}

/// Extends `initial` = zeta(st, theta) to zeta(n, theta).
fn zeta_from(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// Zipfian over [base, base + items): item `base` is the most popular.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Over [min, max] with YCSB's constant 0.99.
    pub fn new(min: u64, max: u64) -> Zipfian {
        Zipfian::with_theta(min, max, ZIPFIAN_CONSTANT)
    }

    pub fn with_theta(min: u64, max: u64, theta: f64) -> Zipfian {
        let items = max - min + 1;
        Zipfian::with_zetan(min, max, theta, zeta(items, theta))
    }

    /// With zeta(items, theta) already known (it is O(items) to compute).
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Zipfian {
        let items = max - min + 1;
        let zeta2theta = zeta(2, theta);
        let mut z = Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: 0.0,
            count_for_zeta: items,
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    /// A value in [base, base + item_count), for a (possibly grown) item count;
    /// zeta is extended incrementally as YCSB does.
    pub fn next_with_count(&mut self, rng: &mut Rng, item_count: u64) -> u64 {
        if item_count != self.count_for_zeta {
            if item_count > self.count_for_zeta {
                self.zetan = zeta_from(self.count_for_zeta, item_count, self.theta, self.zetan);
            } else {
                // YCSB warns and recomputes; shrinking is rare.
                self.zetan = zeta(item_count, self.theta);
            }
            self.count_for_zeta = item_count;
            self.eta = self.eta_for(item_count);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let v = (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base + v.min(item_count - 1)
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let n = self.items;
        self.next_with_count(rng, n)
    }
}

/// Zipfian popularity, but the popular items are scattered over [min, max]
/// by FNV-hashing draws of a 10^10-item zipfian (YCSB's default chooser).
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    items: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(min: u64, max: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            items: max - min + 1,
            gen: Zipfian::with_zetan(
                0,
                SCRAMBLED_ITEM_COUNT - 1,
                ZIPFIAN_CONSTANT,
                SCRAMBLED_ZETAN,
            ),
        }
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let r = self.gen.next(rng);
        self.min + fnv_hash64(r) % self.items
    }
}

/// The insert key sequence of a run: `next()` hands out fresh key numbers,
/// `ack()` marks them inserted, `last()` is the highest key number below
/// which every key has been acknowledged (what readers may ask for).
#[derive(Debug)]
pub struct AckCounter {
    next: AtomicU64,
    last: AtomicU64,
    state: Mutex<(u64, BTreeSet<u64>)>,
}

impl AckCounter {
    /// Keys [0, start) exist already; `start` ≥ 1.
    pub fn new(start: u64) -> AckCounter {
        assert!(start >= 1, "the latest generator needs at least one record");
        AckCounter {
            next: AtomicU64::new(start),
            last: AtomicU64::new(start - 1),
            state: Mutex::new((start, BTreeSet::new())),
        }
    }

    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub fn ack(&self, v: u64) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (limit, pending) = &mut *g;
        pending.insert(v);
        while pending.remove(limit) {
            *limit += 1;
        }
        self.last.store(*limit - 1, Ordering::Release);
    }

    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }
}

/// YCSB's `SkewedLatestGenerator`: the most recently inserted key is the
/// most popular, popularity falling off zipfian-wise with age.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// `last` is the current latest key number (`AckCounter::last()`).
    pub fn new(last: u64) -> SkewedLatest {
        SkewedLatest {
            zipf: Zipfian::new(0, last.max(1) - 1),
        }
    }

    /// A key number in [0, last].
    pub fn next(&mut self, rng: &mut Rng, last: u64) -> u64 {
        if last == 0 {
            return 0;
        }
        last - self.zipf.next_with_count(rng, last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64, draws: usize, mut f: impl FnMut() -> u64) -> Vec<u64> {
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            let v = f();
            assert!(v < n, "value {v} out of range 0..{n}");
            c[v as usize] += 1;
        }
        c
    }

    fn top_vs_median(c: &[u64]) -> (u64, u64) {
        let mut s = c.to_vec();
        s.sort_unstable();
        (s[s.len() - 1], s[s.len() / 2])
    }

    #[test]
    fn fnv_matches_ycsb() {
        // Eight zero octets: the basis times prime^8, sign cleared as Java's Math.abs.
        let mut h = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            h = h.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnv_hash64(0), (h as i64).unsigned_abs());
        // One octet differs: the first xor changes.
        let mut h1 = FNV_OFFSET_BASIS_64 ^ 1;
        for i in 0..8 {
            if i > 0 {
                h1 = h1.wrapping_mul(FNV_PRIME_64);
            }
        }
        h1 = h1.wrapping_mul(FNV_PRIME_64);
        assert_eq!(fnv_hash64(1), (h1 as i64).unsigned_abs());
        assert_ne!(fnv_hash64(1), fnv_hash64(2));
        assert!(fnv_hash64(u64::MAX) <= i64::MAX as u64);
    }

    #[test]
    fn zeta_small() {
        assert!((zeta(1, 0.99) - 1.0).abs() < 1e-12);
        assert!((zeta(2, 0.99) - (1.0 + 0.5f64.powf(0.99))).abs() < 1e-12);
        // The YCSB constant is zeta(10^10, 0.99); check its start is consistent.
        assert!(zeta(1000, 0.99) < SCRAMBLED_ZETAN);
    }

    #[test]
    fn zipfian_in_range_and_skewed() {
        let n = 1000;
        let mut rng = Rng::new(1);
        let mut z = Zipfian::new(0, n - 1);
        let c = counts(n, 100_000, || z.next(&mut rng));
        // Item 0 is the most popular, far above the median.
        let (top, median) = top_vs_median(&c);
        assert_eq!(top, c[0]);
        assert!(c[0] > 50 * median.max(1), "top {} median {}", c[0], median);
        assert!(c[0] > c[1] && c[1] > c[10] && c[10] > c[500]);
        // P(0) = 1/zeta(n) ≈ 0.13 for n = 1000.
        let p0 = c[0] as f64 / 100_000.0;
        let expect = 1.0 / zeta(n, 0.99);
        assert!((p0 - expect).abs() < 0.01, "p0 {p0} expected {expect}");
    }

    #[test]
    fn zipfian_with_offset_base() {
        let mut rng = Rng::new(2);
        let mut z = Zipfian::new(100, 199);
        for _ in 0..10_000 {
            let v = z.next(&mut rng);
            assert!((100..200).contains(&v));
        }
    }

    #[test]
    fn scrambled_zipfian_in_range_and_skewed() {
        let n = 10_000;
        let mut rng = Rng::new(3);
        let mut z = ScrambledZipfian::new(0, n - 1);
        let c = counts(n, 100_000, || z.next(&mut rng));
        let (top, median) = top_vs_median(&c);
        assert!(top > 100 * median.max(1), "top {top} median {median}");
        // Scrambled: the hottest item is not simply key 0.
        let hottest = c
            .iter()
            .enumerate()
            .max_by_key(|(_, v)| **v)
            .map(|(i, _)| i)
            .unwrap();
        assert_eq!(hottest as u64, fnv_hash64(0) % n);
        // Item 0 of the 10^10-item generator has mass 1/ZETAN ≈ 3.8 %.
        assert!(top as f64 / 100_000.0 > 0.03);
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = (Rng::new(9), ScrambledZipfian::new(0, 999));
        let mut b = (Rng::new(9), ScrambledZipfian::new(0, 999));
        for _ in 0..1000 {
            assert_eq!(a.1.next(&mut a.0), b.1.next(&mut b.0));
        }
    }

    #[test]
    fn latest_favours_recent_inserts() {
        let mut rng = Rng::new(4);
        let n = 10_000u64;
        let mut g = SkewedLatest::new(n - 1);
        let c = counts(n, 100_000, || g.next(&mut rng, n - 1));
        let newest_100: u64 = c[(n - 100) as usize..].iter().sum();
        let oldest_100: u64 = c[..100].iter().sum();
        assert!(c[(n - 1) as usize] > c[(n / 2) as usize] * 50 + 50);
        assert!(
            newest_100 > 20 * oldest_100.max(1),
            "newest {newest_100} oldest {oldest_100}"
        );
        assert!(newest_100 as f64 / 100_000.0 > 0.4);
    }

    #[test]
    fn latest_follows_growing_counter() {
        let mut rng = Rng::new(5);
        let ack = AckCounter::new(1000);
        let mut g = SkewedLatest::new(ack.last());
        for _ in 0..500 {
            let k = ack.next();
            ack.ack(k);
        }
        assert_eq!(ack.last(), 1499);
        let mut hits_new = 0;
        for _ in 0..10_000 {
            let v = g.next(&mut rng, ack.last());
            assert!(v <= 1499);
            if v >= 1000 {
                hits_new += 1;
            }
        }
        assert!(hits_new > 7000, "{hits_new}");
    }

    #[test]
    fn ack_counter_waits_for_gaps() {
        let ack = AckCounter::new(10);
        let a = ack.next();
        let b = ack.next();
        assert_eq!((a, b), (10, 11));
        ack.ack(b);
        assert_eq!(ack.last(), 9, "11 acked but 10 still pending");
        ack.ack(a);
        assert_eq!(ack.last(), 11);
    }

    #[test]
    fn rng_uniform_bounds() {
        let mut r = Rng::new(7);
        let mut sum = 0.0;
        for _ in 0..100_000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            sum += f;
            assert!(r.below(7) < 7);
        }
        assert!((sum / 100_000.0 - 0.5).abs() < 0.01);
    }
}
