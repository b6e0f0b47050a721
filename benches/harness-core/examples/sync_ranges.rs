//! What a durable commit's shape costs the device, without larch: `sync_ranges DIR [ROUNDS]`.
//!
//! Writes a 256 MiB file in DIR (removed after), then for each shape below times ROUNDS
//! (default 2,000) rounds of its 4 KiB pwrites followed by one fdatasync, twice, the shapes
//! interleaved so that a noisy machine spreads its noise over all of them. The shapes:
//!
//! - `1 page`: one page at a random offset (the harness's fdatasync limit writes the same
//!   page each time; this one moves);
//! - `run of 4`: four adjacent pages at a random offset, one call;
//! - `meta + run of 4`: page 0, then four adjacent pages at a random offset;
//! - `meta + run + 2 pages`: page 0, four adjacent pages and two single pages, each at a
//!   random offset: a one-key Sync commit of a depth-4 tree as larch writes it now (the meta,
//!   the hot run, the leaf, one branch);
//! - `meta next to run + 2 pages`: page 1 and the run right after it (pages 2-5), and two
//!   single pages: the same with the hot run placed against the meta;
//! - `4 pages`, `16 pages`, `64 pages`: single pages at random offsets; what a page costs
//!   when many go to the device at once (a sync of many scattered pages, as a checkpoint or
//!   the kernel's writeback would make) rather than in one commit's handful.
//!
//! It prints each shape's microseconds per round (the lower of the two passes) and the ratio
//! to `1 page`. Each separate range is its own request to the device; on a virtio disk each
//! request is a notification of the host (`iowrite16` in `perf record` of a Sync commit).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

const PAGE: u64 = 4096;
const FILE_PAGES: u64 = 65_536;

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// (name, the page runs one round writes: (first page, pages); u64::MAX for a random page).
const SHAPES: [(&str, &[(u64, u64)]); 8] = [
    ("1 page", &[(u64::MAX, 1)]),
    ("run of 4", &[(u64::MAX, 4)]),
    ("meta + run of 4", &[(0, 1), (u64::MAX, 4)]),
    (
        "meta + run + 2 pages",
        &[(0, 1), (u64::MAX, 4), (u64::MAX, 1), (u64::MAX, 1)],
    ),
    (
        "meta next to run + 2 pages",
        &[(1, 5), (u64::MAX, 1), (u64::MAX, 1)],
    ),
    (
        "4 pages",
        &[(u64::MAX, 1), (u64::MAX, 1), (u64::MAX, 1), (u64::MAX, 1)],
    ),
    ("16 pages", &[(u64::MAX, 1); 16]),
    ("64 pages", &[(u64::MAX, 1); 64]),
];

fn round(f: &File, runs: &[(u64, u64)], rng: &mut Rng, buf: &[u8]) -> std::io::Result<()> {
    for &(first, pages) in runs {
        // Random runs start past the first 64 pages (the metas' and the fixed run's).
        let first = if first == u64::MAX {
            64 + rng.below(FILE_PAGES - 64 - pages)
        } else {
            first
        };
        f.write_all_at(&buf[..(pages * PAGE) as usize], first * PAGE)?;
    }
    f.sync_data()
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| {
        eprintln!("usage: sync_ranges DIR [ROUNDS]");
        std::process::exit(2)
    }));
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let path = dir.join("sync_ranges.dat");
    let buf = vec![0x5a_u8; 8 * PAGE as usize];
    // The rounds overwrite allocated blocks.
    let f = larch_bench_core::scratch::written_file(&path, (FILE_PAGES * PAGE) >> 20)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut best = [f64::MAX; SHAPES.len()];
    for _pass in 0..2 {
        for (i, (_, runs)) in SHAPES.iter().enumerate() {
            let t = Instant::now();
            for _ in 0..rounds {
                round(&f, runs, &mut rng, &buf)?;
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
            best[i] = best[i].min(us);
        }
    }
    drop(f);
    std::fs::remove_file(&path)?;
    println!("{rounds} rounds of each shape, the better of two passes:");
    for (i, (name, _)) in SHAPES.iter().enumerate() {
        println!(
            "  {name:<28} {:7.1} us  {:5.2}x one page",
            best[i],
            best[i] / best[0]
        );
    }
    Ok(())
}
