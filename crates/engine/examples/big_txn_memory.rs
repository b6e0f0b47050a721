//! What a large transaction leaves in the process, for docs/performance.md, "Memory after a
//! large transaction": `N` random 24-byte keys with 150-byte values in one Sync commit (redb's
//! `rb.load` shape), the process's resident anonymous memory before and after the commit,
//! then 1,000,000 keys past them inserted in order in one commit (`rb.sorted`), timed.
//!
//! ```text
//! cargo build --release -p larch-engine --example big_txn_memory
//! target/release/examples/big_txn_memory 5000000 [FILE]
//! ```
//! With `FILE` the database is made there (and left); otherwise in a temporary directory.

use larch_engine::{Db, Durability, Options};

/// RssAnon of /proc/self/status, in MB (0 where there is none).
fn rss_anon_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1000)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5_000_000);
    let dir = tempfile::tempdir()?;
    let path = match std::env::args().nth(2) {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.path().join("big.larch"),
    };
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path, Options::default())?;
    let value = [7u8; 150];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let t = std::time::Instant::now();
    let tx = db.begin_write()?;
    {
        let mut tree = tx.open_tree("t")?;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut k = [0u8; 24];
            k[..8].copy_from_slice(&x.to_be_bytes());
            k[8..16].copy_from_slice(&x.rotate_left(17).to_be_bytes());
            tree.insert(&k, &value)?;
        }
    }
    let before = rss_anon_mb();
    tx.commit()?;
    println!(
        "load of {n} random keys: {:.2} s; resident anonymous memory {before} MB before the \
         commit, {} MB after",
        t.elapsed().as_secs_f64(),
        rss_anon_mb()
    );
    let t = std::time::Instant::now();
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Sync);
    {
        let mut tree = tx.open_tree("t")?;
        for i in 0..1_000_000u64 {
            let mut k = [0xffu8; 32];
            k[24..].copy_from_slice(&i.to_be_bytes());
            tree.insert(&k, &value)?;
        }
    }
    tx.commit()?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "then 1,000,000 keys in order: {secs:.3} s ({:.2}M keys/s); {} MB after",
        1.0 / secs,
        rss_anon_mb()
    );
    Ok(())
}
