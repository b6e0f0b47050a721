//! Compaction: by copy into a new file, in place under every policy (with readers open), and
//! the free tail of a file given back after deletes.

use std::collections::BTreeMap;

use larch::{Db, Durability, Options, Policy};

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let mut m = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        m.insert(
            name,
            t.iter()
                .unwrap()
                .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect::<Result<_, _>>()
                .unwrap(),
        );
    }
    m
}

/// Many commits of inserts, overwrites and deletes, with overflow values: lots of dead pages.
fn churn(db: &Db, rounds: u64) {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for r in 0..rounds {
        let mut tx = db.begin_write().unwrap();
        for t in ["alpha", "beta"] {
            let mut tree = tx.open_tree(t).unwrap();
            for _ in 0..150 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = format!("{t}-{:05}", x % 4000).into_bytes();
                match x % 10 {
                    0..=2 => {
                        tree.remove(&k).unwrap();
                    }
                    3 => tree
                        .insert(&k, &vec![r as u8; 9000 + (x % 5000) as usize])
                        .unwrap(),
                    _ => tree.insert(&k, &vec![r as u8; (x % 300) as usize]).unwrap(),
                }
            }
        }
        tx.set_durability(if r % 5 == 4 {
            Durability::Sync
        } else {
            Durability::Async
        });
        tx.commit().unwrap();
    }
    db.sync().unwrap();
}

fn delete_most(db: &Db) {
    let tx = db.begin_write().unwrap();
    for t in ["alpha", "beta"] {
        let keys: Vec<Vec<u8>> = {
            let tree = tx.open_tree(t).unwrap();
            let _ = &tree;
            (0..4000)
                .map(|i| format!("{t}-{i:05}").into_bytes())
                .filter(|k| (k[k.len() - 1] % 4) != 0)
                .collect()
        };
        let mut tree = tx.open_tree(t).unwrap();
        for k in keys {
            tree.remove(&k).unwrap();
        }
    }
    tx.commit().unwrap();
}

#[test]
fn compact_to_writes_the_same_data_into_a_file_without_free_pages() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("src.larch"),
        Options::default().policy(Policy::Null),
    )
    .unwrap();
    churn(&db, 40);
    delete_most(&db);
    let want = contents(&db);
    let dest = dir.path().join("dst.larch");
    let report = db.compact_to(&dest).unwrap();
    assert!(report.after_bytes < report.before_bytes, "{report:?}");
    assert!(
        report.gain() > 1.5,
        "a churned Null-policy file should shrink a lot: {report:?}"
    );
    assert!(
        db.compact_to(&dest).is_err(),
        "compact_to must not replace an existing file"
    );
    drop(db);
    let out = Db::open(&dest, Options::default()).unwrap();
    out.check().unwrap();
    assert_eq!(contents(&out), want);
    let s = out.stats().unwrap();
    assert_eq!(s.dead_pages, 0, "a compacted file has no free pages: {s:?}");
    assert_eq!(s.file_bytes, s.high_water * 4096);
    assert_eq!(std::fs::metadata(&dest).unwrap().len(), report.after_bytes);
    // Full leaves: the copy is denser than any tree built by random inserts.
    for t in &s.trees {
        assert!(t.fill(4096) > 0.9, "tree {} fill {}", t.name, t.fill(4096));
    }
    // And it takes new writes normally.
    let tx = out.begin_write().unwrap();
    tx.open_tree("alpha")
        .unwrap()
        .insert(b"new", b"value")
        .unwrap();
    tx.commit().unwrap();
    out.check().unwrap();
}

#[test]
fn compact_to_of_an_empty_database_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("e.larch"), Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("empty").unwrap();
    tx.commit().unwrap();
    db.compact_to(dir.path().join("e2.larch")).unwrap();
    let out = Db::open(dir.path().join("e2.larch"), Options::default()).unwrap();
    out.check().unwrap();
    assert_eq!(
        out.begin_read().unwrap().tree_names().unwrap(),
        vec!["empty".to_string()]
    );
}

#[test]
fn compact_in_place_shrinks_the_file_under_every_policy() {
    for policy in [Policy::Null, Policy::FirstFit] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.larch");
        let db = Db::open(&path, Options::default().policy(policy)).unwrap();
        churn(&db, 40);
        delete_most(&db);
        db.sync().unwrap();
        let want = contents(&db);
        let before = db.stats().unwrap();
        let report = db.compact().unwrap();
        let after = db.stats().unwrap();
        db.check().unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        assert_eq!(
            contents(&db),
            want,
            "{policy:?}: compaction changed the data"
        );
        assert!(
            after.high_water * 2 < before.high_water,
            "{policy:?}: high-water {} -> {}",
            before.high_water,
            after.high_water
        );
        assert!(
            report.after_bytes * 2 < report.before_bytes,
            "{policy:?}: {report:?}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), report.after_bytes);
        assert!(
            after.dead_ratio < 0.25,
            "{policy:?}: dead ratio {} after compaction",
            after.dead_ratio
        );
        drop(db);
        let db = Db::open(&path, Options::default().policy(policy)).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), want);
    }
}

#[test]
fn compact_in_place_keeps_open_readers_exact_and_shrinks_more_once_they_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("r.larch"),
        Options::default().policy(Policy::Null),
    )
    .unwrap();
    churn(&db, 30);
    delete_most(&db);
    let want = contents(&db);
    let rx = db.begin_read().unwrap();
    let first = db.compact().unwrap();
    // The reader still sees exactly its snapshot, even though its pages were moved.
    let t = rx.open_tree("alpha").unwrap();
    let seen: BTreeMap<Vec<u8>, Vec<u8>> = t
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(&seen, want.get("alpha").unwrap());
    drop(rx);
    let second = db.compact().unwrap();
    assert!(
        second.after_bytes < first.after_bytes,
        "ending the reader should let the file shrink further: {first:?} then {second:?}"
    );
    db.check().unwrap();
    assert_eq!(contents(&db), want);
}

#[test]
fn dropping_the_last_loaded_tree_gives_the_free_tail_back_without_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.larch");
    let db = Db::open(&path, Options::default().policy(Policy::FirstFit)).unwrap();
    for name in ["kept", "dropped"] {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree(name).unwrap();
            for i in 0..40_000u32 {
                t.insert(&i.to_be_bytes(), &[7u8; 100]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let full = db.stats().unwrap();
    let tx = db.begin_write().unwrap();
    assert!(tx.delete_tree("dropped").unwrap());
    tx.commit().unwrap();
    // Later commits may reuse the freed pages (no reader, durable). The free map's own pages
    // were appended after the dropped tree; FirstFit copies them down on their next change,
    // after which the end of the file is a free tail: the high-water mark drops and, once
    // durable, the file is truncated.
    for i in 0..4u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("kept")
            .unwrap()
            .insert(&i.to_be_bytes(), b"commit")
            .unwrap();
        tx.commit().unwrap();
    }
    let shrunk = db.stats().unwrap();
    db.check().unwrap();
    assert!(
        shrunk.high_water * 3 < full.high_water * 2,
        "high-water {} -> {}",
        full.high_water,
        shrunk.high_water
    );
    assert!(
        shrunk.file_bytes < full.file_bytes,
        "file {} -> {} bytes",
        full.file_bytes,
        shrunk.file_bytes
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), shrunk.file_bytes);
    // A reader pins the pages it can see: the tail is not given back while it lives.
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("again").unwrap();
        for i in 0..20_000u32 {
            t.insert(&i.to_be_bytes(), &[9u8; 100]).unwrap();
        }
    }
    tx.commit().unwrap();
    let grown = db.stats().unwrap();
    let rx = db.begin_read().unwrap();
    let tx = db.begin_write().unwrap();
    tx.delete_tree("again").unwrap();
    tx.commit().unwrap();
    for _ in 0..4 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("kept").unwrap().insert(b"tick", b"x").unwrap();
        tx.commit().unwrap();
    }
    let pinned = db.stats().unwrap();
    assert!(
        pinned.high_water >= grown.high_water,
        "pages a reader can see were given back"
    );
    assert_eq!(pinned.oldest_reader, Some(rx.txid()));
    assert_eq!(rx.open_tree("again").unwrap().len().unwrap(), 20_000);
    drop(rx);
    for _ in 0..4 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("kept").unwrap().insert(b"tick", b"y").unwrap();
        tx.commit().unwrap();
    }
    let released = db.stats().unwrap();
    assert!(
        released.high_water < grown.high_water,
        "after the reader ended: {} -> {}",
        grown.high_water,
        released.high_water
    );
    db.check().unwrap();
}

/// Steady overwrites of a fixed key set under the Null policy (which never reuses, so dead
/// pages pile up): returns the largest file size seen and the data-bearing size at the end.
/// With `keep_up`, each commit waits for a compaction it started, so the bound does not
/// depend on how fast the copy runs against the writer (that race is for benchmarks).
fn steady_overwrites(
    threshold: Option<f64>,
    dir: &std::path::Path,
    d: Durability,
    keep_up: bool,
) -> (u64, u64, Db) {
    let opts = Options::default()
        .policy(Policy::Null)
        .compaction_threshold(threshold)
        .compaction_min_bytes(256 << 10);
    let db = Db::open(dir.join("steady.larch"), opts).unwrap();
    let mut largest = 0;
    let mut x = 7u64;
    for round in 0..400u64 {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..20 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = (x >> 33) % 2000;
                t.insert(&k.to_be_bytes(), &[(round % 251) as u8; 200])
                    .unwrap();
            }
        }
        tx.set_durability(d);
        tx.commit().unwrap();
        if keep_up {
            db.wait_for_compaction().unwrap();
        }
        if round % 50 == 49 {
            db.sync().unwrap();
        }
        largest = largest.max(std::fs::metadata(dir.join("steady.larch")).unwrap().len());
    }
    db.sync().unwrap();
    let _ = db.wait_for_compaction();
    let live = db.stats().unwrap().live_pages * 4096;
    (largest, live, db)
}

#[test]
fn threshold_compaction_keeps_a_churning_file_near_its_live_size() {
    let dir = tempfile::tempdir().unwrap();
    let (without, live, db) = steady_overwrites(None, dir.path(), Durability::Sync, true);
    assert_eq!(db.compactions(), 0);
    drop(db);
    let dir2 = tempfile::tempdir().unwrap();
    let (with, live2, db) = steady_overwrites(Some(0.3), dir2.path(), Durability::Sync, true);
    assert!(db.compactions() >= 1, "the threshold never fired");
    db.check().unwrap();
    // Every key of the last round is there (contents are checked against a model below).
    let rx = db.begin_read().unwrap();
    assert!(rx.open_tree("t").unwrap().len().unwrap() > 1900);
    drop(rx);
    // Without compaction the Null policy grows without bound; with t = 0.3 the file stays at
    // most live / (1 - t), plus one commit's pages and one 256 KiB growth step.
    assert!(
        without > 8 * live,
        "control grew only to {without} for {live} live bytes"
    );
    let bound = (live2 as f64 / 0.7) as u64 + 150 * 4096 + (256 << 10);
    assert!(
        with <= bound,
        "with threshold 0.3 the file reached {with}; live {live2}, bound {bound}"
    );
}

#[test]
fn readers_keep_their_snapshot_across_a_background_file_switch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switch.larch");
    let opts = Options::default()
        .policy(Policy::Null)
        .compaction_threshold(Some(0.5))
        .compaction_min_bytes(0);
    let db = Db::open(&path, opts).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..3000u32 {
            t.insert(&i.to_be_bytes(), b"first").unwrap();
        }
    }
    tx.commit().unwrap();
    let old = db.begin_read().unwrap();
    // Rewrite everything a few times: the pages only the old reader holds pass half the file
    // (the trigger counts them from two sync windows back) and compaction starts.
    for round in 0..8u8 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..3000u32 {
                t.insert(&i.to_be_bytes(), &[b'a' + round; 5]).unwrap();
            }
            t.remove(&7u32.to_be_bytes()).unwrap();
        }
        tx.commit().unwrap();
    }
    let report = db.wait_for_compaction().unwrap();
    assert!(db.compactions() >= 1, "no background compaction ran");
    if let Some(r) = report {
        assert!(r.after_bytes < r.before_bytes, "{r:?}");
    }
    // The old reader still reads the old file, exactly as it was.
    let t = old.open_tree("t").unwrap();
    assert_eq!(t.get(&7u32.to_be_bytes()).unwrap(), Some(&b"first"[..]));
    assert_eq!(t.iter().unwrap().count(), 3000);
    drop(old);
    // New readers and writers use the compacted file at the same path.
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    assert_eq!(t.get(&7u32.to_be_bytes()).unwrap(), None);
    assert_eq!(t.get(&8u32.to_be_bytes()).unwrap(), Some(&b"hhhhh"[..]));
    drop(rx);
    let tx = db.begin_write().unwrap();
    tx.open_tree("t")
        .unwrap()
        .insert(b"after", b"switch")
        .unwrap();
    tx.commit().unwrap();
    db.check().unwrap();
    let s = db.stats().unwrap();
    assert_eq!(
        s.file_bytes,
        std::fs::metadata(&path).unwrap().len(),
        "the handle must be on the file at the path"
    );
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    assert_eq!(t.get(b"after").unwrap(), Some(&b"switch"[..]));
    assert_eq!(t.len().unwrap(), 3000);
    // The database and its lock file (which stays, as LMDB's does).
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !n.to_string_lossy().ends_with(".larch-lock"))
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "temporary files left behind: {leftovers:?}"
    );
}

#[test]
fn closing_the_database_finishes_background_compaction_and_releases_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("close.larch");
    for _ in 0..3 {
        let opts = Options::default()
            .policy(Policy::Null)
            .compaction_threshold(Some(0.1))
            .compaction_min_bytes(0);
        let db = Db::open(&path, opts).unwrap();
        for round in 0..6u8 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..2000u32 {
                    t.insert(&i.to_be_bytes(), &[round; 50]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        // Closing waits for a compaction these commits started (docs/format.md, "By
        // threshold"); then reopening at once must work: no compaction thread holds the lock.
        drop(db);
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(
            db.begin_read()
                .unwrap()
                .open_tree("t")
                .unwrap()
                .get(&5u32.to_be_bytes())
                .unwrap(),
            Some(&[5u8; 50][..])
        );
    }
}

#[test]
fn a_threshold_outside_zero_to_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for t in [0.0, 1.0, -0.5, 3.0] {
        let e = Db::open(
            dir.path().join("x.larch"),
            Options::default().compaction_threshold(Some(t)),
        )
        .unwrap_err();
        assert!(matches!(e, larch::Error::InvalidOption(_)), "{t}: {e}");
    }
}

#[test]
fn threshold_compaction_bounds_even_a_writer_of_async_commits() {
    // Async commits are ~100 times faster than the copy and fsyncs of a compaction. The file
    // must still stay near 1/(1-t) of what it has to hold: the live data plus the pages
    // written since the last sync (crash safety forbids reusing those before it), with writers
    // held off past (1 + t) of the length at which a compaction started.
    let dir = tempfile::tempdir().unwrap();
    let (without, _, db) = steady_overwrites(None, dir.path(), Durability::Async, false);
    drop(db);
    let dir2 = tempfile::tempdir().unwrap();
    let (with, live, db) = steady_overwrites(Some(0.3), dir2.path(), Durability::Async, false);
    assert!(db.compactions() >= 1);
    db.check().unwrap();
    // Null never reuses, so the control grows by the same amount in each of its 8 sync
    // windows; the trigger looks back over two of them.
    let two_windows = without / 4;
    // The file runs up to 1/8 past the high-water mark (the pager grows it in chunks), and one
    // transaction admitted under the writers' limit may grow it by one more chunk.
    let bound = ((live + two_windows) as f64 / 0.7 * 1.125 * 1.3 * 1.125) as u64 + (1 << 20);
    eprintln!("async: peak {with}, live {live}, control {without}, bound {bound}");
    assert!(
        with <= bound,
        "peak {with} with t = 0.3: live {live}, two sync windows {two_windows}, bound {bound}"
    );
}

/// 20,000 keys of 200 bytes in tree "t", one commit.
fn fill_20k(db: &Db) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..20_000u32 {
            t.insert(&i.to_be_bytes(), &[7u8; 200]).unwrap();
        }
    }
    tx.commit().unwrap();
}

/// Entries of tree "t" in `db`'s newest snapshot.
fn t_len(db: &Db) -> u64 {
    db.begin_read()
        .unwrap()
        .open_tree("t")
        .unwrap()
        .len()
        .unwrap()
}

/// Remove nine keys in ten of [`fill_20k`]'s, one commit: the free pages are holes all through
/// the file, not a tail.
fn keep_one_in_ten(db: &Db) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..20_000u32 {
            if i % 10 != 0 {
                t.remove(&i.to_be_bytes()).unwrap();
            }
        }
    }
    tx.commit().unwrap();
}

/// A file that goes quiet right after most of it became free: no commit follows to look at
/// the threshold, so the handle's timer does (each quiet interval ends a window); within a
/// few intervals a background compaction gives the space back.
#[test]
fn threshold_compaction_runs_on_a_quiet_file_after_a_large_delete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quiet.larch");
    let opts = Options::default()
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_millis(20));
    let db = Db::open(&path, opts).unwrap();
    fill_20k(&db);
    keep_one_in_ten(&db);
    let before = std::fs::metadata(&path).unwrap().len();
    let start = std::time::Instant::now();
    while db.compactions() == 0 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(db.compactions() >= 1, "the quiet file was never compacted");
    let _ = db.wait_for_compaction();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after * 3 < before,
        "compaction gave back too little: {before} -> {after}"
    );
    db.check().unwrap();
    assert_eq!(t_len(&db), 2000);
}

/// Without the timer (a long interval), `Db::sync` looks at the threshold: Async commits
/// free pages, the sync makes the run durable, and a later quiet sync starts the compaction.
#[test]
fn threshold_compaction_is_evaluated_on_db_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("on-sync.larch");
    let opts = Options::default()
        .durability(Durability::Async)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600));
    let db = Db::open(&path, opts).unwrap();
    fill_20k(&db);
    db.sync().unwrap();
    keep_one_in_ten(&db);
    assert_eq!(db.compactions(), 0);
    for _ in 0..4 {
        db.sync().unwrap();
    }
    let _ = db.wait_for_compaction();
    assert!(db.compactions() >= 1, "syncs never started the compaction");
    db.check().unwrap();
    assert_eq!(t_len(&db), 2000);
}

/// Steady overwrites under every policy and durability mix, an old reader open through the
/// first half, with `max_unsynced_bytes` set: the file at the path stays within 1/(1-t) of what
/// crash safety must keep (the live data, the pages waiting for the next durable point, and
/// what the old reader pins while it lives), times the pager's growth steps.
#[test]
fn threshold_compaction_bounds_steady_overwrites_under_every_policy_and_durability() {
    const T: f64 = 0.3;
    const UNSYNCED: u64 = 1 << 20;
    for policy in [Policy::Null, Policy::FirstFit] {
        for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
            bounded_overwrites(policy, d, UNSYNCED, 20, 200, 400, T);
        }
    }
}

/// The same with commits larger than `max_unsynced_bytes` (3.2 MB and 11.6 MB against 256
/// KiB): every commit reaches the limit on its own, each trigger window lasts one commit, and
/// the bound counts two commits (with one, Null's 11.6 MB commits reached 1.002x it).
#[test]
fn threshold_compaction_bounds_overwrites_in_commits_larger_than_the_unsynced_limit() {
    for policy in [Policy::Null, Policy::FirstFit] {
        for d in [Durability::Sync, Durability::Async] {
            bounded_overwrites(policy, d, 256 << 10, 3000, 200, 120, 0.3);
            bounded_overwrites(policy, d, 256 << 10, 4000, 800, 120, 0.3);
        }
    }
}

/// Steady overwrites of `keys_per_commit` random keys among 2,000 (or four times as many as a
/// commit writes) for `rounds` commits, an old reader open from round 20 to half-way: after
/// the reader, the file at the path stays within (live + U + one commit) / (1 - t), times
/// 1.125, plus 512 KiB; two commits when a commit writes more than U.
fn bounded_overwrites(
    policy: Policy,
    d: Durability,
    unsynced: u64,
    keys_per_commit: u64,
    value_len: usize,
    rounds: u64,
    t_: f64,
) {
    let space = 2000.max(keys_per_commit * 4);
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("matrix.larch");
        let opts = Options::default()
            .policy(policy)
            .durability(d)
            .max_unsynced_bytes(Some(unsynced))
            .compaction_threshold(Some(t_))
            .compaction_min_bytes(256 << 10);
        let db = Db::open(&path, opts).unwrap();
        let mut x = 7u64;
        let mut largest_after_reader = 0;
        let mut reader = None;
        let mut live_max = 0u64;
        let mut commit_max = 0u64;
        for round in 0..rounds {
            if round == 20 {
                reader = Some(db.begin_read().unwrap());
            }
            if round == rounds / 2 {
                reader = None;
            }
            let written = db.io_stats().bytes_written;
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for _ in 0..keys_per_commit {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = (x >> 33) % space;
                    t.insert(&k.to_be_bytes(), &vec![(round % 251) as u8; value_len])
                        .unwrap();
                }
            }
            tx.commit().unwrap();
            commit_max = commit_max.max(db.io_stats().bytes_written - written);
            // Wait for a compaction this commit started: the bound must not depend on how
            // fast the copy runs against the writer.
            let _ = db.wait_for_compaction();
            if round % 50 == 49 {
                db.sync().unwrap();
            }
            let s = db.stats().unwrap();
            live_max = live_max.max(s.live_pages * 4096);
            if round >= rounds / 2 + rounds / 8 {
                let len = std::fs::metadata(&path).unwrap().len();
                largest_after_reader = largest_after_reader.max(len);
            }
        }
        drop(reader);
        db.check().unwrap();
        // What crash safety keeps: the live data and up to max_unsynced_bytes of replaced
        // pages (plus the commit that reaches the limit, at least 40 pages; two commits when
        // one commit writes more than the limit, since each trigger window then lasts one
        // commit and slack is counted over two windows); the file grows in steps of 1/8.
        let commits = if commit_max > unsynced { 2 } else { 1 };
        let keep = live_max + unsynced + commits * commit_max.max(40 * 4096);
        let bound = (keep as f64 / (1.0 - t_) * 1.125) as u64 + (512 << 10);
        let what = format!(
            "{policy:?} {d:?}, {keys_per_commit} keys of {value_len} bytes a commit: largest \
             {largest_after_reader} after the reader, live {live_max}, largest commit \
             {commit_max}, bound {bound}, compactions {}",
            db.compactions()
        );
        eprintln!("{what}");
        assert!(largest_after_reader <= bound, "{what}");
    }
}

/// One Async commit of 1,000 random keys (xorshift from `x`) with 256-byte values into "t".
fn commit_1000_random(db: &Db, x: &mut u64, durability: Durability) {
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(durability);
    {
        let mut t = tx.open_tree("t").unwrap();
        for _ in 0..1000 {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            t.insert(&x.to_be_bytes(), &[3u8; 256]).unwrap();
        }
    }
    tx.commit().unwrap();
}

/// A load of random keys in Async commits of 1,000: every commit frees the pages the ones
/// before it copied, and the next commits take them back. That is working space, not slack,
/// under any policy that reuses pages, and a threshold must not compact the file for it (a
/// 500,000-document load compacted its file at 12 MB, 13 commits in, and ran at half speed).
/// Under Null, which reuses nothing, the same load is all slack and compacts. The load runs
/// with no sync until its end, with `Db::sync` every commit and every fifth, and with every
/// third commit Sync: a durable point releases two commits' pages at once, and the next
/// commit leaves one commit's worth in the free set, which is the working space of the one
/// after it (each of these compacted the load once before the trigger counted it so).
#[test]
fn threshold_compaction_leaves_a_bulk_load_of_a_reusing_policy_alone() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Syncs {
        AtTheEnd,
        DbSyncEvery(u32),
        SyncCommitEvery(u32),
    }
    for syncs in [
        Syncs::AtTheEnd,
        Syncs::DbSyncEvery(1),
        Syncs::DbSyncEvery(5),
        Syncs::SyncCommitEvery(3),
    ] {
        for policy in [Policy::FirstFit, Policy::BestFit, Policy::Null] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("load.larch");
            let opts = Options::default()
                .policy(policy)
                .compaction_threshold(Some(0.25))
                .compaction_min_bytes(0);
            let db = Db::open(&path, opts).unwrap();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for c in 1..=40 {
                let durability = match syncs {
                    Syncs::SyncCommitEvery(n) if c % n == 0 => Durability::Sync,
                    _ => Durability::Async,
                };
                commit_1000_random(&db, &mut x, durability);
                if matches!(syncs, Syncs::DbSyncEvery(n) if c % n == 0) {
                    db.sync().unwrap();
                }
            }
            db.sync().unwrap();
            let _ = db.wait_for_compaction();
            if policy == Policy::Null {
                assert!(
                    db.compactions() >= 1,
                    "{syncs:?}: Null's load left only slack"
                );
            } else {
                assert_eq!(
                    db.compactions(),
                    0,
                    "{policy:?}, {syncs:?}: a bulk load's working space was taken for slack"
                );
            }
            db.check().unwrap();
            assert_eq!(t_len(&db), 40_000);
        }
    }
}

/// A reader of the old file that outlives a background switch reads the old inode, which
/// nothing writes any more: it must not pin the pages of the new file. Its lock-file slot
/// held an old-file txid, which the new file's writer took for one of its own readers, so
/// the new file reused nothing while the reader lived: under FirstFit it grew as under Null
/// and was compacted again every few commits (23 times in 200 commits, against once without
/// the reader).
#[test]
fn a_reader_of_the_old_file_does_not_pin_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinned.larch");
    let opts = Options::default()
        .policy(Policy::FirstFit)
        .durability(Durability::Sync)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600));
    let db = Db::open(&path, opts).unwrap();
    fill_20k(&db);
    let rx = db.begin_read().unwrap();
    keep_one_in_ten(&db);
    let mut x = 88172645463325252u64;
    let mut after_first = None;
    for c in 0..200u32 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..5 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % 2000) as u32 * 10;
                t.insert(&k.to_be_bytes(), &[c as u8; 200]).unwrap();
            }
        }
        tx.commit().unwrap();
        let _ = db.wait_for_compaction();
        if db.compactions() == 1 && after_first.is_none() {
            after_first = Some(db.stats().unwrap().high_water);
        }
    }
    let first = after_first.expect("the delete was never compacted");
    let end = db.stats().unwrap();
    assert_eq!(
        db.compactions(),
        1,
        "the new file was compacted again while the old file's reader lived"
    );
    assert!(
        end.high_water < first + 40,
        "the new file reused nothing: high-water {first} -> {}",
        end.high_water
    );
    // The reader still sees its snapshot, in the old file.
    assert_eq!(rx.open_tree("t").unwrap().len().unwrap(), 20_000);
    drop(rx);
    db.check().unwrap();
}

/// A large delete, then a steady trickle of small Async commits and no `Db::sync`: the free
/// pages reused are a few per commit, so nothing waits for a durable point long and the durable
/// txid stands still. Windows ended only at a durable advance, a growth of free pages by the
/// unsynced limit, or a check with no commit since the last, none of which comes: the window
/// before the delete (nothing free) stayed the previous one forever, and a file four fifths
/// free was never compacted, where the same trickle of Sync commits compacts at once.
#[test]
fn threshold_compaction_runs_under_a_trickle_of_async_commits_after_a_large_delete() {
    for policy in [Policy::FirstFit, Policy::BestFit] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trickle.larch");
        let opts = Options::default()
            .policy(policy)
            .durability(Durability::Async)
            .compaction_threshold(Some(0.3))
            .compaction_min_bytes(0)
            .compaction_check_every(std::time::Duration::from_millis(20));
        let db = Db::open(&path, opts).unwrap();
        fill_20k(&db);
        db.sync().unwrap();
        keep_one_in_ten(&db);
        let before = std::fs::metadata(&path).unwrap().len();
        let mut x = 88172645463325252u64;
        let start = std::time::Instant::now();
        let mut c = 0u32;
        while db.compactions() == 0 && start.elapsed() < std::time::Duration::from_secs(10) {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for _ in 0..5 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = (x % 2000) as u32 * 10;
                    t.insert(&k.to_be_bytes(), &[c as u8; 200]).unwrap();
                }
            }
            tx.commit().unwrap();
            c += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            db.compactions() >= 1,
            "{policy:?}: {c} commits over 10 s never compacted a file of {before} bytes, mostly free"
        );
        let _ = db.wait_for_compaction();
        let after = std::fs::metadata(&path).unwrap().len();
        assert!(
            after * 3 < before,
            "{policy:?}: compaction gave back too little: {before} -> {after}"
        );
        db.check().unwrap();
        assert_eq!(t_len(&db), 2000);
    }
}

/// The load of `threshold_compaction_leaves_a_bulk_load_of_a_reusing_policy_alone` at the pace
/// of a writer that pauses between commits, with the timer looking in between: the durable
/// txid stands still over many checks, but the file grows, so its free pages are working
/// space and those checks do not end the window (ending it at every check where the durable
/// txid had not moved compacted this load four commits in).
#[test]
fn threshold_compaction_leaves_a_paced_load_alone_while_the_timer_looks() {
    for policy in [Policy::FirstFit, Policy::BestFit] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default()
            .policy(policy)
            .durability(Durability::Async)
            .compaction_threshold(Some(0.25))
            .compaction_min_bytes(0)
            .compaction_check_every(std::time::Duration::from_millis(20));
        let db = Db::open(dir.path().join("paced.larch"), opts).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..40 {
            commit_1000_random(&db, &mut x, Durability::Async);
            std::thread::sleep(std::time::Duration::from_millis(15));
        }
        let _ = db.wait_for_compaction();
        assert_eq!(
            db.compactions(),
            0,
            "{policy:?}: a paced load's working space was taken for slack"
        );
        db.check().unwrap();
    }
}

/// Compaction's file-system operations, but a directory fsync after a rename (the switch's)
/// fails while `fail` is set.
#[derive(Debug, Default)]
struct DirSyncFails {
    fail: std::sync::atomic::AtomicBool,
    renamed: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicUsize,
}

impl larch::CompactionFs for DirSyncFails {
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        self.renamed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.fail.load(SeqCst) && self.renamed.load(SeqCst) {
            self.failed.fetch_add(1, SeqCst);
            return Err(std::io::Error::other("directory fsync refused by the test"));
        }
        std::fs::File::open(dir)?.sync_all()
    }
}

/// A database at `path` with most of it free, its background compaction's switch done with
/// the directory fsync after the rename failing (and failing on: `fs.fail` is left set), each
/// commit of `durability`; as another process (through a lock file) or not.
fn switched_without_a_durable_name(
    path: &std::path::Path,
    as_process: bool,
    durability: Durability,
) -> (std::sync::Arc<DirSyncFails>, Db) {
    use std::sync::atomic::Ordering::SeqCst;
    drop(Db::open(path, Options::default()).unwrap());
    let fs = std::sync::Arc::new(DirSyncFails::default());
    let opts = Options::default()
        .durability(durability)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600));
    let storage = larch_testkit::file_storage;
    let db = if as_process {
        Db::open_with_storage_as_process_and_fs(path, storage, opts, fs.clone())
    } else {
        Db::open_with_storage_and_fs(path, storage(path), opts, fs.clone())
    }
    .unwrap();
    fill_20k(&db);
    keep_one_in_ten(&db);
    fs.fail.store(true, SeqCst);
    for _ in 0..50 {
        if fs.failed.load(SeqCst) > 0 {
            break;
        }
        db.sync().unwrap();
        let _ = db.wait_for_compaction();
    }
    let _ = db.wait_for_compaction();
    assert!(
        fs.failed.load(SeqCst) > 0,
        "as_process {as_process}: no switch reached its directory fsync"
    );
    (fs, db)
}

/// The switch renames the compacted file over the path and then fsyncs the directory. When
/// that fsync failed, the switch was abandoned after the rename: the handle went on writing
/// the old inode, which the path no longer named, and every commit after it was gone at the
/// next open. The rename stands, so the switch must complete; commits on the new file are
/// durable only once the directory is: the next sync retries its fsync, and fails (the handle
/// with it, as after a failed fdatasync) if the directory still cannot be synced. With and
/// without a lock file.
#[test]
fn a_switch_whose_directory_fsync_fails_after_the_rename_keeps_later_commits() {
    use std::sync::atomic::Ordering::SeqCst;
    for (as_process, still_failing) in [(false, false), (true, false), (false, true), (true, true)]
    {
        let ctx = format!("as_process {as_process}, still failing {still_failing}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dirsync.larch");
        let (fs, db) = switched_without_a_durable_name(&path, as_process, Durability::Sync);
        fs.fail.store(still_failing, SeqCst);
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"after", b"1").unwrap();
        let committed = tx.commit();
        if still_failing {
            // Not durable under a durable name: the commit fails, and so does the handle.
            let e = committed.expect_err("a Sync commit while its file's name is not durable");
            assert!(e.to_string().contains("fsync directory"), "{e}");
            assert!(
                db.begin_write().is_err(),
                "{ctx}: writes after the failed sync"
            );
        } else {
            committed.unwrap();
        }
        drop(db);
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        if !still_failing {
            assert_eq!(
                t.get(b"after").unwrap(),
                Some(&b"1"[..]),
                "{ctx}: a commit after the switch went to a file the path no longer names"
            );
        }
        let n = t.len().unwrap();
        assert!(
            n == 2_001 || (still_failing && n == 2_000),
            "{ctx}: {n} entries"
        );
    }
}

/// A handle whose switch could not fsync the directory after the rename, the directory fsync
/// failing on, with nothing committed since the switch: the new file's commits are all
/// durable in it (the catch-up commits are Sync), but its name is not, and a power cut can
/// still put the old file back, without the Async commits the switch carried over. `Db::sync`
/// returned Ok there without trying the directory (no commit was waiting), so it promised
/// durability it did not have. With and without a lock file.
#[test]
fn db_sync_after_a_switch_whose_directory_fsync_failed_does_not_report_success() {
    for as_process in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dirsync.larch");
        let (_fs, db) = switched_without_a_durable_name(&path, as_process, Durability::Async);
        assert_eq!(db.compactions(), 1, "as_process {as_process}");
        let r = db.sync();
        assert!(
            r.is_err(),
            "as_process {as_process}: Db::sync reported every commit durable while the \
             directory holding the file's new name could not be synced"
        );
        assert!(
            r.unwrap_err().to_string().contains("fsync directory"),
            "as_process {as_process}"
        );
    }
}

/// After a switch whose directory fsync failed, another process opens the path (the new
/// file) while this one is attached, so its open does not recover the file and did not fsync
/// the directory; its Sync commits were acknowledged durable under a name a power cut could
/// still undo (the old file, without them, would come back). Only this process's pager knew
/// the name was not durable.
#[test]
fn another_process_does_not_commit_durably_under_a_name_whose_directory_fsync_failed() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dirsync.larch");
    drop(Db::open(&path, Options::default()).unwrap());
    let fs = std::sync::Arc::new(DirSyncFails::default());
    let opts = Options::default()
        .durability(Durability::Sync)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600));
    let storage = larch_testkit::file_storage;
    let a = Db::open_with_storage_as_process_and_fs(&path, storage, opts, fs.clone()).unwrap();
    fill_20k(&a);
    keep_one_in_ten(&a);
    fs.fail.store(true, SeqCst);
    for _ in 0..50 {
        if fs.failed.load(SeqCst) > 0 {
            break;
        }
        a.sync().unwrap();
        let _ = a.wait_for_compaction();
    }
    assert!(
        fs.failed.load(SeqCst) > 0,
        "no switch reached its directory fsync"
    );
    assert_eq!(a.compactions(), 1);
    // The directory still cannot be synced: no commit of the other process may be reported
    // durable (its open or its commit fails).
    let b = Db::open_with_storage_as_process_and_fs(
        &path,
        storage,
        Options::default().durability(Durability::Sync),
        fs.clone(),
    );
    let committed = b.and_then(|b| {
        let tx = b.begin_write()?;
        tx.open_tree("t")?.insert(b"from b", b"1")?;
        tx.commit()
    });
    assert!(
        committed.is_err(),
        "a Sync commit of another process was acknowledged while the directory holding the \
         file's name could not be synced"
    );
    drop(a);
}

/// A compaction file system that notes every `Storage::set_cache_folios` call on the storage
/// of the files compaction creates.
#[derive(Debug, Default)]
struct FoliosNoted(std::sync::Arc<std::sync::Mutex<Vec<larch::CacheFolios>>>);

#[derive(Debug)]
struct NotingStorage {
    inner: Box<dyn larch::Storage>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<larch::CacheFolios>>>,
}

impl larch::Storage for NotingStorage {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.inner.write_at(offset, bufs)
    }
    fn write_in_order(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> std::io::Result<()> {
        self.inner.write_in_order(offset, bufs, deferred)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn set_cache_folios(&self, folios: larch::CacheFolios) {
        self.seen.lock().unwrap().push(folios);
        self.inner.set_cache_folios(folios);
    }
    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

impl larch::CompactionFs for FoliosNoted {
    fn storage(
        &self,
        _path: &std::path::Path,
        file: std::fs::File,
        mode: larch::WriteMode,
    ) -> Box<dyn larch::Storage> {
        Box::new(NotingStorage {
            inner: Box::new(larch::FileStorage::new(file, mode)),
            seen: self.0.clone(),
        })
    }
}

/// A compaction's copy becomes the database's file, so its pages go into the page cache as
/// the database's own writes do (`Options::cache_folios`), whichever the option is.
#[test]
fn a_compactions_copy_is_written_under_the_databases_cache_folios() {
    for folios in [larch::CacheFolios::Small, larch::CacheFolios::Large] {
        let dir = larch_testkit::scratch_dir();
        let path = dir.path().join("t.larch");
        drop(Db::open(&path, Options::default()).unwrap());
        let fs = std::sync::Arc::new(FoliosNoted::default());
        let opts = Options::default().cache_folios(folios);
        let db = Db::open_with_storage_and_fs(
            &path,
            larch_testkit::file_storage(&path),
            opts,
            fs.clone(),
        )
        .unwrap();
        fill_20k(&db);
        let copy = dir.path().join("copy.larch");
        db.compact_to(&copy).unwrap();
        assert_eq!(*fs.0.lock().unwrap(), vec![folios], "{folios:?}");
        let db2 = Db::open(&copy, Options::default()).unwrap();
        assert_eq!(
            db2.begin_read()
                .unwrap()
                .open_tree("t")
                .unwrap()
                .len()
                .unwrap(),
            20_000
        );
    }
}
