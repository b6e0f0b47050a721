//! What the power-cut simulations (tests/crash.rs, tests/crash_compaction.rs) share: a scratch
//! directory and a repeatable RNG (both from larch-testkit), and how a write lands in a disk
//! image, whole or torn.

#![allow(dead_code)]

pub use larch_testkit::{scratch_dir, Rng};

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
