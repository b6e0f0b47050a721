//! The heap a large write transaction's dirty nodes freed goes back to the system
//! (`larch_pager::release_free_heap`, when `scratch::HeapRelease` says): at the end of a
//! large transaction (64 MiB of dirty nodes or more) that follows a small one, and at the end
//! of the first small transaction after large ones that kept it. glibc keeps such memory
//! otherwise: after a one-transaction load of 5,000,000 keys a process held 1.7 GB of it
//! (docs/performance.md, "Memory after a large transaction"). One test per file: the
//! process's resident memory is what is measured.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use larch::{Db, Options};

/// The most a process may keep of a large transaction's memory once it gave it back: the
/// writer's bounded caches (16 MiB of spare node buffers, `SpareNodes::MAX_BYTES`, and 8 MiB
/// of nodes it wrote, `WrittenNodes::MAX_BYTES`) and room for the test harness's own.
const KEPT: u64 = 48 << 20;

/// The process's resident anonymous memory, in bytes.
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/self/status");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

/// Insert `n` keys in random order into tree "t" of an open transaction; returns the
/// process's resident anonymous memory just before the transaction ends.
fn fill(tx: &larch::WriteTx, n: u64, seed: u64) -> u64 {
    let mut t = tx.open_tree("t").unwrap();
    let mut x = seed | 1;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t.insert(&x.to_be_bytes(), &[x as u8; 200]).unwrap();
    }
    drop(t);
    rss_anon()
}

/// One small commit (a key overwritten).
fn small_commit(db: &Db) {
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"small", b"v").unwrap();
    tx.commit().unwrap();
}

fn keys(db: &Db) -> u64 {
    db.begin_read()
        .unwrap()
        .open_tree("t")
        .unwrap()
        .len()
        .unwrap()
}

#[test]
fn a_large_transaction_gives_its_nodes_memory_back_unless_another_large_one_follows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("h.larch"), Options::default()).unwrap();
    small_commit(&db);

    // A large commit after a small one: 400,000 keys of 208 bytes, about 125 MB of dirty
    // leaves, gives its heap back when it ends.
    let start = rss_anon();
    let tx = db.begin_write().unwrap();
    let held = fill(&tx, 400_000, 7);
    tx.commit().unwrap();
    let after = rss_anon();
    let grown = held - start;
    assert!(
        grown > 96 << 20,
        "the transaction grew the process by only {grown} bytes"
    );
    // Its dirty nodes hold little more than their keys and values: arenas grow by a quarter
    // past 2 KiB and a split leaf keeps only its live bytes (`Node::make_room`). With a
    // `Vec`'s doubling this grew by 162 MB, 1.95 times the 83.2 MB of keys and values;
    // now by 125 MB, 1.50 times.
    let data = 400_000 * 208;
    assert!(
        grown * 10 < data * 17,
        "the transaction grew the process by {grown} bytes for {data} bytes of keys and values"
    );
    assert!(
        after.saturating_sub(start) < KEPT,
        "after the commit the process still holds {} of the {grown} bytes the transaction \
         grew it by",
        after.saturating_sub(start)
    );
    assert_eq!(keys(&db), 400_001);

    // The same for a large transaction that is aborted, after a small commit.
    small_commit(&db);
    let base = rss_anon();
    let tx = db.begin_write().unwrap();
    let held = fill(&tx, 400_000, 11);
    tx.abort();
    let after = rss_anon();
    let grown = held.saturating_sub(base);
    assert!(
        grown > 96 << 20,
        "the aborted transaction grew the process by {grown} bytes"
    );
    assert!(
        after.saturating_sub(base) < KEPT,
        "after the abort the process still holds {} of the {grown} bytes",
        after.saturating_sub(base)
    );
    assert_eq!(keys(&db), 400_001);

    // Two large transactions in a row (after the abort above, also large): the second keeps
    // the heap for the next large one, and the small commit after it gives it back.
    let base = rss_anon();
    let tx = db.begin_write().unwrap();
    let held = fill(&tx, 200_000, 13);
    tx.commit().unwrap();
    let kept = rss_anon();
    let grown = held.saturating_sub(base);
    assert!(
        grown > 96 << 20,
        "the transaction grew the process by {grown} bytes"
    );
    assert!(
        kept.saturating_sub(base) > grown / 2,
        "a large transaction after a large one should keep its heap: {} of {grown} bytes kept",
        kept.saturating_sub(base)
    );
    small_commit(&db);
    let after = rss_anon();
    assert!(
        after.saturating_sub(base) < KEPT,
        "the small commit after kept heap should give it back: {} bytes still held",
        after.saturating_sub(base)
    );
    assert_eq!(keys(&db), 600_001);
}
