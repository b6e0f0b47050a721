//! `larch demo`: the README's "see it work" command. Builds a database, times loading,
//! reading, scanning and deleting, checks it and reports the file's shape.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use larch_engine::{Db, Durability, Options};

use crate::error::{engine, CliError, CliResult};

/// Records per commit (the "batches of 10,000").
const BATCH: u64 = 10_000;
const TREE: &str = "main";

/// Arguments of `larch demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Where to create the database (must not exist; kept afterwards). Default: a temporary
    /// directory, removed at the end.
    #[arg(long, value_name = "P")]
    pub path: Option<PathBuf>,
    /// Number of keys.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub count: u64,
}

/// splitmix64: a bijection on u64, so keys are distinct and arrive in random order, which
/// gives realistic page splits and fill instead of a sorted append.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("{:016x}", mix(i)).as_bytes());
    k
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i:010}-").repeat(4).into_bytes()
}

fn rate(n: u64, d: Duration) -> String {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return "-".into();
    }
    format!("{:.0} ops/s", n as f64 / s)
}

fn line(what: &str, detail: String, n: u64, d: Duration) {
    println!(
        "  {what:<7} {detail:<58} {:>8.3} s  {:>14}",
        d.as_secs_f64(),
        rate(n, d)
    );
}

/// Run `larch demo`.
pub fn run(a: DemoArgs) -> CliResult {
    let (_guard, path) = match &a.path {
        Some(p) if p.exists() => {
            let why = "the demo builds a new database, so give a path that does not exist";
            return Err(CliError::failed(format!(
                "{} already exists; {why}",
                p.display()
            )));
        }
        Some(p) => (None, p.clone()),
        None => {
            let dir = super::TempDir::new("demo")?;
            let path = dir.path().join("demo.larch");
            (Some(dir), path)
        }
    };
    let db = crate::open::writable(&path, Options::default())?;
    demo(&db, &path, a.count).map_err(|e| match e {
        DemoError::Engine(e) => engine(&path, e),
        DemoError::Cli(e) => e,
    })
}

enum DemoError {
    Engine(larch_engine::Error),
    Cli(CliError),
}

impl From<larch_engine::Error> for DemoError {
    fn from(e: larch_engine::Error) -> Self {
        DemoError::Engine(e)
    }
}

impl From<CliError> for DemoError {
    fn from(e: CliError) -> Self {
        DemoError::Cli(e)
    }
}

fn mismatch(what: String) -> DemoError {
    DemoError::Cli(CliError::failed(format!("demo: {what}")))
}

/// Commit the keys `i` in `0..n` that `pick` selects, `BATCH` per commit (async), then sync.
fn batched(
    db: &Db,
    n: u64,
    pick: impl Fn(u64) -> bool,
    insert: bool,
) -> Result<(u64, u64), DemoError> {
    let (mut done, mut commits, mut i) = (0u64, 0u64, 0u64);
    while i < n {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        let mut in_batch = 0;
        {
            let mut t = tx.open_tree(TREE)?;
            while i < n && in_batch < BATCH {
                if pick(i) {
                    if insert {
                        t.insert(&key(i), &value(i))?;
                    } else if !t.remove(&key(i))? {
                        return Err(mismatch(format!("key {i} was missing when deleting it")));
                    }
                    in_batch += 1;
                }
                i += 1;
            }
        }
        if in_batch == 0 {
            // The tail of the range held nothing to do: no empty commit.
            tx.abort();
            break;
        }
        tx.commit()?;
        done += in_batch;
        commits += 1;
    }
    db.sync()?;
    Ok((done, commits))
}

fn demo(db: &Db, path: &Path, n: u64) -> Result<(), DemoError> {
    println!(
        "larch demo: {n} keys of 16 bytes with 64-byte values, in {}",
        path.display()
    );
    println!();

    let t = Instant::now();
    let (loaded, commits) = batched(db, n, |_| true, true)?;
    line(
        "load",
        format!("{loaded} inserts, {commits} commits of <= {BATCH} (async, then sync)"),
        loaded,
        t.elapsed(),
    );

    let t = Instant::now();
    {
        let rx = db.begin_read()?;
        let tree = rx.open_tree(TREE)?;
        for i in 0..n {
            match tree.get(&key(i))? {
                Some(v) if v == value(i).as_slice() => {}
                other => return Err(mismatch(format!("key {i} read back as {other:?}"))),
            }
        }
    }
    line(
        "read",
        format!("{n} point lookups, every value verified"),
        n,
        t.elapsed(),
    );

    let t = Instant::now();
    let scanned = {
        let rx = db.begin_read()?;
        let tree = rx.open_tree(TREE)?;
        let mut prev: Option<&[u8]> = None;
        let mut count = 0u64;
        for e in tree.iter()? {
            let (k, _) = e?;
            if prev.is_some_and(|p| p >= k) {
                return Err(mismatch("the range scan returned keys out of order".into()));
            }
            prev = Some(k);
            count += 1;
        }
        count
    };
    if scanned != n {
        return Err(mismatch(format!(
            "the range scan saw {scanned} entries, expected {n}"
        )));
    }
    line(
        "scan",
        format!("{scanned} entries in key order (full range)"),
        scanned,
        t.elapsed(),
    );

    let t = Instant::now();
    let (deleted, commits) = batched(db, n, |i| i % 2 == 0, false)?;
    line(
        "delete",
        format!("{deleted} removes (every other key), {commits} commits"),
        deleted,
        t.elapsed(),
    );

    let t = Instant::now();
    let report = db.check_report()?;
    let elapsed = t.elapsed();
    let pages = report.reachable_pages + report.unreachable_pages;
    line(
        "check",
        format!("full integrity check of {pages} pages"),
        pages,
        elapsed,
    );
    if !report.is_ok() {
        for p in &report.problems {
            println!("check: {p}");
        }
        return Err(mismatch(format!(
            "check found {} problem(s)",
            report.problems.len()
        )));
    }

    // Random keys in big batches copy most of the tree each commit, so the file is mostly
    // dead pages by now: show what compaction gives back.
    let before = db.stats()?;
    let t = Instant::now();
    let c = db.compact()?;
    line(
        "compact",
        format!(
            "in place: {:.1} -> {:.1} MiB (gain {:.2}x), dead ratio {:.2} before",
            c.before_bytes as f64 / (1 << 20) as f64,
            c.after_bytes as f64 / (1 << 20) as f64,
            c.gain(),
            before.dead_ratio
        ),
        before.live_pages,
        t.elapsed(),
    );
    let report = db.check_report()?;
    let s = db.stats()?;

    println!();
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
    for t in &s.trees {
        println!(
            "tree {:?}: {} entries, depth {}, {} branch + {} leaf + {} overflow pages, fill {:.1}%",
            t.name,
            t.entries,
            t.depth,
            t.branch_pages,
            t.leaf_pages,
            t.overflow_pages,
            t.fill(s.page_size) * 100.0
        );
    }
    if report.is_ok() {
        println!("check: ok");
        Ok(())
    } else {
        for p in &report.problems {
            println!("check: {p}");
        }
        Err(mismatch(format!(
            "check found {} problem(s)",
            report.problems.len()
        )))
    }
}
