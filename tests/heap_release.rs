//! A write transaction that held many dirty nodes gives the heap they freed back to the
//! system when it ends (`larch_pager::release_free_heap`, called by the engine past 64 MiB of
//! dirty nodes). glibc keeps such memory otherwise: after a one-transaction load of 5,000,000
//! keys a process held 1.7 GB of it (docs/performance.md, "Memory after a large
//! transaction"). One test per file: the process's resident memory is what is measured.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use larch::{Db, Options};

/// The most a process may keep of a large transaction's memory once it ended: the writer's
/// bounded caches (24 MiB) and room for the test harness's own allocations.
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

#[test]
fn a_large_transaction_gives_its_nodes_memory_back_when_it_commits_or_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("h.larch"), Options::default()).unwrap();
    let start = rss_anon();
    // 400,000 keys of 208 bytes: about 120 MB of dirty leaves, past the 64 MiB threshold.
    let tx = db.begin_write().unwrap();
    let held = fill(&tx, 400_000, 7);
    tx.commit().unwrap();
    let after_commit = rss_anon();
    let grown = held - start;
    assert!(
        grown > 96 << 20,
        "the transaction should have held over 96 MiB; it grew the process by {grown} bytes"
    );
    // What the writer keeps by design is bounded: 16 MiB of spare node buffers
    // (`SpareNodes::MAX_BYTES`) and 8 MiB of nodes it wrote (`WrittenNodes::MAX_BYTES`).
    assert!(
        after_commit.saturating_sub(start) < KEPT,
        "after the commit the process still holds {} of the {grown} bytes the transaction \
         grew it by",
        after_commit.saturating_sub(start)
    );
    assert_eq!(
        db.begin_read()
            .unwrap()
            .open_tree("t")
            .unwrap()
            .len()
            .unwrap(),
        400_000
    );

    // The same for a transaction that is aborted (dropped).
    let base = rss_anon();
    let tx = db.begin_write().unwrap();
    let held = fill(&tx, 400_000, 11);
    tx.abort();
    let after_abort = rss_anon();
    let grown = held.saturating_sub(base);
    assert!(
        grown > 96 << 20,
        "the aborted transaction grew the process by {grown} bytes"
    );
    assert!(
        after_abort.saturating_sub(base) < KEPT,
        "after the abort the process still holds {} of the {grown} bytes",
        after_abort.saturating_sub(base)
    );
    assert_eq!(
        db.begin_read()
            .unwrap()
            .open_tree("t")
            .unwrap()
            .len()
            .unwrap(),
        400_000
    );
}
