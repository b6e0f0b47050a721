//! The writer keeps the nodes its last commits wrote and hands them to the next transactions
//! instead of decoding their pages again (`WrittenNodes`, crates/engine/src/node.rs). A kept
//! node may stand for its page only while the page holds what that commit wrote: these tests
//! free pages without copying them (a deleted tree, a removed range: their pages are freed
//! by walking, not by a copy that would take the kept node), let later commits write other
//! nodes there, and check that every tree still reads what was put in it.

use std::collections::BTreeMap;

use larch::{Db, Durability, Options, Policy};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn contents(db: &Db, name: &str) -> Model {
    let rx = db.begin_read().unwrap();
    let t = match rx.open_tree(name) {
        Ok(t) => t,
        Err(larch::Error::TreeNotFound(_)) => return Model::new(),
        Err(e) => panic!("open_tree {name}: {e}"),
    };
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Trees of `n` keys made, edited, and freed without being copied, over and over, one commit
/// each: the pages they leave are taken by the next trees' nodes, which have as many
/// entries of the same role as the freed nodes had (only the content and the txid differ).
fn churn(policy: Policy, durability: Durability, free_by_range: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("w.larch"),
        Options::default().policy(policy),
    )
    .unwrap();
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    for round in 0..60u32 {
        // Sizes from one leaf to a root over a few leaves.
        let n = [3, 20, 150, 400][round as usize % 4];
        let name = format!("t{}", round % 3);
        let fill = (round % 251) as u8;
        // Make (or refill) the tree: one commit.
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(durability);
        {
            let mut t = tx.open_tree(&name).unwrap();
            let m = models.entry(name.clone()).or_default();
            for i in 0..n {
                let v = vec![fill; 30];
                t.insert(&key(i), &v).unwrap();
                m.insert(key(i), v);
            }
        }
        tx.commit().unwrap();
        // Edit one key of it: the commit copies the path it just wrote (kept nodes).
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(durability);
        {
            let mut t = tx.open_tree(&name).unwrap();
            let v = vec![fill.wrapping_add(1); 30];
            t.insert(&key(n / 2), &v).unwrap();
            models.get_mut(&name).unwrap().insert(key(n / 2), v);
        }
        tx.commit().unwrap();
        // Free it without copying it, every other round.
        if round % 2 == 1 {
            let mut tx = db.begin_write().unwrap();
            tx.set_durability(durability);
            if free_by_range {
                let mut t = tx.open_tree(&name).unwrap();
                let all: &[u8] = b"";
                t.remove_range(all..).unwrap();
                models.get_mut(&name).unwrap().clear();
            } else {
                tx.delete_tree(&name).unwrap();
                models.remove(&name);
            }
            tx.commit().unwrap();
        }
        for (name, m) in &models {
            let got = contents(&db, name);
            let wrong = m.iter().filter(|(k, v)| got.get(*k) != Some(v)).count();
            assert!(
                &got == m,
                "{policy:?} {durability:?} range {free_by_range}, round {round}: tree {name} \
                 holds {} entries for {}, {wrong} of them missing or different",
                got.len(),
                m.len()
            );
        }
    }
    db.sync().unwrap();
    db.check().unwrap();
}

#[test]
fn a_kept_node_never_stands_for_a_page_freed_without_a_copy_and_written_again() {
    for policy in [Policy::FirstFit, Policy::BestFit] {
        for durability in [Durability::Sync, Durability::Async] {
            for free_by_range in [false, true] {
                churn(policy, durability, free_by_range);
            }
        }
    }
}
