//! Where a commit of redb's write shapes spends its time, per tenth of the commits:
//! `rb_commits DIR LOAD SHAPE:COMMITS[,SHAPE:COMMITS...] [POLICY] [recache]`.
//!
//! Opens a fresh larch file in DIR (removed first) with the harness's defaults, commits LOAD
//! new random keys (24 bytes, 150-byte values, as the `rb.*` steps) in one Sync transaction,
//! then, for each SHAPE in turn, COMMITS commits of it:
//!
//! - `ins1`: one new key, Sync; `insb`: 1,000 new keys, Sync; `insa`: one new key, Async
//!   (then one `Db::sync`, reported on its own); `sorted`: 1,000,000 keys past every other
//!   (24 bytes of 0xFF then a big-endian counter) with `WriteTree::append`, Sync (COMMITS of
//!   them; the `rb.sorted` step is one). `ins1:1000,insb:100,insa:50000,sorted:1` is the order
//!   of the `rb.*` steps.
//!
//! For each tenth of a shape's commits it prints the mean time of a whole transaction
//! (inserts and commit) and of its commit alone and, from `Db::io_stats`, the write calls
//! (runs of pages) and pages written per commit, the syncs of the tenth, and the file's size
//! at the end of the tenth. POLICY is a free-space policy name (default first-fit).
//! `recache`: after the load, close the file, drop its pages from the page cache
//! (`posix_fadvise(DONTNEED)`; the file is synced) and read them back 4 KiB at a time
//! without readahead, and open it again, so that the page cache holds the file in small
//! folios, as it does for a file first written a page at a time; without it the cache keeps
//! the folios the load's large writes made. Compare the two to see what the folio size costs
//! the page writes that follow.

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use larch_bench_core::keys::{KeyGen, Rng, Values, MAX_KEY};
use larch_engine::{Db, Durability, Options, Policy};

const TREE: &str = "bench";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err(
            "usage: rb_commits DIR LOAD SHAPE:COMMITS[,SHAPE:COMMITS...] [POLICY] [recache]".into(),
        );
    }
    let dir = PathBuf::from(&args[0]);
    let load: u64 = args[1].parse()?;
    let mut shapes = Vec::new();
    for part in args[2].split(',') {
        let (shape, commits) = part.split_once(':').ok_or("SHAPE:COMMITS")?;
        let (per_commit, durability) = match shape {
            "ins1" => (1u64, Durability::Sync),
            "insb" => (1_000, Durability::Sync),
            "insa" => (1, Durability::Async),
            "sorted" => (1_000_000, Durability::Sync),
            _ => return Err(format!("unknown shape {shape:?}").into()),
        };
        shapes.push((shape, commits.parse::<u64>()?, per_commit, durability));
    }
    let policy = match args.get(3).map(String::as_str) {
        None | Some("recache") => Policy::FirstFit,
        Some(p) => Policy::from_name(p).ok_or("unknown policy")?,
    };
    let recache = args.iter().skip(3).any(|a| a == "recache");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("bench.larch");
    let opts = Options::default()
        .policy(policy)
        .durability(Durability::Sync);
    let mut db = Db::open(&path, opts)?;
    let keys = KeyGen::new(24)?;
    let values = Values::new(150, 7);
    let mut rng = Rng::new(1);
    let mut buf = [0u8; MAX_KEY];
    let mut next = 1u64;

    let t = Instant::now();
    {
        let tx = db.begin_write()?;
        {
            let mut tr = tx.open_tree(TREE)?;
            for i in next..next + load {
                tr.insert(keys.key(i, &mut buf), values.pick(&mut rng))?;
            }
        }
        tx.commit()?;
        next += load;
    }
    println!(
        "load: {load} keys in {:.2} s, file {:.1} MB",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&path)?.len() as f64 / 1e6
    );
    if recache {
        // Closed first: pages the handle's map has mapped cannot be dropped.
        drop(db);
        let t = Instant::now();
        let f = std::fs::File::open(&path)?;
        let len = f.metadata()?.len();
        // SAFETY: a valid descriptor; advice only.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(format!("posix_fadvise: {r}").into());
        }
        // No readahead: it would bring the pages back in large folios.
        // SAFETY: as above.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        if r != 0 {
            return Err(format!("posix_fadvise: {r}").into());
        }
        let mut page = [0u8; 4096];
        let mut off = 0;
        while off < len {
            f.read_at(&mut page, off)?;
            off += 4096;
        }
        println!(
            "recache: closed, dropped and read back 4 KiB at a time in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        db = Db::open(&path, opts)?;
    }

    for (shape, commits, per_commit, durability) in shapes {
        run_shape(
            &db, &path, &mut next, shape, commits, per_commit, durability,
        )?;
    }
    Ok(())
}

/// `commits` commits of `per_commit` new keys each, reported per tenth.
fn run_shape(
    db: &Db,
    path: &std::path::Path,
    next: &mut u64,
    shape: &str,
    commits: u64,
    per_commit: u64,
    durability: Durability,
) -> Result<(), Box<dyn std::error::Error>> {
    let keys = KeyGen::new(24)?;
    let values = Values::new(150, 7);
    let mut rng = Rng::new(*next);
    let mut buf = [0u8; MAX_KEY];
    println!("{shape}: {commits} commits of {per_commit} keys, {durability:?}");
    println!("tenth  us/txn  us/commit  writes/commit  pages/commit  syncs  file MB");
    let tenth = (commits / 10).max(1);
    let mut done = 0u64;
    while done < commits {
        let n = tenth.min(commits - done);
        let before = db.io_stats();
        let mut spent = Duration::ZERO;
        let whole = Instant::now();
        for _ in 0..n {
            let mut tx = db.begin_write()?;
            tx.set_durability(durability);
            {
                let mut tr = tx.open_tree(TREE)?;
                if shape == "sorted" {
                    let mut key = [0xFFu8; 32];
                    for i in *next..*next + per_commit {
                        key[24..].copy_from_slice(&i.to_be_bytes());
                        tr.append(&key, values.pick(&mut rng))?;
                    }
                } else {
                    for i in *next..*next + per_commit {
                        tr.insert(keys.key(i, &mut buf), values.pick(&mut rng))?;
                    }
                }
            }
            let s = Instant::now();
            tx.commit()?;
            spent += s.elapsed();
            *next += per_commit;
        }
        let whole = whole.elapsed();
        let after = db.io_stats();
        let per = |a: u64, b: u64| (a - b) as f64 / n as f64;
        done += n;
        println!(
            "{:>5}  {:>6.1}  {:>9.1}  {:>13.1}  {:>12.1}  {:>5}  {:>7.1}",
            done / tenth,
            whole.as_secs_f64() * 1e6 / n as f64,
            spent.as_secs_f64() * 1e6 / n as f64,
            per(after.write_calls, before.write_calls),
            per(after.bytes_written, before.bytes_written) / 4096.0,
            after.syncs - before.syncs,
            std::fs::metadata(path)?.len() as f64 / 1e6
        );
    }
    if durability == Durability::Async {
        let before = db.io_stats();
        let s = Instant::now();
        db.sync()?;
        let after = db.io_stats();
        println!(
            "sync: {:.1} ms, {} writes, {} syncs",
            s.elapsed().as_secs_f64() * 1e3,
            after.write_calls - before.write_calls,
            after.syncs - before.syncs
        );
    }
    Ok(())
}
