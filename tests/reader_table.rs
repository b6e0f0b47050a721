//! The reader table under load: many threads begin and end short reads (and a few longer
//! ones) while a writer commits and reuses the pages it frees. Every commit writes its own
//! txid into every value, so a reader that saw a page reused under it would find a value that
//! is not its snapshot's txid.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use larch::{Db, Options, Policy, ReadTx, WriteMode};

const KEYS: u32 = 200;
const COMMITS: u64 = 80;
const READERS: usize = 6;
const TREE: &str = "t";

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

/// 64 bytes: the txid, eight times.
fn value_for(txid: u64) -> Vec<u8> {
    txid.to_le_bytes().repeat(8)
}

/// Every value of the snapshot must be the one its own commit wrote.
fn check_snapshot(rx: &ReadTx) {
    let t = rx.open_tree(TREE).unwrap();
    let want = value_for(rx.txid());
    for i in 0..KEYS {
        let v = t.get(&key(i)).unwrap().expect("every key is present");
        assert_eq!(v, &want[..], "key {i} in snapshot {}", rx.txid());
    }
    assert_eq!(t.iter().unwrap().count(), KEYS as usize);
}

fn every_reader_sees_its_snapshot_while_the_writer_reuses_pages(mode: WriteMode) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().policy(Policy::FirstFit).write_mode(mode);
    let db = Db::open(dir.path().join("readers.larch"), opts).unwrap();
    let commit_all = |db: &Db| {
        let tx = db.begin_write().unwrap();
        let v = value_for(tx.txid());
        {
            let mut t = tx.open_tree(TREE).unwrap();
            for i in 0..KEYS {
                t.insert(&key(i), &v).unwrap();
            }
        }
        tx.commit().unwrap();
    };
    commit_all(&db);
    let stop = AtomicBool::new(false);
    // Snapshots each reader has begun, so the writer can pace itself (below).
    let reads: Vec<AtomicU64> = (0..READERS).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for r in 0..READERS {
            let (db, stop, reads) = (&db, &stop, &reads[r]);
            s.spawn(move || {
                // Some readers keep a few snapshots open across commits, so old txids stay
                // registered while newer readers come and go in the same shard.
                let keep = if r % 2 == 0 { 0 } else { r };
                let mut held: VecDeque<ReadTx> = VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    let rx = db.begin_read().unwrap();
                    check_snapshot(&rx);
                    reads.fetch_add(1, Ordering::Relaxed);
                    held.push_back(rx);
                    while held.len() > keep {
                        // Still exactly its commit, however many commits came since.
                        let old = held.pop_front().unwrap();
                        check_snapshot(&old);
                    }
                }
            });
        }
        for _ in 0..COMMITS {
            commit_all(&db);
            // Let every reader begin two snapshots after this commit, so a reader holding
            // `keep` snapshots pins the pages of a bounded number of commits however the
            // threads are scheduled.
            let seen: Vec<u64> = reads.iter().map(|n| n.load(Ordering::Relaxed)).collect();
            while reads
                .iter()
                .zip(&seen)
                .any(|(n, &s)| n.load(Ordering::Relaxed) < s + 2)
            {
                std::thread::yield_now();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(reads
        .iter()
        .all(|n| n.load(Ordering::Relaxed) >= 2 * COMMITS));
    let st = db.stats().unwrap();
    assert_eq!(st.readers, 0, "every reader ended");
    assert_eq!(st.oldest_reader, None);
    // Freed pages were handed out again: without reuse every commit would add at least its
    // tree's pages (and its catalog and free-map pages besides); readers pin a few commits.
    let per_commit = st.trees[0].leaf_pages + st.trees[0].branch_pages;
    assert!(
        st.high_water < COMMITS * per_commit / 4,
        "high water {} after {COMMITS} commits of {per_commit} pages: pages were not reused",
        st.high_water
    );
    let rx = db.begin_read().unwrap();
    check_snapshot(&rx);
}

#[test]
fn every_reader_sees_its_snapshot_while_the_writer_reuses_pages_pwrite() {
    every_reader_sees_its_snapshot_while_the_writer_reuses_pages(WriteMode::Pwrite);
}

#[test]
fn every_reader_sees_its_snapshot_while_the_writer_reuses_pages_mmap() {
    every_reader_sees_its_snapshot_while_the_writer_reuses_pages(WriteMode::Mmap);
}
