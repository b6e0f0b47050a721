//! The commit path's shortcuts (docs/performance.md): a transaction's free-map changes in a
//! sorted list up to 48 of them and in bitmap blocks past that (`freemap::Changes`), carried
//! across Async commits and cloned into savepoints; branches kept for the next transactions
//! (`WrittenNodes`) whose arena cells take their dirty children's ids at commit, so encode
//! writes only the dirty children's ids (`Node::encode_image`); the hot-page order sorted
//! only when it is not in order (`Txn::gather_hot_pages`). Random transactions over a few
//! trees, with savepoints, rollbacks, aborts, Sync and Async commits, in-place compactions
//! and reopens, checked after every commit against a model: contents, `Db::check` (which
//! compares the free map and the carried bits with the pages no tree reaches), and the
//! contents again after a reopen. Under a debug build the kept-node comparison and the
//! image encode's assertion are active too.

use std::collections::BTreeMap;
use std::path::Path;

use larch::{Db, Durability, Options, Policy};
use larch_testkit::images::contents;
use larch_testkit::Rng;

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;
type Model = BTreeMap<String, Tree>;

const TREES: [&str; 3] = ["a", "b", "c"];

fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(rng: &mut Rng, tag: u64) -> Vec<u8> {
    // Mostly inline values; now and then one in an overflow run (a leaf holding a fresh run
    // is not kept).
    let len = if rng.below(40) == 0 {
        1500 + rng.below(3000) as usize
    } else {
        8 + rng.below(50) as usize
    };
    let mut v = vec![(tag % 251) as u8; len];
    v[0] = rng.below(256) as u8;
    v
}

fn verify(db: &Db, model: &Model, what: &str) {
    if let Err(e) = db.check() {
        panic!("{what}: check: {e}");
    }
    let got = contents(db);
    if &got != model {
        for (name, want) in model {
            let have = got.get(name);
            if have != Some(want) {
                let have = have.cloned().unwrap_or_default();
                let missing: Vec<_> = want
                    .keys()
                    .filter(|k| !have.contains_key(*k))
                    .take(5)
                    .collect();
                let extra: Vec<_> = have
                    .keys()
                    .filter(|k| !want.contains_key(*k))
                    .take(5)
                    .collect();
                let differ: Vec<_> = want
                    .iter()
                    .filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v))
                    .map(|(k, _)| k)
                    .take(5)
                    .collect();
                panic!(
                    "{what}: tree {name}: {} keys, want {}; missing {missing:?}, extra {extra:?}, differ {differ:?}",
                    have.len(),
                    want.len()
                );
            }
        }
        panic!(
            "{what}: trees {:?}, want {:?}",
            got.keys().collect::<Vec<_>>(),
            model.keys().collect::<Vec<_>>()
        );
    }
}

/// One random edit of a tree, applied to the model too.
fn edit(tx: &larch::WriteTx<'_>, model: &mut Model, rng: &mut Rng, span: u64, serial: u64) {
    let name = TREES[rng.below(TREES.len() as u64) as usize];
    let mut t = tx.open_tree(name).unwrap();
    let m = model.entry(name.to_string()).or_default();
    match rng.below(10) {
        // A few keys spread over the tree: each copies another leaf, so a commit changes
        // a few dozen free-map bits, on both sides of the list's limit.
        0..=4 => {
            for _ in 0..1 + rng.below(24) {
                let k = key(rng.below(span));
                let v = value(rng, serial);
                t.insert(&k, &v).unwrap();
                m.insert(k, v);
            }
        }
        // A run of adjacent keys: splits.
        5 => {
            let from = rng.below(span);
            for i in from..from + rng.below(200) {
                let k = key(i);
                let v = value(rng, serial + i);
                t.insert(&k, &v).unwrap();
                m.insert(k, v);
            }
        }
        // Removes: merges and redistributions.
        6 => {
            for _ in 0..1 + rng.below(40) {
                let k = key(rng.below(span));
                let had = t.remove(&k).unwrap();
                assert_eq!(had, m.remove(&k).is_some());
            }
        }
        // A range: whole subtrees freed without a copy, the edges rebalanced.
        7 => {
            let lo = key(rng.below(span));
            let hi = key(rng.below(span));
            let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
            let removed = t.remove_range(&lo[..]..&hi[..]).unwrap();
            let gone: Vec<_> = m
                .range(lo.clone()..hi.clone())
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(removed, gone.len() as u64);
            for k in gone {
                m.remove(&k);
            }
        }
        // Appends past the last key: the rightmost path.
        8 => {
            let last = m.keys().next_back().cloned();
            let start = last.map_or(0, |k| {
                std::str::from_utf8(&k[1..])
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    + 1
            });
            for i in start..start + rng.below(150) {
                let k = key(i);
                let v = value(rng, serial + i);
                t.append(&k, &v).unwrap();
                m.insert(k, v);
            }
        }
        // Pops at both ends.
        _ => {
            for _ in 0..rng.below(30) {
                if rng.below(2) == 0 {
                    assert_eq!(t.pop_first().unwrap(), m.pop_first());
                } else {
                    assert_eq!(t.pop_last().unwrap(), m.pop_last());
                }
            }
        }
    }
}

fn open(path: &Path, policy: Policy, carried: Option<usize>, background: bool) -> Db {
    let mut opts = Options::default().policy(policy);
    if let Some(bits) = carried {
        opts = opts.carried_max_bits(bits);
    }
    if background {
        opts = opts
            .compaction_threshold(Some(0.05))
            .compaction_min_bytes(0);
    }
    Db::open(path, opts).unwrap()
}

fn run(seed: u64, policy: Policy, carried: Option<usize>, txns: u32) {
    run_with(seed, policy, carried, txns, false);
}

/// `background`: compactions in the background, whose last round copies the commits made
/// while it ran into the new file, which the next transactions then write.
fn run_with(seed: u64, policy: Policy, carried: Option<usize>, txns: u32, background: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.larch");
    let mut db = open(&path, policy, carried, background);
    let mut rng = Rng(seed | 1);
    let mut model = Model::new();
    let mut compactions = 0;
    let span = 4000;
    // A base to edit: a few hundred leaves over three levels.
    {
        let tx = db.begin_write().unwrap();
        for name in TREES {
            let mut t = tx.open_tree(name).unwrap();
            let m = model.entry(name.to_string()).or_default();
            for i in (0..span).step_by(2) {
                let v = value(&mut rng, i);
                t.insert(&key(i), &v).unwrap();
                m.insert(key(i), v);
            }
        }
        tx.commit().unwrap();
    }
    verify(&db, &model, "load");
    for n in 0..txns {
        let what = format!("seed {seed} {policy:?} carried {carried:?} txn {n}");
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(if rng.below(3) == 0 {
            Durability::Sync
        } else {
            Durability::Async
        });
        let mut work = model.clone();
        let mut saved: Vec<(larch::Savepoint, Model)> = Vec::new();
        for _ in 0..1 + rng.below(5) {
            match rng.below(8) {
                0 => {
                    let sp = tx.savepoint();
                    saved.push((sp, work.clone()));
                }
                1 if !saved.is_empty() => {
                    // Back to any savepoint; the later ones go.
                    let i = rng.below(saved.len() as u64) as usize;
                    saved.truncate(i + 1);
                    tx.rollback_to(&saved[i].0).unwrap();
                    work = saved[i].1.clone();
                }
                2 if rng.below(6) == 0 => {
                    let name = TREES[rng.below(TREES.len() as u64) as usize];
                    let had = tx.delete_tree(name).unwrap();
                    assert_eq!(had, work.remove(name).is_some(), "{what}: delete {name}");
                }
                _ => edit(&tx, &mut work, &mut rng, span, u64::from(n) * 1000),
            }
        }
        if rng.below(6) == 0 {
            drop(tx); // abort
        } else {
            tx.commit().unwrap();
            model = work;
        }
        verify(&db, &model, &what);
        match rng.below(if background { 8 } else { 25 }) {
            0 => {
                db.compact().unwrap();
                verify(&db, &model, &format!("{what}, compacted"));
            }
            2 if background => {
                db.wait_for_compaction().unwrap();
                verify(&db, &model, &format!("{what}, background compaction"));
            }
            1 => {
                compactions += db.compactions();
                drop(db);
                db = open(&path, policy, carried, background);
                verify(&db, &model, &format!("{what}, reopened"));
            }
            _ => {}
        }
    }
    db.wait_for_compaction().unwrap();
    verify(&db, &model, "after the last compaction");
    compactions += db.compactions();
    drop(db);
    let db = open(&path, policy, carried, background);
    verify(&db, &model, "final reopen");
    compactions
}

fn txns() -> u32 {
    if cfg!(debug_assertions) {
        100
    } else {
        400
    }
}

#[test]
fn random_transactions_first_fit() {
    run(0x5eed_0001, Policy::FirstFit, None, txns());
}

#[test]
fn random_transactions_best_fit_few_carried_bits() {
    // The writer saves the free map whenever it would carry more than 60 bits: commits
    // alternate between carrying and saving, around the list's 48.
    run(0x5eed_0002, Policy::BestFit, Some(60), txns());
}

#[test]
fn random_transactions_append_preferring() {
    run(0x5eed_0003, Policy::AppendPreferring, Some(200), txns());
}

#[test]
fn random_transactions_more_seeds() {
    for seed in 10..16 {
        run(seed, Policy::FirstFit, Some(49), txns() / 3);
    }
}

#[test]
fn random_transactions_with_background_compactions() {
    let compactions = run_with(0x5eed_0004, Policy::FirstFit, None, txns(), true);
    assert!(compactions > 0, "no background compaction ran");
}
