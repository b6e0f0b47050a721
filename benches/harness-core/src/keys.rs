//! Keys (a hash of a counter 1..N), values, and per-thread random number generators.

/// Shortest key the harness generates.
pub const MIN_KEY: usize = 16;
/// Longest key the harness generates.
pub const MAX_KEY: usize = 32;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The splitmix64 finalizer: a bijection on u64 that mixes every bit.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Document `i` (1..=N) has the key `key(i)`: the first 8 bytes are the big-endian
/// `mix64(i)` (a bijection, so distinct counters give distinct keys, and key order has
/// nothing to do with counter order), the rest more hash bytes of `i` up to the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyGen {
    len: usize,
}

impl KeyGen {
    /// Keys of `len` bytes, `MIN_KEY..=MAX_KEY`.
    pub fn new(len: usize) -> Result<KeyGen, String> {
        if !(MIN_KEY..=MAX_KEY).contains(&len) {
            return Err(format!(
                "key size {len} is not between {MIN_KEY} and {MAX_KEY}"
            ));
        }
        Ok(KeyGen { len })
    }

    /// Key length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (a key has at least 16 bytes); here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key of counter `i`, written into `buf`.
    #[inline]
    pub fn key<'b>(&self, i: u64, buf: &'b mut [u8; MAX_KEY]) -> &'b [u8] {
        buf[..8].copy_from_slice(&mix64(i).to_be_bytes());
        let mut x = i;
        let mut off = 8;
        while off < self.len {
            x = mix64(x.wrapping_add(GOLDEN));
            let n = (self.len - off).min(8);
            buf[off..off + n].copy_from_slice(&x.to_be_bytes()[..n]);
            off += n;
        }
        &buf[..self.len]
    }
}

/// splitmix64: small, fast, seedable, and good enough to pick keys.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(mix64(seed ^ GOLDEN))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// Uniform in `0..n` (multiply-shift; `n` > 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A counter of an existing document: uniform in `1..=docs`.
    #[inline]
    pub fn doc(&mut self, docs: u64) -> u64 {
        1 + self.below(docs)
    }
}

/// The seed of thread `thread` of step `step` in a run seeded `run_seed`. Every engine gets
/// the same seeds, so every engine reads and writes the same keys in the same order.
pub fn thread_seed(run_seed: u64, step: usize, thread: usize) -> u64 {
    let lane = ((step as u64) << 32) | (thread as u64 + 1);
    mix64(mix64(run_seed) ^ lane.wrapping_mul(GOLDEN))
}

/// Values: `size`-byte windows into a pool of random (incompressible) bytes, so writing a
/// value costs a slice, not a fill.
#[derive(Clone, Debug)]
pub struct Values {
    pool: Vec<u8>,
    size: usize,
}

impl Values {
    /// A pool for `size`-byte values, filled from `seed`.
    pub fn new(size: usize, seed: u64) -> Values {
        let len = (1usize << 20).max(4 * size) + size;
        let mut rng = Rng::new(seed);
        let mut pool = Vec::with_capacity(len + 8);
        while pool.len() < len {
            pool.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        pool.truncate(len);
        Values { pool, size }
    }

    /// Value size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A value, at a random offset in the pool.
    #[inline]
    pub fn pick(&self, rng: &mut Rng) -> &[u8] {
        let off = rng.below((self.pool.len() - self.size + 1) as u64) as usize;
        &self.pool[off..off + self.size]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_distinct_sized_and_deterministic() {
        for len in [MIN_KEY, 20, 24, MAX_KEY] {
            let g = KeyGen::new(len).unwrap();
            let mut seen = HashSet::new();
            let mut buf = [0u8; MAX_KEY];
            for i in 1..=50_000u64 {
                let k = g.key(i, &mut buf).to_vec();
                assert_eq!(k.len(), len);
                assert!(seen.insert(k), "duplicate key for counter {i}");
            }
            let mut a = [0u8; MAX_KEY];
            let mut b = [0u8; MAX_KEY];
            assert_eq!(g.key(7, &mut a), g.key(7, &mut b));
        }
        assert!(KeyGen::new(15).is_err());
        assert!(KeyGen::new(33).is_err());
    }

    #[test]
    fn keys_are_not_in_counter_order() {
        let g = KeyGen::new(16).unwrap();
        let mut a = [0u8; MAX_KEY];
        let mut b = [0u8; MAX_KEY];
        let ascending = (1..1000u64)
            .filter(|&i| g.key(i, &mut a) < g.key(i + 1, &mut b))
            .count();
        // A hash puts consecutive counters in order about half the time.
        assert!((350..650).contains(&ascending), "{ascending}");
    }

    #[test]
    fn mix64_is_a_bijection_on_a_sample() {
        let outs: HashSet<u64> = (0..100_000u64).map(mix64).collect();
        assert_eq!(outs.len(), 100_000);
    }

    #[test]
    fn rng_is_seeded_and_in_range() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        let mut c = Rng::new(2);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..100).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
        let mut r = Rng::new(3);
        let mut hits = [0u32; 10];
        for _ in 0..100_000 {
            let d = r.doc(10);
            assert!((1..=10).contains(&d));
            hits[(d - 1) as usize] += 1;
        }
        assert!(
            hits.iter().all(|&h| (9_000..11_000).contains(&h)),
            "{hits:?}"
        );
    }

    #[test]
    fn thread_seeds_differ_per_thread_and_step_and_run() {
        let mut seen = HashSet::new();
        for run in 0..3 {
            for step in 0..13 {
                for thread in 0..8 {
                    assert!(seen.insert(thread_seed(run, step, thread)));
                }
            }
        }
    }

    #[test]
    fn values_have_the_size_and_vary() {
        let v = Values::new(256, 9);
        let mut r = Rng::new(1);
        let a = v.pick(&mut r).to_vec();
        let b = v.pick(&mut r).to_vec();
        assert_eq!(a.len(), 256);
        assert_ne!(a, b);
        let big = Values::new(16 << 10, 9);
        assert_eq!(big.pick(&mut r).len(), 16 << 10);
    }
}
