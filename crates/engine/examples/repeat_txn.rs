//! Large transactions one after another, for docs/performance.md, "Memory after a large
//! transaction": `ROUNDS` transactions of `N` random 24-byte keys with 150-byte values each
//! (Async commits into one growing tree), the time of each. Whether the heap the dirty nodes
//! freed goes back to the system between them decides how much of it each transaction must
//! fault in again.
//!
//! ```text
//! cargo build --release -p larch-engine --example repeat_txn
//! /usr/bin/time -f '%U user %S sys' target/release/examples/repeat_txn 300000 8 FILE
//! ```

use larch_engine::{Db, Options};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(300_000);
    let rounds: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10);
    let path = std::path::PathBuf::from(
        std::env::args()
            .nth(3)
            .ok_or("usage: repeat_txn N ROUNDS FILE")?,
    );
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path, Options::default())?;
    let value = [7u8; 150];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let all = std::time::Instant::now();
    let mut times = Vec::new();
    for _ in 0..rounds {
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
                tree.insert(&k, &value)?;
            }
        }
        tx.commit()?;
        times.push(format!("{:.2}", t.elapsed().as_secs_f64()));
    }
    println!(
        "{} rounds of {n}: {:.2} s [{}]",
        rounds,
        all.elapsed().as_secs_f64(),
        times.join(" ")
    );
    Ok(())
}
