//! Test tooling shared by larch's integration tests (`tests/`), the cargo-fuzz targets
//! (`fuzz/`) and anything else that exercises the engine from outside: the bodies of the fuzz
//! targets, one seeded RNG, a scratch directory, a recording `Storage` ([`recording`]) and the
//! power-cut images built from what it recorded ([`images`]; of a whole directory with
//! compaction's files and renames, [`directory`]). It is a separate, unpublished crate so
//! none of it is compiled into a user's build of `larch`.

use std::path::Path;

pub mod directory;
pub mod fuzz;
pub mod images;
pub mod processes;
pub mod recording;

/// The plain storage a handle opened by path would use (pwrite), for the `open_with_storage*`
/// constructors tests call to bring their own compaction file system or process identity.
pub fn file_storage(p: &Path) -> Box<dyn larch::Storage> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    Box::new(larch::FileStorage::new(f, larch::WriteMode::Pwrite))
}

/// A tiny deterministic RNG (xorshift64: shifts 13, 7, 17), so a failure reproduces from the
/// printed seed. The seed must not be 0 (xorshift stays at 0 forever); callers that take an
/// arbitrary seed write `Rng(seed | 1)`.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits. (Named like `Iterator::next` on purpose: every caller already
    /// writes `rng.next()`, and an endless iterator of u64 would add nothing.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Fisher-Yates shuffle of `v`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// A directory on tmpfs when there is one (the power-cut simulations write thousands of
/// images), else under the system temporary directory; removed on drop.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
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
