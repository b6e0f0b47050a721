//! The instructions of one harness operation, for callgrind: `op_costs DIR OP N [DOCS]` opens a
//! fresh database in DIR (removed first), loads DOCS documents (default 20,000; async, then one
//! sync), then runs N operations of OP the way the harness's larch adapter does:
//!
//! - `ows`: overwrite a random existing key, one key per Sync commit (the ows.1 step);
//! - `pq`: one read transaction, `open_tree`, `get` of a random existing key (pq.1).
//!
//! Run it under `valgrind --tool=callgrind` at two N and divide the difference of the totals
//! by the difference of the N: the load and the open cancel out, leaving instructions per
//! operation (user space only: a system call counts its few instructions of libc, not the
//! kernel's work). The source has no dependency beyond `larch-engine`'s long-standing API, so
//! the same file builds against an older revision for a before/after comparison
//! (docs/benchmarks.md, "Several processes").

use std::path::PathBuf;

use larch_engine::{Db, Durability, Options};

const DOCS: u64 = 20_000;
const TREE: &str = "bench";

fn key(i: u64) -> [u8; 16] {
    // splitmix64 of the document number, then its complement: distinct, not in order.
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&z.to_be_bytes());
    k[8..].copy_from_slice(&(!z).to_be_bytes());
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, op, n, docs) = match args.as_slice() {
        [dir, op, n] => (dir, op, n, DOCS),
        [dir, op, n, docs] => (dir, op, n, docs.parse()?),
        _ => return Err("usage: op_costs DIR ows|pq N [DOCS]".into()),
    };
    let n: u64 = n.parse()?;
    let dir = PathBuf::from(dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let db = Db::open(
        dir.join("bench.larch"),
        Options::default().durability(Durability::Sync),
    )?;
    let value = [0x5au8; 256];
    let mut next = 1;
    while next <= docs {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        {
            let mut t = tx.open_tree(TREE)?;
            for i in next..(next + 1000).min(docs + 1) {
                t.insert(&key(i), &value)?;
            }
        }
        tx.commit()?;
        next += 1000;
    }
    db.sync()?;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut doc = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        1 + x % docs
    };
    let mut found = 0u64;
    for _ in 0..n {
        let k = key(doc());
        match op.as_str() {
            "ows" => {
                let mut tx = db.begin_write()?;
                tx.set_durability(Durability::Sync);
                tx.open_tree(TREE)?.insert(&k, &value)?;
                tx.commit()?;
            }
            "pq" => {
                let rx = db.begin_read()?;
                let t = rx.open_tree(TREE)?;
                found += t.get(&k)?.map_or(0, |v| v.len() as u64);
            }
            other => return Err(format!("unknown op {other:?}: ows or pq").into()),
        }
    }
    std::hint::black_box(found);
    drop(db);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
