//! What a write transaction keeps for the next one (crates/engine/src/scratch.rs, 5d5ec1a):
//! transactions in a row that touch more trees than the writer keeps arenas (8), name
//! buffers (16, up to 256 bytes) or name-map room (64) for, with savepoints, aborts, a leaked
//! tree handle, a failed commit, group commits from threads and a reopen between them, each
//! checked against a model of what must be committed.

use std::collections::BTreeMap;

use larch::{Db, Durability, Error, Options};

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Short names, names past the 256 bytes kept, and names that are prefixes of each other.
fn name(i: usize) -> String {
    match i % 5 {
        0 => format!("t{i}"),
        1 => format!("t{i}{}", "x".repeat(300)),
        2 => format!("t{i}{}", "y".repeat(255)),
        3 => format!("t{}", i / 5),
        _ => "a".repeat(1 + i % 40),
    }
}

fn verify(db: &Db, model: &Model, at: &str) {
    db.check().unwrap_or_else(|e| panic!("{at}: check: {e}"));
    let rx = db.begin_read().unwrap();
    let names = rx.tree_names().unwrap();
    assert_eq!(
        names,
        model.keys().cloned().collect::<Vec<_>>(),
        "{at}: tree names"
    );
    for (n, m) in model {
        let t = rx.open_tree(n).unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got, want, "{at}: tree {:.20}", n);
    }
}

#[test]
fn transactions_of_many_trees_in_a_row_leave_nothing_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scratch.larch");
    let opts = Options::default().durability(Durability::Async);
    let mut db = Db::open(&path, opts).unwrap();
    let mut committed = Model::new();
    for round in 0..12usize {
        let trees = [3usize, 90, 20, 70][round % 4];
        let mut tx = db.begin_write().unwrap();
        let mut work = committed.clone();
        let mut saved = None;
        for i in 0..trees {
            if i == trees / 2 {
                saved = Some((tx.savepoint(), work.clone()));
            }
            let n = name(i * 7 + round);
            if (i + round) % 6 == 0 {
                let existed = tx.delete_tree(&n).unwrap();
                assert_eq!(
                    existed,
                    work.remove(&n).is_some(),
                    "round {round} delete {i}"
                );
                continue;
            }
            let mut t = tx.open_tree(&n).unwrap();
            let k = format!("k{round:02}-{i}").into_bytes();
            let v = vec![b'v'; (i * 37 + round) % 700];
            t.insert(&k, &v).unwrap();
            work.entry(n).or_default().insert(k, v);
        }
        assert_eq!(
            tx.tree_names().unwrap(),
            work.keys().cloned().collect::<Vec<_>>(),
            "round {round}: names in the transaction"
        );
        match round % 6 {
            // Roll back half, then touch a few more (some of the same names again).
            0 | 3 => {
                let (sp, state) = saved.take().unwrap();
                tx.rollback_to(&sp).unwrap();
                work = state;
                for i in 0..5 {
                    let n = name(i);
                    tx.open_tree(&n)
                        .unwrap()
                        .insert(b"after", b"rollback")
                        .unwrap();
                    work.entry(n)
                        .or_default()
                        .insert(b"after".to_vec(), b"rollback".to_vec());
                }
                tx.commit().unwrap();
                committed = work;
            }
            1 => {
                tx.abort();
            }
            // A leaked handle: the commit refuses, naming the tree, and nothing is written.
            2 => {
                let n = name(1);
                let t = tx.open_tree(&n).unwrap();
                std::mem::forget(t);
                match tx.commit() {
                    Err(Error::TreeAlreadyOpen(got)) => assert_eq!(got, n),
                    other => panic!("round {round}: commit with a leaked handle: {other:?}"),
                }
            }
            4 => {
                drop(tx);
            }
            _ => {
                tx.commit().unwrap();
                committed = work;
            }
        }
        verify(&db, &committed, &format!("round {round}"));
        // Group commits from threads: Sync commits whose writer lock is handed on.
        if round % 4 == 1 {
            std::thread::scope(|s| {
                for w in 0..3usize {
                    let db = &db;
                    s.spawn(move || {
                        for j in 0..10usize {
                            let mut tx = db.begin_write().unwrap();
                            tx.set_durability(Durability::Sync);
                            let n = format!("g{w}");
                            tx.open_tree(&n)
                                .unwrap()
                                .insert(format!("{j}").as_bytes(), b"x")
                                .unwrap();
                            tx.commit().unwrap();
                        }
                    });
                }
            });
            for w in 0..3usize {
                let m = committed.entry(format!("g{w}")).or_default();
                for j in 0..10usize {
                    m.insert(format!("{j}").into_bytes(), b"x".to_vec());
                }
            }
            verify(
                &db,
                &committed,
                &format!("round {round} after group commits"),
            );
        }
        if round % 5 == 4 {
            drop(db);
            db = Db::open(&path, opts).unwrap();
            verify(&db, &committed, &format!("round {round} after reopen"));
        }
    }
    // The last state once more, read by a fresh open.
    drop(db);
    let db = Db::open(&path, opts).unwrap();
    verify(&db, &committed, "at the end");
}
