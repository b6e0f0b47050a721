//! What making one meta page durable costs while other pages of the file are dirty, without
//! larch: `meta_dsync DIR [ROUNDS]`.
//!
//! Writes a 64 MiB file in DIR (removed after) and syncs it. Each round dirties D MiB of
//! 4 KiB pages (not synced: the pages a run of Async commits leaves in the page cache), then
//! times making page 0 durable one of two ways:
//!
//! - `pwrite + fdatasync`: what a durable point does now; the sync writes back every dirty
//!   page of the file first;
//! - `O_DSYNC pwrite`: the page written through a second descriptor opened with `O_DSYNC`,
//!   which syncs that range only (as `pwritev2(.., RWF_DSYNC)` would).
//!
//! - `O_DSYNC, flush running`: the same write while another thread fdatasyncs the D MiB (it
//!   starts 100 us before): what a point's meta write meets when a background flush of the
//!   pages written since is in flight. The write's cache flush waits for the device to finish
//!   what that flush sent it.
//!
//! An untimed fdatasync ends each round, so each starts with only its own D MiB dirty. Rounds
//! of the three ways alternate; it prints each way's median and range for D = 0, 4 and 16 MiB.
//! The second way is the premise of a durable point made in the background
//! (docs/performance.md, "What forced durable points cost"): the commit's pages synced by
//! another thread, then its meta alone.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

const PAGE: u64 = 4096;
const FILE_MIB: u64 = 64;

fn dirty(f: &File, mib: u64, page: &[u8]) -> std::io::Result<()> {
    // Past the first MiB (the meta's), one page at a time as commits write them.
    for i in 0..mib * 256 {
        f.write_all_at(page, (1 << 20) + i * PAGE)?;
    }
    Ok(())
}

fn median_us(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| {
        eprintln!("usage: meta_dsync DIR [ROUNDS]");
        std::process::exit(2)
    }));
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(41);
    let path = dir.join("meta_dsync.dat");
    // The rounds overwrite allocated blocks.
    let f = larch_bench_core::scratch::written_file(&path, FILE_MIB)?;
    let dsync = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(&path)?;
    let page = vec![0xa5_u8; PAGE as usize];
    println!("{rounds} rounds each, microseconds to make page 0 durable: median (min-max)");
    for mib in [0, 4, 16] {
        let mut full = Vec::with_capacity(rounds);
        let mut ranged = Vec::with_capacity(rounds);
        let mut beside = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            dirty(&f, mib, &page)?;
            let t = Instant::now();
            f.write_all_at(&page, 0)?;
            f.sync_data()?;
            full.push(t.elapsed().as_secs_f64() * 1e6);
            dirty(&f, mib, &page)?;
            let t = Instant::now();
            dsync.write_all_at(&page, 0)?;
            ranged.push(t.elapsed().as_secs_f64() * 1e6);
            f.sync_data()?;
            dirty(&f, mib, &page)?;
            let other = f.try_clone()?;
            let flush = std::thread::spawn(move || other.sync_data());
            std::thread::sleep(std::time::Duration::from_micros(100));
            let t = Instant::now();
            dsync.write_all_at(&page, 0)?;
            beside.push(t.elapsed().as_secs_f64() * 1e6);
            flush.join().expect("flush thread")?;
            f.sync_data()?;
        }
        for (name, xs) in [
            ("pwrite + fdatasync", &mut full),
            ("O_DSYNC pwrite", &mut ranged),
            ("O_DSYNC, flush running", &mut beside),
        ] {
            let (m, lo, hi) = median_us(xs);
            println!("  {mib:2} MiB dirty, {name:<22} {m:8.0} us ({lo:.0}-{hi:.0})");
        }
    }
    drop((f, dsync));
    std::fs::remove_file(&path)?;
    Ok(())
}
