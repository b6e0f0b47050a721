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
use std::sync::Arc;

use larch::raw::{PageHeader, PageType};
use larch::{Db, Durability, FileStorage, Options, Storage};
use larch_testkit::recording::open_rw;
use larch_testkit::Rng;

/// Pages a run of commits wrote in key order and the others, and of the first the branch
/// pages: [`take`] of a [`Log`].
struct Tally {
    in_order: u64,
    other: u64,
    in_order_branches: u64,
}

/// Sums and empties `log`.
fn take(log: &Log, page_size: u64) -> Tally {
    let mut t = Tally {
        in_order: 0,
        other: 0,
        in_order_branches: 0,
    };
    for w in log.lock().unwrap().drain(..) {
        if w.in_order {
            t.in_order += w.len / page_size;
            t.in_order_branches += w.branches;
        } else {
            t.other += w.len / page_size;
        }
    }
    t
}

/// A new file opened through a [`Ledger`], with its log empty.
fn open(path: &Path) -> (Db, Log) {
    let opts = Options::default();
    drop(Db::open(path, opts).unwrap());
    open_logged(path, opts)
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
    assert!(
        contents(&rx, "t") == *model,
        "{what}: the tree is not the model"
    );
}

/// Every record of tree `name` as `rx` sees it.
fn contents(rx: &larch::ReadTx, name: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    rx.open_tree(name)
        .unwrap()
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

/// How the keys of the one-transaction load go in.
#[derive(Clone, Copy, Debug)]
enum Load {
    Append,
    AscendingInserts,
    RandomInserts,
}

/// What [`load_then_overwrite`] counted: the pages the load wrote in key order and not, the
/// load's branch pages in key order, and the pages the overwrites wrote each way.
struct Written {
    loaded: (u64, u64),
    loaded_branches_in_order: u64,
    overwritten: (u64, u64),
}

/// Loads 20,000 keys in one transaction, then overwrites 50 random keys in one-key commits,
/// and returns the pages each wrote each way.
fn load_then_overwrite(load: Load, durability: Durability) -> Written {
    const KEYS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.larch");
    let (db, log) = open(&path);
    let ps = Options::default().get_page_size() as u64;
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
    let loaded = take(&log, ps);
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
    let overwritten = take(&log, ps);
    verify(&db, &model, &format!("{load:?} overwritten"));
    Written {
        loaded: (loaded.in_order, loaded.other),
        loaded_branches_in_order: loaded.in_order_branches,
        overwritten: (overwritten.in_order, overwritten.other),
    }
}

#[test]
fn a_sorted_append_or_ascending_inserts_write_their_full_pages_in_key_order() {
    for durability in [Durability::Sync, Durability::Async] {
        for load in [Load::Append, Load::AscendingInserts] {
            let w = load_then_overwrite(load, durability);
            let (in_order, other) = w.loaded;
            // All but the right edge of the tree (a leaf and a branch or two): full pages
            // behind the keys as they arrived, the branches left full among them.
            assert!(
                in_order > 0 && other <= 4 && in_order >= 20 * other,
                "{load:?} {durability:?}: {in_order} pages in key order, {other} others"
            );
            assert!(
                w.loaded_branches_in_order > 0,
                "{load:?} {durability:?}: no branch page in key order"
            );
        }
    }
}

#[test]
fn a_load_of_random_keys_writes_its_pages_for_rewriting_in_one_transaction_or_many() {
    for durability in [Durability::Sync, Durability::Async] {
        let w = load_then_overwrite(Load::RandomInserts, durability);
        let (in_order, other) = w.loaded;
        // Its branches split wherever their children do: none of them at the end of keys
        // arriving in order.
        assert_eq!(
            w.loaded_branches_in_order, 0,
            "{durability:?}: branch pages of a random load written in key order"
        );
        // A leaf that grew at its end and is the last of its branch, or a branch grown at
        // its end, may be taken for keys in order: a few pages, not the load.
        assert!(
            other > 100 && in_order * 50 <= other,
            "{durability:?}: {in_order} pages in key order, {other} others"
        );
    }
    // In many transactions, as the harness's load.
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = open(&dir.path().join("m.larch"));
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
    let t = take(&log, Options::default().get_page_size() as u64);
    assert!(
        t.other > 100 && t.in_order * 50 <= t.other && t.in_order_branches == 0,
        "{} pages in key order ({} branches), {} others",
        t.in_order,
        t.in_order_branches,
        t.other
    );
    verify(&db, &model, "loaded in 20 transactions");
}

#[test]
fn a_page_rewritten_by_a_later_commit_is_not_taken_for_keys_in_order() {
    for load in [Load::Append, Load::AscendingInserts, Load::RandomInserts] {
        let (in_order, other) = load_then_overwrite(load, Durability::Async).overwritten;
        // Each one-key overwrite copies a leaf and its branches: none of them in key order,
        // whatever wrote the page it copied.
        assert!(
            in_order == 0 && other >= 50,
            "{load:?}: the overwrites wrote {in_order} pages in key order, {other} others"
        );
    }
}

/// One page write a commit made: where, how long, which way, and how many branch pages it
/// held.
#[derive(Clone, Copy, Debug)]
struct Write {
    offset: u64,
    len: u64,
    in_order: bool,
    branches: u64,
}

/// File storage that logs every write above the meta pages.
#[derive(Debug)]
struct Ledger {
    inner: FileStorage,
    log: Arc<std::sync::Mutex<Vec<Write>>>,
    page_size: u64,
}

impl Ledger {
    fn log(&self, offset: u64, bufs: &[&[u8]], in_order: bool) {
        if offset >= 2 * self.page_size {
            let len = bufs.iter().map(|b| b.len() as u64).sum();
            let branches = bufs
                .iter()
                .flat_map(|b| b.chunks_exact(self.page_size as usize))
                .filter_map(PageHeader::read)
                .filter(|h| h.page_type == PageType::Branch)
                .count() as u64;
            self.log.lock().unwrap().push(Write {
                offset,
                len,
                in_order,
                branches,
            });
        }
    }
}

impl Storage for Ledger {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.log(offset, bufs, false);
        self.inner.write_at(offset, bufs)
    }
    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.log(offset, bufs, false);
        self.inner.write_deferred(offset, bufs)
    }
    fn write_in_order(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        self.log(offset, bufs, true);
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

type Log = Arc<std::sync::Mutex<Vec<Write>>>;

fn open_logged(path: &Path, opts: Options) -> (Db, Log) {
    let log = Log::default();
    let storage = Ledger {
        inner: FileStorage::new(open_rw(path), opts.get_write_mode()),
        log: log.clone(),
        page_size: opts.get_page_size() as u64,
    };
    let db = Db::open_with_storage(path, Box::new(storage), opts).unwrap();
    log.lock().unwrap().clear();
    (db, log)
}

/// What the writes of one commit show, summed over a run of commits.
#[derive(Debug, Default)]
struct Seen {
    commits: u64,
    in_order_writes: u64,
    /// Adjacent writes of one run whose flags differ: a run broken where the flag changes.
    flag_breaks: u64,
    /// Of those, breaks that fall where a full chunk ends too.
    flag_breaks_at_chunks: u64,
    one_page_runs_between_breaks: u64,
    /// Writes made before the commit (an append's full leaves), and pages of them the
    /// commit wrote again.
    spill_writes: u64,
    spilled_pages_rewritten: u64,
}

/// Checks the writes commit `txid` made against the file: every page that carries `txid` in
/// its header was written exactly once by this commit, nothing else was, every write is whole
/// pages and at most one chunk, and two adjacent writes of the same flag are split only
/// because the first filled a chunk. The first `spills` writes are those the transaction
/// made before its commit (an append's full leaves, `IoStats::spilled_pages`): in key order,
/// 64 pages at most each, and apart from the commit's own in the adjacency check.
fn check_commit_writes(
    file: &std::fs::File,
    ps: u64,
    txid: u64,
    writes: &[Write],
    spills: usize,
    seen: &mut Seen,
) {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 1 << 20;
    let chunk = CHUNK.max(ps);
    let mut written = BTreeMap::new();
    for (n, w) in writes.iter().enumerate() {
        assert!(
            w.offset % ps == 0 && w.len % ps == 0 && w.len > 0 && w.len <= chunk,
            "txid {txid}: write {w:?} is not whole pages within a chunk"
        );
        for p in (w.offset / ps)..((w.offset + w.len) / ps) {
            if let Some(before) = written.insert(p, n) {
                // A leaf written before the commit that a later edit copied again: its page
                // is the transaction's own and free at once, and the commit may take it.
                assert!(
                    before < spills && n >= spills,
                    "txid {txid}: page {p} written twice, by writes {before} and {n}"
                );
                seen.spilled_pages_rewritten += 1;
            }
        }
    }
    for w in &writes[..spills] {
        assert!(
            w.in_order && w.len <= 64 * ps,
            "txid {txid}: {w:?}, written before the commit, is not a batch of full leaves"
        );
    }
    seen.spill_writes += spills as u64;
    let writes = &writes[spills..];
    let len = file.metadata().unwrap().len();
    let mut page = vec![0u8; ps as usize];
    for p in 2..len / ps {
        file.read_exact_at(&mut page, p * ps).unwrap();
        let is_node = matches!(page[0], 1 | 2);
        let carries = is_node && u64::from_le_bytes(page[8..16].try_into().unwrap()) == txid;
        assert_eq!(
            carries,
            written.contains_key(&p),
            "txid {txid}: page {p} carries the commit's txid: {carries}, written: {}",
            written.contains_key(&p)
        );
    }
    for pair in writes.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.len != b.offset {
            continue;
        }
        if a.in_order == b.in_order {
            assert_eq!(
                a.len, chunk,
                "txid {txid}: {a:?} and {b:?} join with the same flag but were split short of a chunk"
            );
        } else {
            seen.flag_breaks += 1;
            seen.flag_breaks_at_chunks += u64::from(a.len == chunk);
        }
    }
    for three in writes.windows(3) {
        let (a, b, c) = (three[0], three[1], three[2]);
        if a.offset + a.len == b.offset
            && b.offset + b.len == c.offset
            && a.in_order != b.in_order
            && b.in_order != c.in_order
            && b.len == ps
        {
            seen.one_page_runs_between_breaks += 1;
        }
    }
    seen.in_order_writes += writes.iter().filter(|w| w.in_order).count() as u64;
    seen.commits += 1;
}

/// Commits that mix sorted appends, ascending inserts, random inserts and deletes in one
/// transaction, across trees, so that pages filled in key order and the rest interleave: each
/// writes every page of the commit once, at its own offset, in writes that break only at a
/// gap, a chunk, or a change of flag, and the tree is the model after each and after reopening
/// (which verifies the last commit's manifest against what was written).
#[test]
fn every_page_of_a_commit_is_written_once_whatever_mix_of_key_order_its_runs_hold() {
    let mut total = Seen::default();
    for ps in [4096usize, 16384, 65536] {
        for mode in larch::WriteMode::ALL {
            for durability in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("mix.larch");
                let opts = Options::default().page_size(ps).write_mode(mode);
                drop(Db::open(&path, opts).unwrap());
                let (mut db, mut log) = open_logged(&path, opts);
                let mut rng = Rng(0x5eed_0003 ^ ps as u64 ^ (mode as u64) << 20);
                let mut models: [BTreeMap<Vec<u8>, Vec<u8>>; 3] = Default::default();
                let names = ["a", "t", "u"];
                let mut next_append = 0u64;
                let mut next_ascending = 1u64 << 40;
                let mut seen = Seen::default();
                for round in 0..6 {
                    let mut tx = db.begin_write().unwrap();
                    tx.set_durability(durability);
                    {
                        let mut trees: Vec<_> =
                            names.iter().map(|n| tx.open_tree(n).unwrap()).collect();
                        let ops = 500 + rng.below(4000);
                        // How this round weighs appends, ascending and random inserts, deletes.
                        let weights = [rng.below(4), rng.below(4), rng.below(3), rng.below(2)];
                        let sum: u64 = weights.iter().sum::<u64>().max(1);
                        for _ in 0..ops {
                            let mut pick = rng.below(sum);
                            let op = weights
                                .iter()
                                .position(|&w| {
                                    let hit = pick < w;
                                    pick = pick.saturating_sub(w);
                                    hit
                                })
                                .unwrap_or(0);
                            let vlen = 8 + rng.below(120) as usize;
                            match op {
                                0 => {
                                    let k = key(next_append);
                                    next_append += 1 + rng.below(3);
                                    let v = vec![round as u8; vlen];
                                    trees[0].append(&k, &v).unwrap();
                                    models[0].insert(k, v);
                                }
                                1 => {
                                    let k = key(next_ascending);
                                    next_ascending += 1;
                                    let v = vec![1 + round as u8; vlen];
                                    trees[1].insert(&k, &v).unwrap();
                                    models[1].insert(k, v);
                                }
                                2 => {
                                    let t = 1 + rng.below(2) as usize;
                                    let k = key(rng.below(1 << 40));
                                    let v = vec![2 + round as u8; vlen];
                                    trees[t].insert(&k, &v).unwrap();
                                    models[t].insert(k, v);
                                }
                                _ => {
                                    let t = rng.below(3) as usize;
                                    let len = models[t].len();
                                    if len > 0 {
                                        let nth = rng.below(len as u64) as usize;
                                        let k = models[t].keys().nth(nth).unwrap().clone();
                                        assert!(trees[t].remove(&k).unwrap());
                                        models[t].remove(&k);
                                    }
                                }
                            }
                        }
                    }
                    let spills = log.lock().unwrap().len();
                    tx.commit().unwrap();
                    let txid = db.stats().unwrap().txid;
                    let writes = std::mem::take(&mut *log.lock().unwrap());
                    let what = format!("{ps} {mode:?} {durability:?} round {round}");
                    let file = open_rw(&path);
                    check_commit_writes(&file, ps as u64, txid, &writes, spills, &mut seen);
                    db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
                    if round % 2 == 1 {
                        drop(db);
                        (db, log) = open_logged(&path, opts);
                    }
                    let rx = db.begin_read().unwrap();
                    for (n, model) in names.iter().zip(&models) {
                        assert!(
                            contents(&rx, n) == *model,
                            "{what}: tree {n} is not the model"
                        );
                    }
                }
                assert!(
                    seen.in_order_writes > 0 && seen.flag_breaks > 0,
                    "{ps} {mode:?} {durability:?}: {seen:?}"
                );
                total.commits += seen.commits;
                total.in_order_writes += seen.in_order_writes;
                total.flag_breaks += seen.flag_breaks;
                total.flag_breaks_at_chunks += seen.flag_breaks_at_chunks;
                total.one_page_runs_between_breaks += seen.one_page_runs_between_breaks;
                total.spill_writes += seen.spill_writes;
                total.spilled_pages_rewritten += seen.spilled_pages_rewritten;
            }
        }
    }
    eprintln!("{total:?}");
    assert!(
        total.one_page_runs_between_breaks > 0 && total.spill_writes > 0,
        "{total:?}"
    );
}

/// A run of pages filled in key order that fills a chunk exactly where the next page is not
/// in key order (and one-page runs between two changes of flag) is written once: the chunk's
/// write and the flag's break are one break, not two, and no page is lost between them.
#[test]
fn a_change_of_flag_where_a_chunk_ends_loses_no_page() {
    // The commit writes the appended leaves itself here (none before it): the runs in key
    // order that fill its chunks are what this test is about.
    larch::set_spill_batch(usize::MAX);
    let ps = 65536usize;
    let mut seen = Seen::default();
    for mode in larch::WriteMode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunk.larch");
        let opts = Options::default().page_size(ps).write_mode(mode);
        drop(Db::open(&path, opts).unwrap());
        let (db, log) = open_logged(&path, opts);
        let mut model = BTreeMap::new();
        let mut next = 0u64;
        let mut rng = Rng(0x5eed_0004);
        for round in 0..40 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                // 10 to 30 leaves of about 560 keys each.
                for _ in 0..5_000 + rng.below(12_000) {
                    let v = vec![round as u8; 100];
                    t.append(&key(next), &v).unwrap();
                    model.insert(key(next), v);
                    next += 1;
                }
            }
            tx.commit().unwrap();
            let txid = db.stats().unwrap().txid;
            let writes = std::mem::take(&mut *log.lock().unwrap());
            check_commit_writes(&open_rw(&path), ps as u64, txid, &writes, 0, &mut seen);
        }
        verify(&db, &model, &format!("{mode:?}"));
    }
    larch::set_spill_batch(0);
    eprintln!("{seen:?}");
    assert!(seen.flag_breaks_at_chunks > 0, "{seen:?}");
}
