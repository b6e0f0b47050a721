//! What large transactions leave in the process, for docs/performance.md, "Memory after a
//! large transaction". Two measurements:
//!
//! - `big_txn_memory N [FILE]`: `N` random 24-byte keys with 150-byte values in one commit
//!   (redb's `rb.load` shape), the process's resident anonymous memory before and after the
//!   commit, then 1,000,000 keys past them inserted in order in one Sync commit (`rb.sorted`),
//!   timed;
//! - `BIG_TXN_ROUNDS=R big_txn_memory N [FILE]`: `R` transactions of `N` such keys in a row
//!   into one growing tree, the time of each (whether the heap goes back to the system
//!   between them decides how much of it each one faults in again).
//!
//! ```text
//! cargo build --release -p larch-engine --example big_txn_memory
//! target/release/examples/big_txn_memory 5000000
//! BIG_TXN_ROUNDS=8 /usr/bin/time -f '%U user %S sys' target/release/examples/big_txn_memory 300000
//! ```
//! With `FILE` the database is made there (and left); otherwise in a temporary directory.

use larch_engine::{Db, Durability, Options, WriteTx};

/// RssAnon of /proc/self/status, in MB (0 where there is none).
fn rss_anon_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1000)
}

/// Insert `n` keys drawn from the xorshift state `x` into tree "t" of `tx`.
fn insert_random(tx: &WriteTx, n: u64, x: &mut u64) -> larch_engine::Result<()> {
    let value = [7u8; 150];
    let mut tree = tx.open_tree("t")?;
    for _ in 0..n {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let mut k = [0u8; 24];
        k[..8].copy_from_slice(&x.to_be_bytes());
        k[8..16].copy_from_slice(&x.rotate_left(17).to_be_bytes());
        tree.insert(&k, &value)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5_000_000);
    let rounds: Option<u64> = std::env::var("BIG_TXN_ROUNDS")
        .ok()
        .map(|s| s.parse())
        .transpose()?;
    let dir = tempfile::tempdir()?;
    let path = match std::env::args().nth(2) {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.path().join("big.larch"),
    };
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path, Options::default())?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;

    if let Some(rounds) = rounds {
        let all = std::time::Instant::now();
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = std::time::Instant::now();
            let tx = db.begin_write()?;
            insert_random(&tx, n, &mut x)?;
            tx.commit()?;
            times.push(format!("{:.2}", t.elapsed().as_secs_f64()));
        }
        println!(
            "{rounds} transactions of {n} random keys: {:.2} s [{}]",
            all.elapsed().as_secs_f64(),
            times.join(" ")
        );
        return Ok(());
    }

    let t = std::time::Instant::now();
    let tx = db.begin_write()?;
    insert_random(&tx, n, &mut x)?;
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
        let value = [7u8; 150];
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
