//! A commit's hot pages (the tree roots, the catalog, the free map's root) go to one run, and
//! the commit after next takes that run again (`Txn::gather_hot_pages`): one-key commits write
//! them in one call each, turn about between two runs, and the file does not grow for it.

use larch::{Db, Durability, Options, Policy};

const KEYS: u32 = 2_000;

/// A file with one tree of `KEYS` keys (a root over leaves), loaded in one commit.
fn loaded(dir: &std::path::Path, policy: Policy) -> Db {
    let db = Db::open(dir.join("h.larch"), Options::default().policy(policy)).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..KEYS {
            t.insert(&i.to_be_bytes(), &[0u8; 40]).unwrap();
        }
    }
    tx.commit().unwrap();
    db
}

/// Overwrite one key (same size: no split) per commit, `commits` times from key `first`;
/// returns the write calls of each commit.
fn one_key_commits(db: &Db, durability: Durability, first: u32, commits: u32) -> Vec<u64> {
    let mut calls = Vec::new();
    for i in first..first + commits {
        let before = db.io_stats().write_calls;
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(durability);
        // Spread over the leaves: every commit copies another leaf.
        let key = (i * 7919) % KEYS;
        tx.open_tree("t")
            .unwrap()
            .insert(&key.to_be_bytes(), &[i as u8; 40])
            .unwrap();
        tx.commit().unwrap();
        calls.push(db.io_stats().write_calls - before);
    }
    calls
}

#[test]
fn one_key_sync_commits_write_their_hot_pages_in_one_run() {
    for policy in [Policy::FirstFit, Policy::BestFit] {
        let dir = tempfile::tempdir().unwrap();
        let db = loaded(dir.path(), policy);
        // The first commits start the two runs.
        one_key_commits(&db, Durability::Sync, 0, 4);
        let len = db.stats().unwrap().file_bytes;
        let calls = one_key_commits(&db, Durability::Sync, 4, 200);
        // Leaf, root, catalog, free map (one page at this size), meta: the root, catalog and
        // free map in one call, the leaf in another (or the same, when it lands next to
        // them), the meta in a third. Scattered, it is four or five.
        for (i, &c) in calls.iter().enumerate() {
            assert!(c <= 3, "{policy:?}: commit {i} wrote {c} runs: {calls:?}");
        }
        assert_eq!(
            db.stats().unwrap().file_bytes,
            len,
            "{policy:?}: the runs grew the file"
        );
        db.check().unwrap();
    }
}

#[test]
fn one_key_async_commits_write_their_hot_pages_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path(), Policy::FirstFit);
    one_key_commits(&db, Durability::Async, 0, 4);
    let calls = one_key_commits(&db, Durability::Async, 4, 200);
    // Async commits' pages are reusable once no reader holds them: the same turns, except
    // around the durable points the unsynced bound forces. An Async commit writes no meta,
    // so two calls: the hot run and the leaf (about 3.7 with the pages scattered).
    let mean = calls.iter().sum::<u64>() as f64 / calls.len() as f64;
    assert!(mean <= 2.5, "{mean} runs per commit: {calls:?}");
    db.sync().unwrap();
    db.check().unwrap();
}

/// A commit of thousands of new pages in a file whose free pages are short holes takes runs
/// of 16 pages or more and the end of the file, not every hole: filling each hole would cost
/// it a write call per hole (redb's sorted-insert shape after its other shapes: 4,065 calls
/// for 48,156 pages). The holes stay free for the small commits that follow.
#[test]
fn a_big_commit_leaves_short_holes_for_small_commits_and_writes_in_few_calls() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("big.larch"),
        Options::default().policy(Policy::FirstFit),
    )
    .unwrap();
    // 3,000 values of two pages each, then every other one removed: ~1,500 holes of two
    // pages (once the removal is durable).
    let value = vec![5u8; 5000];
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("holes").unwrap();
        for i in 0..3000u32 {
            t.insert(&i.to_be_bytes(), &value).unwrap();
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("holes").unwrap();
        for i in (0..3000u32).step_by(2) {
            t.remove(&i.to_be_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
    db.sync().unwrap();
    // The next transaction finds the removed pages reusable.
    let tx = db.begin_write().unwrap();
    tx.open_tree("other").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    let free_before = db.stats().unwrap().free_pages;
    assert!(free_before >= 2900, "{free_before} free pages");
    // One commit of ~5,500 new leaves (30,000 keys of 600 bytes, in order).
    let before = db.io_stats();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("big").unwrap();
        for i in 0..30_000u32 {
            t.insert(&i.to_be_bytes(), &[7u8; 600]).unwrap();
        }
    }
    tx.commit().unwrap();
    let calls = db.io_stats().write_calls - before.write_calls;
    assert!(
        calls < 300,
        "{calls} write calls for the big commit: it filled the short holes"
    );
    let free_after = db.stats().unwrap().free_pages;
    assert!(
        free_after + 64 >= free_before,
        "the holes were taken: {free_before} -> {free_after} free pages"
    );
    // Small commits still fill them.
    for i in 0..200u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("holes")
            .unwrap()
            .insert(&(i * 2).to_be_bytes(), &value)
            .unwrap();
        tx.commit().unwrap();
    }
    assert!(db.stats().unwrap().free_pages + 300 < free_after);
    db.check().unwrap();
}
