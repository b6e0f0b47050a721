//! The write-side API: several trees side by side, trees handed between threads, owned read
//! trees, savepoints across transactions, and what a tree that is open refuses.

use std::ops::Bound;

use larch::{Db, Error, Options, OwnedReadTree, ReadTx, WriteTx};

fn db() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("api.larch"), Options::default()).unwrap();
    (dir, db)
}

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}

#[test]
fn handles_that_cross_threads_are_send() {
    assert_send::<WriteTx<'static>>();
    assert_send::<ReadTx>();
    assert_sync::<ReadTx>();
    assert_send::<OwnedReadTree>();
    assert_sync::<OwnedReadTree>();
}

#[test]
fn a_write_transaction_begun_on_one_thread_commits_on_another() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"k", b"before").unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            tx.open_tree("t").unwrap().insert(b"k2", b"there").unwrap();
            tx.commit().unwrap();
        })
        .join()
        .unwrap();
    });
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    assert_eq!(t.get(b"k").unwrap(), Some(&b"before"[..]));
    assert_eq!(t.get(b"k2").unwrap(), Some(&b"there"[..]));
    // The writer lock went with it: a new writer begins at once.
    db.begin_write().unwrap().abort();
}

#[test]
fn two_trees_updated_together_commit_together_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.larch");
    {
        let db = Db::open(&path, Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut docs = tx.open_tree("docs").unwrap();
            let mut postings = tx.open_tree("postings").unwrap();
            for i in 0..2_000u32 {
                let id = i.to_be_bytes();
                docs.insert(&id, format!("document {i}").as_bytes())
                    .unwrap();
                let mut p = format!("word{}/", i % 7).into_bytes();
                p.extend_from_slice(&id);
                postings.insert(&p, b"").unwrap();
                // Each sees its own writes while the other changes.
                assert!(docs.get(&id).unwrap().is_some());
                assert!(postings.get(&p).unwrap().is_some());
            }
            assert_eq!(docs.len().unwrap(), 2_000);
            assert_eq!(postings.len().unwrap(), 2_000);
            // A tree is open once at a time, and cannot be deleted while open.
            assert!(matches!(tx.open_tree("docs"), Err(Error::TreeAlreadyOpen(n)) if n == "docs"));
            assert!(matches!(
                tx.delete_tree("postings"),
                Err(Error::TreeAlreadyOpen(_))
            ));
        }
        // Dropped handles give their trees back: they open again.
        assert_eq!(tx.open_tree("docs").unwrap().len().unwrap(), 2_000);
        tx.commit().unwrap();
        db.check().unwrap();
    }
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_tree("docs").unwrap().len().unwrap(), 2_000);
    let postings = rx.open_tree("postings").unwrap();
    let word3 = postings
        .range(&b"word3/"[..]..&b"word30"[..])
        .unwrap()
        .count();
    assert_eq!(word3, (0..2_000).filter(|i| i % 7 == 3).count());
}

#[test]
fn an_owned_read_tree_keeps_its_snapshot_while_the_file_is_rewritten() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..500u32 {
            t.insert(&i.to_be_bytes(), &[1u8; 100]).unwrap();
        }
    }
    tx.commit().unwrap();
    // The ReadTx itself is gone: the tree handle holds the snapshot.
    let old = db.begin_read().unwrap().open_tree_owned("t").unwrap();
    for round in 2..20u8 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..500u32 {
                t.insert(&i.to_be_bytes(), &[round; 100]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let reader = std::thread::spawn(move || {
        assert_eq!(old.len().unwrap(), 500);
        for e in old.iter().unwrap() {
            let (_, v) = e.unwrap();
            assert_eq!(v, &[1u8; 100][..], "an old snapshot's page was reused");
        }
        old.transaction().txid()
    });
    let txid = reader.join().unwrap();
    assert!(txid < db.begin_read().unwrap().txid());
    db.check().unwrap();
}

#[test]
fn a_savepoint_only_rolls_back_its_own_transaction() {
    let (_dir, db) = db();
    let mut tx = db.begin_write().unwrap();
    let sp = tx.savepoint();
    tx.open_tree("t").unwrap().insert(b"a", b"1").unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin_write().unwrap();
    assert!(matches!(tx.rollback_to(&sp), Err(Error::InvalidSavepoint)));
    // A savepoint taken after another, then the earlier one rolled back to: the later one is
    // gone, the earlier one stays usable.
    let first = tx.savepoint();
    tx.open_tree("t").unwrap().insert(b"b", b"2").unwrap();
    let second = tx.savepoint();
    tx.open_tree("t").unwrap().insert(b"c", b"3").unwrap();
    tx.rollback_to(&first).unwrap();
    assert!(matches!(
        tx.rollback_to(&second),
        Err(Error::InvalidSavepoint)
    ));
    tx.open_tree("t").unwrap().insert(b"d", b"4").unwrap();
    tx.rollback_to(&first).unwrap();
    let keys: Vec<Vec<u8>> = {
        let t = tx.open_tree("t").unwrap();
        t.iter().unwrap().map(|e| e.unwrap().0.to_vec()).collect()
    };
    assert_eq!(keys, vec![b"a".to_vec()]);
    tx.commit().unwrap();
    db.check().unwrap();
}

#[test]
fn rolling_back_a_savepoint_gives_back_the_pages_written_after_it() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"seed", b"x").unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin_write().unwrap();
    let sp = tx.savepoint();
    for round in 0..20 {
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..300u32 {
                // Large values: overflow runs written during the transaction.
                t.insert(&i.to_be_bytes(), &vec![round as u8; 5_000])
                    .unwrap();
            }
        }
        tx.rollback_to(&sp).unwrap();
    }
    tx.commit().unwrap();
    db.check().unwrap();
    // Twenty rounds rolled back cost no more file than one.
    let stats = db.stats().unwrap();
    assert!(
        stats.file_bytes < 4 * 1024 * 1024,
        "file grew to {} bytes",
        stats.file_bytes
    );
}

#[test]
fn remove_range_of_a_large_committed_tree_frees_what_it_covers() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..50_000u32 {
            t.insert(&i.to_be_bytes(), &[7u8; 40]).unwrap();
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        let (a, b) = (1_000u32.to_be_bytes(), 49_000u32.to_be_bytes());
        let n = t
            .remove_range((Bound::Included(&a[..]), Bound::Excluded(&b[..])))
            .unwrap();
        assert_eq!(n, 48_000);
        assert_eq!(t.len().unwrap(), 2_000);
        assert_eq!(t.iter().unwrap().count(), 2_000);
        assert_eq!(t.range(&a[..]..&b[..]).unwrap().count(), 0);
    }
    tx.commit().unwrap();
    db.check().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.open_tree("t").unwrap().iter().unwrap().count(), 2_000);
}

/// Found by the model test: rebalancing an edited child before its left sibling was visited
/// moved keys still in range into the child already done.
#[test]
fn remove_range_removes_entries_a_rebalance_moves_between_children() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("zz").unwrap();
        t.insert(&[b'c'; 1000], b"").unwrap();
        for j in 0..9u32 {
            let mut k = vec![b'a'];
            k.resize(251, b'~');
            k.extend_from_slice(format!("{j:05}").as_bytes());
            t.insert(&k, &[j as u8; 76]).unwrap();
        }
    }
    {
        let mut a = tx.open_tree("a").unwrap();
        let mut b = tx.open_tree("zz").unwrap();
        a.insert(&[b'a'; 1000], &[1; 9]).unwrap();
        b.insert(&[b'a'; 1000], &[2; 9]).unwrap();
    }
    let mut t = tx.open_tree("zz").unwrap();
    assert_eq!(t.len().unwrap(), 11);
    assert_eq!(t.iter().unwrap().count(), 11);
    let n = t
        .remove_range((Bound::Unbounded, Bound::Included(&b"b"[..])))
        .unwrap();
    let left: Vec<usize> = t.iter().unwrap().map(|e| e.unwrap().0.len()).collect();
    assert_eq!((n, left), (10, vec![1000]));
}

/// Found by the model test: a range removal that empties many small branches (1 KiB keys,
/// three to a page) must leave every branch with one child per key.
#[test]
fn remove_range_emptying_many_small_branches_keeps_the_tree_whole() {
    let (_dir, db) = db();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("a").unwrap();
        t.insert(b"\xff", b"").unwrap();
        t.insert(b"a", b"").unwrap();
        for j in 0..82u32 {
            let mut k = vec![b'b'];
            k.resize(1001, b'~');
            k.extend_from_slice(format!("{j:05}").as_bytes());
            t.insert(&k, &[0; 3]).unwrap();
        }
        let n = t
            .remove_range((
                Bound::Excluded(&b"bccbbbb"[..]),
                Bound::Included(&b"c\x00\x00ccc"[..]),
            ))
            .unwrap();
        assert_eq!(n, 82);
        let keys: Vec<Vec<u8>> = t.iter().unwrap().map(|e| e.unwrap().0.to_vec()).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"\xff".to_vec()]);
        assert!(t.remove(b"a").unwrap());
        assert_eq!(
            t.remove_range((Bound::Included(&b"b"[..]), Bound::Included(&b"a"[..])))
                .unwrap(),
            0
        );
    }
    tx.commit().unwrap();
    db.check().unwrap();
}

/// A `WriteTree` leaked with `mem::forget` (safe code) never gives its tree back: the
/// transaction holds a placeholder, and the tree's edits, which freed the pages they copied,
/// are lost with the handle. Committing anyway would keep the catalog's old root while its
/// pages go back to the free set, to be overwritten by later commits. The commit is refused
/// (and rolled back) instead, and the tree stays as it was.
#[test]
fn a_commit_with_a_leaked_write_tree_is_refused_and_the_tree_is_untouched() {
    let (_dir, db) = db();
    let value = [7u8; 100];
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..5_000u32 {
            t.insert(&i.to_be_bytes(), &value).unwrap();
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    let mut t = tx.open_tree("t").unwrap();
    t.insert(&7u32.to_be_bytes(), b"changed").unwrap();
    std::mem::forget(t);
    tx.open_tree("u").unwrap().insert(b"k", b"v").unwrap();
    let r = tx.commit();
    assert!(
        matches!(&r, Err(Error::TreeAlreadyOpen(n)) if n == "t"),
        "{r:?}"
    );
    // Later commits reuse every page the refused one would have freed.
    for c in 0..50u32 {
        let tx = db.begin_write().unwrap();
        {
            let mut o = tx.open_tree("other").unwrap();
            for i in 0..200u32 {
                o.insert(&(c * 1_000 + i).to_be_bytes(), &value).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    db.check().unwrap();
    let rx = db.begin_read().unwrap();
    assert!(
        rx.open_tree("u").is_err(),
        "the refused commit left nothing"
    );
    let t = rx.open_tree("t").unwrap();
    assert_eq!(t.len().unwrap(), 5_000);
    for i in 0..5_000u32 {
        assert_eq!(
            t.get(&i.to_be_bytes()).unwrap(),
            Some(&value[..]),
            "key {i}"
        );
    }
}
