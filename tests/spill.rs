//! A sorted append writes its full leaves before the commit (docs/format.md, "Pages written
//! before the commit"). These drive, one by one, what may follow in the same transaction:
//! reads of the written leaves, edits that copy them again, a savepoint taken after them and
//! a rollback to it, the tree's deletion, and an abort; each ends in a commit (or not) that
//! checks clean, holds exactly the model and reopens with it.

use larch::{Db, Options};
use larch_testkit::processes::{tree_in, tree_of, Tree as Model};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn val(i: u32, round: u8) -> Vec<u8> {
    vec![round.wrapping_add(i as u8); 100 + (i % 50) as usize]
}

fn contents(db: &Db, tree: &str) -> Model {
    tree_of(&db.begin_read().unwrap(), tree)
}

fn reopened(path: &std::path::Path, tree: &str, expect: &Model, what: &str) {
    let db = Db::open(path, Options::default()).unwrap();
    db.check()
        .unwrap_or_else(|e| panic!("{what}: check after reopen: {e}"));
    assert!(contents(&db, tree) == *expect, "{what}: reopened");
}

/// Appends of even keys 0, 2, .. 2(n-1) in one handle: every leaf but the last written
/// before the commit.
fn append_evens(tx: &larch::WriteTx<'_>, n: u32, model: &mut Model) {
    let mut t = tx.open_tree("t").unwrap();
    for i in 0..n {
        t.append(&key(2 * i), &val(i, 1)).unwrap();
        model.insert(key(2 * i), val(i, 1));
    }
}

#[test]
fn written_leaves_are_read_edited_rolled_back_and_deleted_in_their_transaction() {
    for case in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill.larch");
        let db = Db::open(&path, Options::default()).unwrap();
        let before = db.io_stats().spilled_pages;
        let mut model = Model::new();
        let mut tx = db.begin_write().unwrap();
        append_evens(&tx, 20_000, &mut model);
        let spilled = db.io_stats().spilled_pages - before;
        assert!(spilled > 500, "case {case}: {spilled} leaves written early");
        let what = format!("case {case}");
        match case {
            // Reads through a new handle, then inserts between the written keys and removes
            // of some (each copies a written leaf again and frees its page), then commit.
            0 => {
                let mut t = tx.open_tree("t").unwrap();
                for i in (0..20_000).step_by(97) {
                    assert_eq!(t.get(&key(2 * i)).unwrap(), Some(&val(i, 1)[..]), "{what}");
                }
                for i in (0..20_000).step_by(13) {
                    t.insert(&key(2 * i + 1), &val(i, 2)).unwrap();
                    model.insert(key(2 * i + 1), val(i, 2));
                }
                for i in (0..20_000).step_by(31) {
                    assert!(t.remove(&key(2 * i)).unwrap());
                    model.remove(&key(2 * i));
                }
                drop(t);
                assert!(
                    tree_in(&tx, "t").unwrap() == model,
                    "{what}: read in the transaction"
                );
            }
            // A savepoint after the written leaves; edits of them and more appends after it,
            // then the rollback: the state at the savepoint, written leaves included.
            1 => {
                let sp = tx.savepoint();
                {
                    let mut t = tx.open_tree("t").unwrap();
                    for i in (0..20_000).step_by(7) {
                        t.insert(&key(2 * i + 1), &val(i, 3)).unwrap();
                    }
                    for i in 40_000..60_000 {
                        t.append(&key(i), &val(i, 3)).unwrap();
                    }
                    t.remove_range(key(100).as_slice()..key(20_000).as_slice())
                        .unwrap();
                }
                tx.rollback_to(&sp).unwrap();
                let t = tx.open_tree("t").unwrap();
                assert_eq!(t.len().unwrap(), model.len() as u64, "{what}");
            }
            // The tree deleted in the same transaction: its written leaves are free again,
            // and a second tree's appends may take them.
            2 => {
                assert!(tx.delete_tree("t").unwrap());
                model.clear();
                let mut u = tx.open_tree("u").unwrap();
                for i in 0..5_000 {
                    u.append(&key(i), &val(i, 4)).unwrap();
                }
            }
            // An abort: nothing stays, and the next transaction may write where the
            // written leaves were.
            _ => {
                drop(tx);
                db.check().unwrap();
                assert!(
                    matches!(
                        db.begin_read().unwrap().open_tree("t"),
                        Err(larch::Error::TreeNotFound(_))
                    ),
                    "{what}"
                );
                tx = db.begin_write().unwrap();
                model.clear();
                append_evens(&tx, 5_000, &mut model);
            }
        }
        tx.commit().unwrap();
        db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
        assert!(contents(&db, "t") == model, "{what}: committed");
        if case == 2 {
            assert_eq!(contents(&db, "u").len(), 5_000, "{what}");
        }
        drop(db);
        reopened(&path, "t", &model, &what);
    }
}
