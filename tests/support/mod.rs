//! What the power-cut simulations (tests/crash.rs, tests/crash_compaction.rs) share: a scratch
//! directory, a repeatable RNG, and how a write lands in a disk image, whole or torn.

#![allow(dead_code)]

use std::path::Path;

/// A directory on tmpfs when there is one (the simulations write thousands of images).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A tiny deterministic RNG (xorshift), so failures reproduce from the printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Write `data` at `off` into the image, growing it as needed.
pub fn apply(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

/// A write that was in flight at the cut: each 4 KiB block lost, written, or torn (a prefix,
/// or just its first 512-byte sector).
pub fn apply_some(img: &mut Vec<u8>, off: u64, data: &[u8], rng: &mut Rng) {
    for (i, block) in data.chunks(4096).enumerate() {
        let at = off + (i * 4096) as u64;
        match rng.below(5) {
            0 | 1 => {}
            2 | 3 => apply(img, at, block),
            _ => {
                let n = if rng.below(2) == 0 {
                    512.min(block.len())
                } else {
                    1 + rng.below(block.len() as u64) as usize
                };
                apply(img, at, &block[..n]);
            }
        }
    }
}
