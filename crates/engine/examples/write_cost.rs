//! A deterministic write workload for counting instructions (docs/performance.md, "Write path"):
//! the harness's `load` (hashed keys, 1,000 inserts per commit, Async, one sync) and then
//! `owa` (one random existing key overwritten per commit, Async), without threads or timers.
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*write_cost::owa*' \
//!     target/release/examples/write_cost 20000 2000
//! ```
//! Arguments: documents (default 20000), owa commits (default 2000). With
//! `WRITE_COST_CT=FRACTION` the database has that compaction threshold, and the run prints how
//! many background compactions it made; with `WRITE_COST_OWS=1` the overwrites are Sync commits
//! (the harness's `ows`); `WRITE_COST_FOLIOS=large` writes large page-cache folios (the
//! default is the engine's, single-page ones); `WRITE_COST_UNSYNCED=off` sets
//! `max_unsynced_bytes(None)` (no forced durable points), `WRITE_COST_UNSYNCED=BYTES` that
//! bound; `WRITE_COST_TIMES=1` times each overwrite commit and prints the percentiles, the
//! time spent in commits over 1 ms and the slowest commits (docs/performance.md, "What
//! durable points cost the writer");
//! `WRITE_COST_MODE=hybrid|mmap` sets the write mode (the default is pwrite);
//! `WRITE_COST_THREADS=N` makes the overwrites on N threads at once (the harness's owa.n), each
//! commit timed, and prints the syncs the engine made while they ran (`Db::io_stats`).

use larch_engine::{Db, Durability, Options, Policy};

const BATCH: u64 = 1000;
const VALUE: [u8; 256] = [7; 256];

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The harness's 16-byte key of document `i`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix64(i).to_be_bytes());
    k[8..].copy_from_slice(&mix64(i.wrapping_add(0x9e37_79b9_7f4a_7c15)).to_be_bytes());
    k
}

#[inline(never)]
fn load(db: &Db, docs: u64) -> larch_engine::Result<()> {
    let mut next = 1;
    while next <= docs {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        {
            let mut t = tx.open_tree("t")?;
            for i in next..(next + BATCH).min(docs + 1) {
                t.insert(&key(i), &VALUE)?;
            }
        }
        tx.commit()?;
        next += BATCH;
    }
    db.sync()
}

#[inline(never)]
fn owa(db: &Db, docs: u64, commits: u64, durability: Durability) -> larch_engine::Result<()> {
    let mut r = 1u64;
    for _ in 0..commits {
        r = mix64(r);
        let mut tx = db.begin_write()?;
        tx.set_durability(durability);
        tx.open_tree("t")?.insert(&key(1 + r % docs), &VALUE)?;
        tx.commit()?;
    }
    db.sync()
}

/// `owa` with each commit timed: the slowest commits and the percentiles (`WRITE_COST_TIMES=1`).
fn owa_timed(db: &Db, docs: u64, commits: u64, durability: Durability) -> larch_engine::Result<()> {
    let mut r = 1u64;
    let mut times = Vec::with_capacity(commits as usize);
    for c in 0..commits {
        r = mix64(r);
        let t = std::time::Instant::now();
        let mut tx = db.begin_write()?;
        tx.set_durability(durability);
        tx.open_tree("t")?.insert(&key(1 + r % docs), &VALUE)?;
        tx.commit()?;
        times.push((t.elapsed().as_nanos() as u64, c));
    }
    let mut sorted = times.clone();
    sorted.sort_unstable();
    let pct = |q: f64| sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)].0 / 1000;
    println!(
        "commit us: p50 {} p90 {} p99 {} p999 {} max {}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        sorted.last().map_or(0, |t| t.0 / 1000)
    );
    let total: u64 = times.iter().map(|t| t.0).sum();
    let over: u64 = times.iter().filter(|t| t.0 > 1_000_000).map(|t| t.0).sum();
    println!(
        "commits: {:.3} s in all, {:.3} s in {} commits over 1 ms",
        total as f64 / 1e9,
        over as f64 / 1e9,
        times.iter().filter(|t| t.0 > 1_000_000).count()
    );
    let mut slow: Vec<_> = sorted
        .iter()
        .rev()
        .take(30)
        .map(|&(t, c)| (c, t / 1000))
        .collect();
    slow.sort_unstable();
    println!("slowest (commit, us): {slow:?}");
    db.sync()
}

/// `owa` on `threads` threads at once, each commit timed (`WRITE_COST_THREADS=N`), with the
/// foreground syncs, background flushes and durable meta writes they caused.
fn owa_threads(db: &Db, docs: u64, commits: u64, threads: u64) -> larch_engine::Result<()> {
    let before = db.io_stats();
    let mut times: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> larch_engine::Result<Vec<u64>> {
                    let mut r = 1 + t;
                    let mut times = Vec::with_capacity((commits / threads) as usize);
                    for _ in 0..commits / threads {
                        r = mix64(r);
                        let start = std::time::Instant::now();
                        let mut tx = db.begin_write()?;
                        tx.set_durability(Durability::Async);
                        tx.open_tree("t")?.insert(&key(1 + r % docs), &VALUE)?;
                        tx.commit()?;
                        times.push(start.elapsed().as_nanos() as u64);
                    }
                    Ok(times)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().expect("writer thread")?);
        }
        Ok::<_, larch_engine::Error>(all)
    })?;
    let io = db.io_stats().since(&before);
    times.sort_unstable();
    let pct = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)] / 1000;
    println!(
        "{threads} threads, commit us: p50 {} p90 {} p99 {} p999 {} max {}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        times.last().map_or(0, |t| t / 1000)
    );
    println!(
        "while they ran: {} foreground syncs, {} background flushes, {} durable meta writes, {} waits for a point at the bound",
        io.syncs, io.background_flushes, io.durable_meta_writes, io.point_waits
    );
    db.sync()
}

/// The shape the writes left: leaves and their fill, and the pages below the high-water mark.
fn report(db: &Db, after: &str) -> larch_engine::Result<()> {
    let s = db.stats()?;
    if let Some(t) = s.trees.iter().find(|t| t.name == "t") {
        println!(
            "after {after}: {} leaf pages, fill {:.1}%, high water {} pages ({} live)",
            t.leaf_pages,
            100.0 * t.fill(s.page_size),
            s.high_water,
            s.live_pages
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().ok());
    let docs = args.next().flatten().unwrap_or(20_000);
    let commits = args.next().flatten().unwrap_or(2_000);
    let dir = tempfile::tempdir()?;
    let ct = std::env::var("WRITE_COST_CT")
        .ok()
        .map(|v| v.parse::<f64>())
        .transpose()?;
    let mut opts = Options::default();
    match std::env::var("WRITE_COST_UNSYNCED").as_deref() {
        Ok("off") => opts = opts.max_unsynced_bytes(None),
        Ok(bytes) => opts = opts.max_unsynced_bytes(Some(bytes.parse()?)),
        Err(_) => {}
    }
    let opts = opts
        .policy(Policy::FirstFit)
        .durability(Durability::Sync)
        .compaction_threshold(ct)
        .cache_folios(match std::env::var("WRITE_COST_FOLIOS").as_deref() {
            Ok("large") => larch_engine::CacheFolios::Large,
            _ => larch_engine::CacheFolios::Small,
        })
        .write_mode(match std::env::var("WRITE_COST_MODE").as_deref() {
            Ok("hybrid") => larch_engine::WriteMode::Hybrid,
            Ok("mmap") => larch_engine::WriteMode::Mmap,
            _ => larch_engine::WriteMode::Pwrite,
        });
    let db = Db::open(dir.path().join("w.larch"), opts)?;
    let t = std::time::Instant::now();
    load(&db, docs)?;
    let loaded = db.io_stats().bytes_written;
    report(&db, "load")?;
    println!(
        "load: {:.2} s, {} background compactions",
        t.elapsed().as_secs_f64(),
        db.compactions()
    );
    // WRITE_COST_OWS=1: the overwrites are Sync commits (the harness's ows.1).
    let durability = match std::env::var("WRITE_COST_OWS").as_deref() {
        Ok("1") => Durability::Sync,
        _ => Durability::Async,
    };
    let t = std::time::Instant::now();
    let threads = std::env::var("WRITE_COST_THREADS")
        .ok()
        .map(|v| v.parse::<u64>())
        .transpose()?;
    if let Some(n) = threads.filter(|&n| n > 0) {
        owa_threads(&db, docs, commits, n)?;
    } else if std::env::var("WRITE_COST_TIMES").as_deref() == Ok("1") {
        owa_timed(&db, docs, commits, durability)?;
    } else {
        owa(&db, docs, commits, durability)?;
    }
    println!("owa: {:.2} s with its sync", t.elapsed().as_secs_f64());
    report(&db, "owa")?;
    if ct.is_some() {
        println!("background compactions in all: {}", db.compactions());
    }
    let rx = db.begin_read()?;
    let n = rx.open_tree("t")?.len()?;
    assert_eq!(n, docs);
    println!(
        "{docs} documents loaded ({} KiB written), {commits} one-key commits ({} KiB written)",
        loaded / 1024,
        (db.io_stats().bytes_written - loaded) / 1024
    );
    Ok(())
}
