//! The cost of a sorted bulk load in one transaction (`WriteTree::append`), for
//! docs/performance.md, "Sorted bulk load": two rounds of `N` appends (32-byte keys in order,
//! 150-byte values, redb's `rb.sorted` shape), each one Sync commit, timed apart: the appends
//! and the commit. Run it under `/usr/bin/time -f '%M KB'` for the peak resident memory.
//!
//! ```text
//! cargo build --release -p larch-engine --example append_cost
//! /usr/bin/time -f 'rss %M KB, %e s' target/release/examples/append_cost 1000000 [FILE]
//! ```
//! With `FILE` the database is made there (and left); otherwise in a temporary directory.
//! `APPEND_COST_WAY=insert` makes the same keys with `WriteTree::insert` (in order).

use larch_engine::{Db, Durability, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir()?;
    let path = match std::env::args().nth(2) {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.path().join("append.larch"),
    };
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path, Options::default())?;
    let value = [7u8; 150];
    let insert = std::env::var("APPEND_COST_WAY").as_deref() == Ok("insert");
    for round in 0..2 {
        let t = std::time::Instant::now();
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Sync);
        {
            let mut tree = tx.open_tree("t")?;
            for i in 0..n {
                let mut k = [0xffu8; 32];
                k[24..].copy_from_slice(&(round * n + i).to_be_bytes());
                if insert {
                    tree.insert(&k, &value)?;
                } else {
                    tree.append(&k, &value)?;
                }
            }
        }
        let appended = t.elapsed();
        tx.commit()?;
        println!(
            "round {round}: appends {:.3} s, commit {:.3} s, file {} bytes, leaves written \
             before the commit so far {}",
            appended.as_secs_f64(),
            (t.elapsed() - appended).as_secs_f64(),
            std::fs::metadata(&path)?.len(),
            db.io_stats().spilled_pages
        );
    }
    Ok(())
}
