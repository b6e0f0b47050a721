//! Branches a commit wrote are kept for the next transactions (`WrittenNodes`) with their
//! arena cells holding their dirty children's new ids (`Node::settle_written`), so that
//! encoding their page image writes only the ids of the children that are dirty again
//! (`Node::encode_image`). A child id left stale in a kept branch's arena would be written
//! into the next copy of that branch when a commit edits another child: these tests make
//! one-key commits that take the same kept root and upper branches commit after commit,
//! through savepoints rolled back, aborted transactions and commits that fail on a write,
//! and check every key and the whole file.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use larch::{Db, Durability, FileStorage, Options, Policy, Storage};
use larch_testkit::recording::open_rw;
use larch_testkit::Rng;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const KEYS: u64 = 30_000;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

/// File storage whose page write number `fail_at` (counting down; negative: none) fails
/// with EIO. The meta pages' writes never fail (a failed meta write poisons the handle).
#[derive(Debug)]
struct Failing {
    inner: FileStorage,
    fail_at: Arc<AtomicI64>,
    page_size: u64,
}

impl Failing {
    fn fails(&self, offset: u64) -> bool {
        offset >= 2 * self.page_size && self.fail_at.fetch_sub(1, Ordering::SeqCst) == 0
    }
}

impl Storage for Failing {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        if self.fails(offset) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.write_at(offset, bufs)
    }
    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        if self.fails(offset) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.write_deferred(offset, bufs)
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

fn open(path: &Path, opts: Options) -> (Db, Arc<AtomicI64>) {
    if !path.exists() {
        drop(Db::open(path, opts).unwrap());
    }
    let fail_at = Arc::new(AtomicI64::new(-1));
    let storage = Failing {
        inner: FileStorage::new(open_rw(path), opts.get_write_mode()),
        fail_at: fail_at.clone(),
        page_size: opts.get_page_size() as u64,
    };
    let db = Db::open_with_storage(path, Box::new(storage), opts).unwrap();
    (db, fail_at)
}

fn verify(db: &Db, model: &Model, what: &str) {
    if let Err(e) = db.check() {
        panic!("{what}: check: {e}");
    }
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    let mut n = 0;
    for e in t.iter().unwrap() {
        let (k, v) = e.unwrap();
        assert_eq!(
            model.get(k).map(Vec::as_slice),
            Some(v),
            "{what}: key {k:?}"
        );
        n += 1;
    }
    assert_eq!(n, model.len(), "{what}: number of keys");
}

fn one_key_commits(policy: Policy, seed: u64, commits: u32) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.larch");
    let opts = Options::default().policy(policy);
    let (db, fail_at) = open(&path, opts);
    let mut rng = Rng(seed | 1);
    let mut model = Model::new();
    let mut failed = 0;
    {
        let tx = db.begin_write().unwrap();
        let mut t = tx.open_tree("t").unwrap();
        let mut other = tx.open_tree("other").unwrap();
        for i in 0..KEYS {
            t.insert(&key(i), &[(i % 251) as u8; 20]).unwrap();
            model.insert(key(i), vec![(i % 251) as u8; 20]);
            if i % 10 == 0 {
                other.insert(&key(i), b"o").unwrap();
            }
        }
        drop((t, other));
        tx.commit().unwrap();
    }
    for c in 0..commits {
        let what = format!("{policy:?} seed {seed} commit {c}");
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(if rng.below(2) == 0 {
            Durability::Sync
        } else {
            Durability::Async
        });
        let mut work = model.clone();
        // One key (sometimes two, or one in the other tree too); the same value length, so
        // the leaf keeps its image, or a longer one, so it does not.
        let put = |tx: &larch::WriteTx<'_>, work: &mut Model, rng: &mut Rng| {
            let k = key(rng.below(KEYS));
            let v = vec![c as u8; if rng.below(4) == 0 { 21 } else { 20 }];
            tx.open_tree("t").unwrap().insert(&k, &v).unwrap();
            work.insert(k, v);
        };
        put(&tx, &mut work, &mut rng);
        match rng.below(8) {
            0 => {
                // A savepoint, another key, rolled back: the kept nodes the second key's
                // path took are dropped with it.
                let sp = tx.savepoint();
                let before = work.clone();
                put(&tx, &mut work, &mut rng);
                put(&tx, &mut work, &mut rng);
                tx.rollback_to(&sp).unwrap();
                work = before;
            }
            1 => put(&tx, &mut work, &mut rng),
            2 => {
                let k = key(rng.below(KEYS));
                tx.open_tree("other").unwrap().insert(&k, b"x").unwrap();
            }
            3 => {
                let k = key(rng.below(KEYS));
                let had = tx.open_tree("t").unwrap().remove(&k).unwrap();
                assert_eq!(had, work.remove(&k).is_some());
            }
            _ => {}
        }
        match rng.below(10) {
            // Abort: the kept nodes it took are gone, the pages stay.
            0 => drop(tx),
            // Fail on one of the commit's first writes, after some pages are encoded (and
            // the nodes re-imaged): nothing of it may stay.
            1 => {
                fail_at.store(rng.below(3) as i64, Ordering::SeqCst);
                let r = tx.commit();
                let fired = fail_at.swap(-1, Ordering::SeqCst) < 0;
                if fired {
                    assert!(r.is_err(), "{what}: a commit whose write failed succeeded");
                    failed += 1;
                } else {
                    r.unwrap();
                    model = work;
                }
            }
            _ => {
                tx.commit().unwrap();
                model = work;
            }
        }
        if c % 16 == 15 {
            verify(&db, &model, &what);
        }
    }
    assert!(failed > commits / 40, "{failed} commits failed");
    verify(&db, &model, "end");
    drop(db);
    let db = Db::open(&path, opts).unwrap();
    verify(&db, &model, "reopened");
}

fn commits() -> u32 {
    if cfg!(debug_assertions) {
        150
    } else {
        400
    }
}

#[test]
fn one_key_commits_through_kept_branches_first_fit() {
    one_key_commits(Policy::FirstFit, 7, commits());
}

#[test]
fn one_key_commits_through_kept_branches_best_fit() {
    one_key_commits(Policy::BestFit, 8, commits());
}

#[test]
fn one_key_commits_through_kept_branches_append_preferring() {
    one_key_commits(Policy::AppendPreferring, 9, commits());
}
