//! Which pages a commit writes as filled in key order (`Storage::write_in_order`, which
//! `FileStorage` leaves in large page-cache folios) and which as the rest (single-page folios
//! where they are fresh, so that a later commit rewriting one of them pays for one page). A
//! sorted append and keys inserted in ascending order leave full pages behind them, which
//! later commits seldom rewrite; a load of random keys, in one transaction or many, leaves
//! pages that later commits rewrite one at a time. Every case also reads every key back and
//! checks the file: the hint changes how pages are written, never what.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use larch::{Db, Durability, FileStorage, Options, Storage};
use larch_testkit::recording::open_rw;
use larch_testkit::Rng;

/// Pages written in key order and the others, counted above the meta pages.
#[derive(Debug, Default)]
struct Counts {
    in_order: AtomicU64,
    other: AtomicU64,
}

impl Counts {
    fn take(&self) -> (u64, u64) {
        (
            self.in_order.swap(0, Ordering::SeqCst),
            self.other.swap(0, Ordering::SeqCst),
        )
    }
}

/// File storage that counts the node pages written each way.
#[derive(Debug)]
struct Counting {
    inner: FileStorage,
    counts: Arc<Counts>,
    page_size: u64,
}

impl Counting {
    fn count(&self, offset: u64, bufs: &[&[u8]], in_order: bool) {
        if offset < 2 * self.page_size {
            return;
        }
        let pages: u64 = bufs.iter().map(|b| b.len() as u64).sum::<u64>() / self.page_size;
        let c = if in_order {
            &self.counts.in_order
        } else {
            &self.counts.other
        };
        c.fetch_add(pages, Ordering::SeqCst);
    }
}

impl Storage for Counting {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.count(offset, bufs, false);
        self.inner.write_at(offset, bufs)
    }
    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.count(offset, bufs, false);
        self.inner.write_deferred(offset, bufs)
    }
    fn write_in_order(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        self.count(offset, bufs, true);
        self.inner.write_in_order(offset, bufs, deferred)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn set_cache_folios(&self, folios: larch::CacheFolios) {
        self.inner.set_cache_folios(folios);
    }
    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

fn open(path: &Path) -> (Db, Arc<Counts>) {
    let opts = Options::default();
    drop(Db::open(path, opts).unwrap());
    let counts = Arc::new(Counts::default());
    let storage = Counting {
        inner: FileStorage::new(open_rw(path), opts.get_write_mode()),
        counts: counts.clone(),
        page_size: opts.get_page_size() as u64,
    };
    let db = Db::open_with_storage(path, Box::new(storage), opts).unwrap();
    counts.take();
    (db, counts)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:010}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 100]
}

fn verify(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = t
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect();
    assert!(got == *model, "{what}: the tree is not the model");
}

/// How the keys of the one-transaction load go in.
#[derive(Clone, Copy, Debug)]
enum Load {
    Append,
    AscendingInserts,
    RandomInserts,
}

/// Loads 20,000 keys in one transaction, then overwrites 50 random keys in one-key commits,
/// and returns the pages each load and the overwrites wrote each way.
fn load_then_overwrite(load: Load, durability: Durability) -> ((u64, u64), (u64, u64)) {
    const KEYS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.larch");
    let (db, counts) = open(&path);
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x5eed_0001);
    let mut keys: Vec<u64> = (0..KEYS).collect();
    if let Load::RandomInserts = load {
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(durability);
    {
        let mut t = tx.open_tree("t").unwrap();
        for &i in &keys {
            match load {
                Load::Append => t.append(&key(i), &value(i)).unwrap(),
                _ => {
                    t.insert(&key(i), &value(i)).unwrap();
                }
            }
            model.insert(key(i), value(i));
        }
    }
    tx.commit().unwrap();
    db.sync().unwrap();
    let loaded = counts.take();
    verify(&db, &model, &format!("{load:?} loaded"));
    for n in 0..50 {
        let i = rng.below(KEYS);
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(durability);
        let v = vec![n as u8; 100];
        tx.open_tree("t").unwrap().insert(&key(i), &v).unwrap();
        tx.commit().unwrap();
        model.insert(key(i), v);
    }
    db.sync().unwrap();
    let overwritten = counts.take();
    verify(&db, &model, &format!("{load:?} overwritten"));
    (loaded, overwritten)
}

#[test]
fn a_sorted_append_or_ascending_inserts_write_their_full_pages_in_key_order() {
    for durability in [Durability::Sync, Durability::Async] {
        for load in [Load::Append, Load::AscendingInserts] {
            let ((in_order, other), _) = load_then_overwrite(load, durability);
            // All but the right edge of the tree (a leaf and a branch or two): full pages
            // behind the keys as they arrived.
            assert!(
                in_order > 0 && other <= 4 && in_order >= 20 * other,
                "{load:?} {durability:?}: {in_order} pages in key order, {other} others"
            );
        }
    }
}

#[test]
fn a_load_of_random_keys_writes_its_pages_for_rewriting_in_one_transaction_or_many() {
    for durability in [Durability::Sync, Durability::Async] {
        let ((in_order, other), _) = load_then_overwrite(Load::RandomInserts, durability);
        // A leaf that grew at its end and is the last of its branch, or a branch grown at
        // its end, may be taken for keys in order: a few pages, not the load.
        assert!(
            other > 100 && in_order * 50 <= other,
            "{durability:?}: {in_order} pages in key order, {other} others"
        );
    }
    // In many transactions, as the harness's load.
    let dir = tempfile::tempdir().unwrap();
    let (db, counts) = open(&dir.path().join("m.larch"));
    let mut rng = Rng(0x5eed_0002);
    let mut model = BTreeMap::new();
    for _ in 0..20 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..500 {
                let i = rng.below(1 << 40);
                t.insert(&key(i), &value(i)).unwrap();
                model.insert(key(i), value(i));
            }
        }
        tx.commit().unwrap();
    }
    let (in_order, other) = counts.take();
    assert!(
        other > 100 && in_order * 50 <= other,
        "{in_order} pages in key order, {other} others"
    );
    verify(&db, &model, "loaded in 20 transactions");
}

#[test]
fn a_page_rewritten_by_a_later_commit_is_not_taken_for_keys_in_order() {
    for load in [Load::Append, Load::AscendingInserts, Load::RandomInserts] {
        let (_, (in_order, other)) = load_then_overwrite(load, Durability::Async);
        // Each one-key overwrite copies a leaf and its branches: none of them in key order,
        // whatever wrote the page it copied.
        assert!(
            in_order == 0 && other >= 50,
            "{load:?}: the overwrites wrote {in_order} pages in key order, {other} others"
        );
    }
}
