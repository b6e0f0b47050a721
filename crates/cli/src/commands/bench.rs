//! `larch bench`: a quick single-engine benchmark in the style of `bbolt bench`. A write
//! phase inserts COUNT keys in commits of BATCH, a read phase gets every key back and verifies
//! it; each phase reports ops/s, latency percentiles and (writes) the I/O per commit. The
//! side-by-side comparison with other engines lives in benches/.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use larch_engine::{Db, Durability, Options, Policy};

use crate::error::{engine, CliError, CliResult};

const TREE: &str = "main";
/// Gets timed together for one read latency sample: one clock read per get would cost a
/// noticeable share of a get that hits the page cache.
const READ_GROUP: usize = 64;

/// The order keys are written or read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Order {
    /// Ascending key order.
    Seq,
    /// A shuffled order (xorshift, seeded with --seed).
    Rnd,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Seq => "seq",
            Order::Rnd => "rnd",
        }
    }
}

/// Arguments of `larch bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Number of keys to write and then read.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Inserts per commit.
    #[arg(long, value_name = "B", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
    /// Key size in bytes: a big-endian counter, zero-padded on the left.
    #[arg(long, value_name = "K", default_value_t = 16)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, value_name = "V", default_value_t = 256)]
    pub value_size: usize,
    /// Order of the inserts.
    #[arg(long, value_name = "ORDER", value_enum, default_value_t = Order::Seq)]
    pub write_mode: Order,
    /// Order of the gets.
    #[arg(long, value_name = "ORDER", value_enum, default_value_t = Order::Seq)]
    pub read_mode: Order,
    /// When each commit becomes durable.
    #[arg(long, value_name = "MODE", default_value = "sync", value_parser = crate::durability_parser())]
    pub durability: Durability,
    /// Free-space policy.
    #[arg(long, value_name = "POLICY", default_value = "first-fit", value_parser = crate::policy_parser())]
    pub policy: Policy,
    /// Make Sync commits durable with two fdatasyncs (pages, then meta) instead of one.
    #[arg(long)]
    pub two_fsync: bool,
    /// Page size of the new file.
    #[arg(long, value_name = "BYTES", default_value_t = 4096, value_parser = crate::parse_page_size)]
    pub page_size: usize,
    /// Seed of the shuffles for rnd orders.
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    pub seed: u64,
    /// Database file to create (must not exist). Default: in a temporary directory.
    #[arg(long, value_name = "P")]
    pub path: Option<PathBuf>,
    /// Keep the database afterwards (default: remove it, or the temporary directory).
    #[arg(long)]
    pub keep: bool,
}

/// Removes a file on drop, even when the benchmark fails halfway.
struct RemoveFile(PathBuf);

impl Drop for RemoveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Run `larch bench`.
pub fn run(a: BenchArgs) -> CliResult {
    validate(&a)?;
    // Dropped (removing the file or directory unless --keep) after the database closes.
    let (tmp, remove, path) = match &a.path {
        Some(p) if p.exists() => {
            let why = "the benchmark builds a new database, so give a path that does not exist";
            return Err(CliError::failed(format!(
                "{} already exists; {why}",
                p.display()
            )));
        }
        Some(p) => (None, (!a.keep).then(|| RemoveFile(p.clone())), p.clone()),
        None => {
            let mut dir = super::TempDir::new("bench")?;
            if a.keep {
                dir.keep();
            }
            let path = dir.path().join("bench.larch");
            (Some(dir), None, path)
        }
    };
    let opts = Options::default()
        .create(true)
        .durability(a.durability)
        .policy(a.policy)
        .page_size(a.page_size)
        .one_fsync_commit(!a.two_fsync);
    let db = crate::open::writable(&path, opts)?;
    let result = bench(&db, &a, &path).map_err(|e| match e {
        BenchError::Engine(e) => engine(&path, e),
        BenchError::Cli(e) => e,
    });
    drop(db);
    drop(remove);
    drop(tmp);
    result
}

/// What clap cannot check on its own: the keys must fit the page and tell every key apart.
fn validate(a: &BenchArgs) -> CliResult {
    let max_key = larch_engine::raw::Limits::new(a.page_size).max_key;
    if a.key_size == 0 || a.key_size > max_key {
        return Err(CliError::usage(format!(
            "--key-size {} must be between 1 and {max_key} (a quarter of the page size {})",
            a.key_size, a.page_size
        )));
    }
    if a.key_size < 8 && a.count > 1u64 << (8 * a.key_size) {
        return Err(CliError::usage(format!(
            "--count {} distinct keys do not fit in {} byte(s); at most {}",
            a.count,
            a.key_size,
            1u64 << (8 * a.key_size)
        )));
    }
    Ok(())
}

enum BenchError {
    Engine(larch_engine::Error),
    Cli(CliError),
}

impl From<larch_engine::Error> for BenchError {
    fn from(e: larch_engine::Error) -> Self {
        BenchError::Engine(e)
    }
}

/// xorshift64: small, fast and seedable; plenty for shuffling key orders.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        // splitmix64 of the seed, so 0 and small seeds give a well-mixed nonzero state.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        XorShift((z ^ (z >> 31)).max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-enough in `0..n` (multiply-shift).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// The counters `0..n` in `order` (Fisher-Yates for rnd).
fn key_order(n: u64, order: Order, rng: &mut XorShift) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    if order == Order::Rnd {
        for i in (1..v.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
    v
}

/// Key `i`: its big-endian bytes, right-aligned in `key` (whose other bytes stay zero), so
/// key order is counter order.
fn fill_key(key: &mut [u8], i: u64) {
    let be = i.to_be_bytes();
    let k = key.len();
    if k >= 8 {
        key[k - 8..].copy_from_slice(&be);
    } else {
        key.copy_from_slice(&be[8 - k..]);
    }
}

/// A value buffer: a fixed filler that [`fill_value`] stamps with each key's counter.
fn value_buffer(size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (j as u8).wrapping_mul(31) ^ 0x5a)
        .collect()
}

/// The value of key `i`: its counter in the first (up to) 8 bytes, so every value is checked
/// against its own key.
fn fill_value(value: &mut [u8], i: u64) {
    let n = value.len().min(8);
    value[..n].copy_from_slice(&i.to_le_bytes()[..n]);
}

/// The `p` quantile (nearest rank) of sorted samples.
fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A latency in nanoseconds, in a unit that keeps it short.
fn dur(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", f / 1e6)
    } else {
        format!("{:.3}s", f / 1e9)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `  latency <what>: p50 X  p99 X  p99.9 X  max X`.
fn latency_line(what: &str, samples: &mut [u64]) {
    samples.sort_unstable();
    println!(
        "  latency {what:<42} p50 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}",
        dur(quantile(samples, 0.5)),
        dur(quantile(samples, 0.99)),
        dur(quantile(samples, 0.999)),
        dur(samples.last().copied().unwrap_or(0)),
    );
}

fn rate(n: u64, d: Duration) -> String {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return "- ops/s".into();
    }
    format!("{:.0} ops/s", n as f64 / s)
}

fn bench(db: &Db, a: &BenchArgs, path: &Path) -> Result<(), BenchError> {
    let mut rng = XorShift::new(a.seed);
    let writes = key_order(a.count, a.write_mode, &mut rng);
    let reads = key_order(a.count, a.read_mode, &mut rng);

    println!(
        "larch bench: {} keys of {} bytes, {}-byte values, commits of {}",
        a.count, a.key_size, a.value_size, a.batch_size
    );
    println!(
        "  write {}, read {}, durability {}, policy {}, page size {}, seed {}",
        a.write_mode.name(),
        a.read_mode.name(),
        a.durability.name(),
        a.policy.name(),
        db.page_size(),
        a.seed
    );
    let fate = if a.keep {
        "kept afterwards"
    } else {
        "removed at the end; --keep keeps it"
    };
    println!("  file: {} ({fate})", path.display());
    println!();

    write_phase(db, a, &writes)?;
    read_phase(db, a, &reads)?;

    let s = db.stats()?;
    println!(
        "file: {} bytes ({:.1} MiB), page size {}, high-water mark {} pages",
        s.file_bytes,
        s.file_bytes as f64 / (1 << 20) as f64,
        s.page_size,
        s.high_water
    );
    println!(
        "pages: {} live, {} free, {} pending; dead ratio {:.3}",
        s.live_pages, s.free_pages, s.pending_pages, s.dead_ratio
    );
    Ok(())
}

fn write_phase(db: &Db, a: &BenchArgs, order: &[u64]) -> Result<(), BenchError> {
    let mut key = vec![0u8; a.key_size];
    let mut value = value_buffer(a.value_size);
    let batch = usize::try_from(a.batch_size).unwrap_or(usize::MAX);
    let batches = order.len().div_ceil(batch);
    let (mut per_tx, mut per_commit, mut per_insert) = (
        Vec::with_capacity(batches),
        Vec::with_capacity(batches),
        Vec::with_capacity(batches),
    );
    let io0 = db.io_stats();
    let start = Instant::now();
    for chunk in order.chunks(batch) {
        let t = Instant::now();
        let tx = db.begin_write()?;
        {
            let mut tree = tx.open_tree(TREE)?;
            for &i in chunk {
                fill_key(&mut key, i);
                fill_value(&mut value, i);
                tree.insert(&key, &value)?;
            }
        }
        let c = Instant::now();
        tx.commit()?;
        let end = Instant::now();
        let whole = nanos(end - t);
        per_tx.push(whole);
        per_commit.push(nanos(end - c));
        per_insert.push(whole / chunk.len() as u64);
    }
    // Async and NoMetaSync commits become durable here: part of the cost of writing.
    let s = Instant::now();
    db.sync()?;
    let sync = s.elapsed();
    let elapsed = start.elapsed();
    let io = db.io_stats().since(&io0);
    let commits = io.commits.max(1) as f64;

    println!(
        "write: {} inserts in {} commits: {:.3} s, {} (including a final sync of {})",
        order.len(),
        io.commits,
        elapsed.as_secs_f64(),
        rate(order.len() as u64, elapsed),
        dur(nanos(sync))
    );
    latency_line("per commit (begin to commit returned)", &mut per_tx);
    latency_line("of the commit call alone", &mut per_commit);
    latency_line("per insert (commit latency / its inserts)", &mut per_insert);
    println!(
        "  io per commit: {:.2} write calls, {:.1} KiB written, {:.2} syncs (final sync included)",
        io.write_calls as f64 / commits,
        io.bytes_written as f64 / 1024.0 / commits,
        io.syncs as f64 / commits
    );
    Ok(())
}

fn read_phase(db: &Db, a: &BenchArgs, order: &[u64]) -> Result<(), BenchError> {
    let mut key = vec![0u8; a.key_size];
    let mut expected = value_buffer(a.value_size);
    let mut per_get = Vec::with_capacity(order.len().div_ceil(READ_GROUP));
    let start = Instant::now();
    {
        let rx = db.begin_read()?;
        let tree = rx.open_tree(TREE)?;
        for group in order.chunks(READ_GROUP) {
            let t = Instant::now();
            for &i in group {
                fill_key(&mut key, i);
                fill_value(&mut expected, i);
                match tree.get(&key)? {
                    Some(v) if v == expected.as_slice() => {}
                    Some(v) => {
                        return Err(BenchError::Cli(CliError::failed(format!(
                            "bench: key {i} read back a wrong value ({} bytes, expected {})",
                            v.len(),
                            expected.len()
                        ))))
                    }
                    None => {
                        return Err(BenchError::Cli(CliError::failed(format!(
                            "bench: key {i} is missing after the write phase"
                        ))))
                    }
                }
            }
            per_get.push(nanos(t.elapsed()) / group.len() as u64);
        }
    }
    let elapsed = start.elapsed();
    println!(
        "read: {} gets: {:.3} s, {}, every value verified",
        order.len(),
        elapsed.as_secs_f64(),
        rate(order.len() as u64, elapsed)
    );
    latency_line(
        &format!("per get (groups of {READ_GROUP} timed together)"),
        &mut per_get,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_ordered_counters() {
        let mut k = [0u8; 10];
        fill_key(&mut k, 0x0102);
        assert_eq!(k, [0, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
        let mut short = [0u8; 2];
        fill_key(&mut short, 0x0304);
        assert_eq!(short, [3, 4]);
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        fill_key(&mut a, 255);
        fill_key(&mut b, 256);
        assert!(a < b);
    }

    #[test]
    fn shuffles_are_permutations_and_seeded() {
        let mut rng = XorShift::new(7);
        let mut v = key_order(1000, Order::Rnd, &mut rng);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        let again = key_order(1000, Order::Rnd, &mut XorShift::new(7));
        assert_eq!(v, again);
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
        assert_eq!(
            key_order(5, Order::Seq, &mut rng),
            vec![0, 1, 2, 3, 4],
            "seq is ascending"
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let s: Vec<u64> = (1..=1000).collect();
        assert_eq!(quantile(&s, 0.5), 500);
        assert_eq!(quantile(&s, 0.99), 990);
        assert_eq!(quantile(&s, 0.999), 999);
        assert_eq!(quantile(&[42], 0.999), 42);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(dur(950), "950ns");
        assert_eq!(dur(12_340), "12.3µs");
        assert_eq!(dur(1_500_000), "1.50ms");
        assert_eq!(dur(2_000_000_000), "2.000s");
    }
}
