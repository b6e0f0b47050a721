//! Bodies of the fuzz targets in `fuzz/` (cargo fuzz), kept here so that a normal test
//! (`tests/fuzz_corpus.rs`) runs them over the checked-in seed corpora on stable Rust.
//!
//! Both functions panic only when they find a bug: an engine panic, or a broken promise
//! (a file that checks clean but reads inconsistently; a power cut that loses an acknowledged
//! commit or mixes two). Errors returned by the engine are fine.
//!
//! They live in `larch-testkit`, not in the published `larch` crate: the fuzz targets and the
//! tests call `larch_testkit::fuzz::...`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use larch::{Db, Durability, Options, Policy};

use crate::images::{
    contents, durable_prefix, image_at, min_durable, normalize, takes_a_commit, Image, Model,
};
use crate::recording::{open_rw, IoLog, IoOp, Recording};
use crate::Rng;

// ---- scratch files ---------------------------------------------------------------------

/// A fresh directory under `std::env::temp_dir()`, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        Self::new_under(std::env::temp_dir(), what)
    }

    /// Under /dev/shm when there is one and TMPDIR does not say otherwise: a tmpfs takes sparse
    /// files far past 16 TiB (ext4 stops just short of it), and its fsync costs nothing.
    fn new_sparse(what: &str) -> Scratch {
        let shm = Path::new("/dev/shm");
        if std::env::var_os("TMPDIR").is_none() && shm.is_dir() {
            Self::new_under(shm.to_path_buf(), what)
        } else {
            Self::new(what)
        }
    }

    fn new_under(root: PathBuf, what: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = root.join(format!(
            "larch-fuzz-{what}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---- target 1: arbitrary bytes as a database file -------------------------------------------

/// Write `data` to a file and treat it as a database: open it (read-only, then read-write),
/// run `check_report`, scan every tree both ways, do some gets. Then the same again on a copy
/// with every meta and page checksum recomputed, so damage to the structure (not only to the
/// checksums) reaches `check` and the readers. Never panics on any input, unless the engine
/// breaks a promise: a file that `check()` passes must read consistently (scans agree with each
/// other, with `len()` and with `get`) and must take a commit after which `check()` still passes
/// and the contents are what was written.
pub fn open_arbitrary_file(data: &[u8]) {
    let dir = Scratch::new("open");
    let probes = probe_keys(data);
    open_and_read(&dir.path("input.larch"), data, &probes);
    if let Some(fixed) = with_checksums_fixed(data) {
        open_and_read(&dir.path("fixed.larch"), &fixed, &probes);
    }
}

fn open_and_read(path: &Path, data: &[u8], probes: &[Vec<u8>]) {
    std::fs::write(path, data).expect("write the input file");
    let cap = data.len() as u64 + 16;
    // Read-only first: no free-map load, so damaged free maps still get their trees read.
    if let Ok(db) = Db::open(path, Options::default().create(false).read_only(true)) {
        let _ = db.check_report();
        let _ = db.stats();
        let _ = read_everything(&db, probes, cap);
    }
    let Ok(db) = Db::open(path, Options::default().create(false)) else {
        return;
    };
    let report = db.check_report();
    let _ = db.stats();
    let contents = read_everything(&db, probes, cap);
    if !matches!(&report, Ok(r) if r.is_ok()) {
        return;
    }
    // A clean file: everything must have read without an error.
    let before =
        contents.unwrap_or_else(|why| panic!("check passed, but reading the file failed: {why}"));
    assert!(
        db.check().is_ok(),
        "check_report found no problem, check() failed"
    );
    write_and_recheck(&db, before, probes);
}

/// `data` with the crc32 of both metas and of every branch, leaf and overflow run recomputed
/// (page size from meta 0, else 4096); None if nothing changed.
fn with_checksums_fixed(data: &[u8]) -> Option<Vec<u8>> {
    use larch::raw::{run_checksum, MAGIC, META_SIZE, OVERFLOW_HEADER};
    let mut img = data.to_vec();
    let ps = data
        .get(12..16)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .filter(|&p| p.is_power_of_two() && (4096..=65536).contains(&p))
        .unwrap_or(4096);
    for slot in [0, ps] {
        if img.len() >= slot + META_SIZE && img[slot..slot + 8] == MAGIC {
            let crc = crc32(&img[slot..slot + 124]);
            img[slot + 124..slot + 128].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let pages = img.len() / ps;
    for p in 2..pages {
        let at = p * ps;
        let run = match img[at] {
            1 | 2 => 1,
            3 => {
                let len = u64::from_le_bytes(img[at + 16..at + 24].try_into().unwrap());
                match (OVERFLOW_HEADER as u64).checked_add(len) {
                    Some(b) if b.div_ceil(ps as u64) <= (pages - p) as u64 => {
                        b.div_ceil(ps as u64) as usize
                    }
                    _ => continue,
                }
            }
            _ => continue,
        };
        let crc = run_checksum(&img[at..at + run * ps]);
        img[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
    }
    (img != data).then_some(img)
}

/// crc32 (IEEE), as the metas use; bitwise, since this crate has no crc32 dependency.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Keys worth looking up: a few slices of the input, and some fixed ones.
fn probe_keys(data: &[u8]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = vec![b"a".to_vec(), b"key".to_vec(), vec![0], vec![0xff; 9]];
    for (i, w) in data.chunks(97).take(8).enumerate() {
        let len = 1 + i * 3;
        keys.push(w.iter().take(len).copied().collect());
    }
    keys.retain(|k| !k.is_empty());
    keys
}

/// Scan every tree forward and backward, range and get. `cap` bounds the entries any scan may
/// yield (more means a walk that never ends). Returns the contents if everything read without
/// an error and consistently (both directions agree, keys sorted, `first`/`last` match), else
/// why not.
fn read_everything(db: &Db, probes: &[Vec<u8>], cap: u64) -> Result<Model, String> {
    let rx = db.begin_read().map_err(|e| e.to_string())?;
    let names = rx.tree_names().map_err(|e| format!("tree_names: {e}"))?;
    let mut model = Model::new();
    let mut why = None;
    for name in names {
        let t = match rx.open_tree(&name) {
            Ok(t) => t,
            Err(e) => {
                why.get_or_insert(format!("open_tree({name:?}): {e}"));
                continue;
            }
        };
        let (first, last) = (t.first(), t.last());
        let mut fwd: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut fwd_err = None;
        match t.iter() {
            Ok(it) => {
                for e in it {
                    assert!(
                        (fwd.len() as u64) < cap,
                        "forward scan of {name:?} does not end"
                    );
                    match e {
                        Ok((k, v)) => fwd.push((k.to_vec(), v.to_vec())),
                        Err(e) => {
                            fwd_err = Some(e.to_string());
                            break;
                        }
                    }
                }
            }
            Err(e) => fwd_err = Some(e.to_string()),
        }
        let mut back: Vec<Vec<u8>> = Vec::new();
        let mut back_err = None;
        let all = (Bound::<&[u8]>::Unbounded, Bound::<&[u8]>::Unbounded);
        match t.range(all) {
            Ok(it) => {
                for e in it.rev() {
                    assert!(
                        (back.len() as u64) < cap,
                        "backward scan of {name:?} does not end"
                    );
                    match e {
                        Ok((k, _)) => back.push(k.to_vec()),
                        Err(e) => {
                            back_err = Some(e.to_string());
                            break;
                        }
                    }
                }
            }
            Err(e) => back_err = Some(e.to_string()),
        }
        for p in probes {
            let _ = t.get(p);
            if let Ok(r) = t.range(&p[..]..) {
                r.take(2).for_each(drop);
            }
            if let Ok(r) = t.range(..=&p[..]) {
                r.rev().take(2).for_each(drop);
            }
        }
        back.reverse();
        let problem = if let Some(e) = fwd_err {
            Some(format!("forward scan of {name:?}: {e}"))
        } else if let Some(e) = back_err {
            Some(format!("backward scan of {name:?}: {e}"))
        } else if !fwd.iter().map(|(k, _)| k).eq(back.iter()) {
            Some(format!("tree {name:?}: forward and backward scans differ"))
        } else if !fwd.windows(2).all(|w| w[0].0 < w[1].0) {
            Some(format!("tree {name:?}: a scan returns keys out of order"))
        } else if !matches!(&first, Ok(f) if f.map(|(k, _)| k) == fwd.first().map(|(k, _)| &k[..]))
            || !matches!(&last, Ok(l) if l.map(|(k, _)| k) == fwd.last().map(|(k, _)| &k[..]))
        {
            Some(format!(
                "tree {name:?}: first()/last() disagree with a scan"
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            why.get_or_insert(p);
        }
        model.insert(name, fwd.into_iter().collect());
    }
    match why {
        None => Ok(model),
        Some(w) => Err(w),
    }
}

/// On a file `check()` passed: reads must be exact, a commit must work and leave it clean.
fn write_and_recheck(db: &Db, before: Model, probes: &[Vec<u8>]) {
    {
        let rx = db.begin_read().unwrap();
        for (name, tree) in &before {
            let t = rx.open_tree(name).expect("a listed tree opens");
            assert_eq!(
                t.len().unwrap(),
                tree.len() as u64,
                "clean file: tree {name:?} len() disagrees with a scan"
            );
            for (k, v) in tree.iter().take(64) {
                assert_eq!(
                    t.get(k).expect("clean file: get failed"),
                    Some(&v[..]),
                    "clean file: get disagrees with the scan in tree {name:?}"
                );
            }
        }
    }
    let mut want = before;
    let tx = db.begin_write().expect("begin_write on a clean file");
    let names: Vec<String> = want.keys().cloned().chain(["fuzz".to_string()]).collect();
    let max_key = db.page_size() / 4;
    for (i, name) in names.iter().enumerate() {
        let Ok(mut t) = tx.open_tree(name) else {
            continue;
        };
        for (j, p) in probes.iter().enumerate().take(6) {
            let k: Vec<u8> = p.iter().take(max_key).copied().collect();
            let v = vec![(i + j) as u8; (j * 1500) % 9000];
            t.insert(&k, &v).expect("insert into a clean file");
            want.entry(name.clone()).or_default().insert(k, v);
        }
        if let Some(k) = want.get(name).and_then(|t| t.keys().next().cloned()) {
            t.remove(&k).expect("remove from a clean file");
            want.entry(name.clone()).or_default().remove(&k);
        }
    }
    tx.commit().expect("commit on a file that checked clean");
    if let Err(e) = db.check() {
        panic!("a file checked clean, took a commit, and now fails check: {e}");
    }
    let got = contents(db);
    assert!(
        normalize(&got) == normalize(&want),
        "after a commit on a clean file the contents are not what was written"
    );
}

// ---- target 2: operations with power cuts -------------------------------------------------

/// Reads the fuzz input a byte at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |a, _| a << 8 | self.byte() as u64)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

const TREES: [&str; 3] = ["a", "b", "ab"];
/// Operations per input, so one input stays fast.
const MAX_STEPS: usize = 400;

/// Everything a run has recorded so far, for building power-cut images.
struct Trace {
    initial: Vec<u8>,
    ops: IoLog,
    /// Committed states by txid (0: the empty database).
    states: BTreeMap<u64, Model>,
    /// (ops done when the call returned, txid, durability asked for).
    acks: Vec<(usize, u64, Durability)>,
    opts: Options,
}

/// Interpret `data` as operations (insert, remove, drop a tree, commit with a durability, abort,
/// `db.sync()` with or without a write transaction open, remove a range, savepoints and
/// rollbacks, pop, retain, a run of keys appended or inserted in key order, power cut) against
/// a `BTreeMap` model, with every write, sync and resize recorded. At a power cut, build the
/// image a disk could hold (everything up to the last sync, plus an input-chosen subset of
/// later 4 KiB blocks, some torn, or all of them but one write), open it, and require that
/// `check()` passes and the contents equal one committed state no older than the last commit
/// acknowledged as durable. Panics on a violation.
pub fn ops_with_power_cuts(data: &[u8]) {
    let mut input = Input(data);
    let setup = input.byte();
    let page_size = if setup & 1 == 0 { 4096 } else { 8192 };
    let policy = Policy::ALL[(setup >> 1) as usize % Policy::ALL.len()];
    let opts = Options::default().page_size(page_size).policy(policy);
    // Two inputs in three write the leaves inserts in key order leave full before the commit
    // in batches of 1 or 2 (docs/format.md, "Pages written before the commit"), which the
    // built-in 64 would need longer inputs than these to reach.
    larch::set_spill_batch([0, 1, 2][(setup >> 6) as usize % 3]);
    let dir = Scratch::new("ops");
    let path = dir.path("db.larch");
    drop(Db::open(&path, opts).expect("create a database"));
    let initial = std::fs::read(&path).expect("read the new file");
    let ops = IoLog::default();
    let db = Db::open_with_storage(&path, Box::new(Recording::new(open_rw(&path), &ops)), opts)
        .expect("open with a recording storage");
    let mut trace = Trace {
        initial,
        ops,
        states: BTreeMap::from([(0, Model::new())]),
        acks: Vec::new(),
        opts,
    };
    let max_key = page_size / 4;
    let mut committed = Model::new();
    let mut working = Model::new();
    let mut last_txid = 0;
    let mut tx = None;
    // Savepoints of the open transaction, with the model at each.
    let mut savepoints: Vec<(larch::Savepoint, Model)> = Vec::new();
    let mut steps = 0;
    // The next key of a run in key order (op 19).
    let mut next_in_order = 0u64;
    while !input.is_empty() && steps < MAX_STEPS {
        steps += 1;
        let op = input.byte();
        if tx.is_none() {
            savepoints.clear();
        }
        match op % 20 {
            0..=5 => {
                let t = TREES[input.byte() as usize % TREES.len()];
                let k = key(&mut input, max_key);
                let v = value(&mut input);
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                w.open_tree(t).unwrap().insert(&k, &v).expect("insert");
                working.entry(t.to_string()).or_default().insert(k, v);
            }
            6..=8 => {
                let t = TREES[input.byte() as usize % TREES.len()];
                let k = key(&mut input, max_key);
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                let existed = w.open_tree(t).unwrap().remove(&k).expect("remove");
                let was = working.entry(t.to_string()).or_default().remove(&k);
                assert_eq!(existed, was.is_some(), "remove disagrees with the model");
            }
            9 => {
                let t = TREES[input.byte() as usize % TREES.len()];
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                w.delete_tree(t).expect("delete_tree");
                working.remove(t);
            }
            10..=12 => {
                let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                    [(op % 20 - 10) as usize];
                let mut w = tx
                    .take()
                    .unwrap_or_else(|| db.begin_write().expect("begin_write"));
                let txid = w.txid();
                w.set_durability(d);
                trace.states.insert(txid, working.clone());
                w.commit().expect("commit");
                trace.acks.push((trace.ops.lock().unwrap().len(), txid, d));
                committed = working.clone();
                last_txid = txid;
            }
            13 => {
                drop(tx.take());
                working = committed.clone();
            }
            14 => {
                // db.sync() does not wait for the write transaction: it may run while one is
                // open (and has written overflow runs), which then commits or aborts later.
                if input.byte() & 1 == 0 {
                    drop(tx.take());
                    working = committed.clone();
                }
                db.sync().expect("sync");
                trace
                    .acks
                    .push((trace.ops.lock().unwrap().len(), last_txid, Durability::Sync));
            }
            16 => {
                let t = TREES[input.byte() as usize % TREES.len()];
                let (a, b) = (key(&mut input, max_key), key(&mut input, max_key));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                let n = w
                    .open_tree(t)
                    .unwrap()
                    .remove_range(&lo[..]..&hi[..])
                    .expect("remove_range");
                let m = working.entry(t.to_string()).or_default();
                let before = m.len();
                m.retain(|k, _| !(*k >= lo && *k < hi));
                assert_eq!(n, (before - m.len()) as u64, "remove_range's count");
            }
            17 => {
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                savepoints.push((w.savepoint(), working.clone()));
            }
            18 => {
                if let (Some(w), Some((sp, m))) = (tx.as_mut(), savepoints.last()) {
                    w.rollback_to(sp).expect("rollback_to");
                    working = m.clone();
                }
            }
            19 => {
                let t = TREES[input.byte() as usize % TREES.len()];
                let w = tx.get_or_insert_with(|| db.begin_write().expect("begin_write"));
                let m = working.entry(t.to_string()).or_default();
                let mut tree = w.open_tree(t).unwrap();
                let how = input.byte();
                if how % 3 == 2 {
                    // A run of keys past every key the tree may hold ('z' and a number that
                    // only grows: above the 'k' keys and every earlier run, whatever was
                    // removed or rolled back since), appended or inserted in key order, with
                    // values that fill a leaf in a few dozen: the leaves they fill are
                    // written before the commit (docs/format.md, "Pages written before the
                    // commit").
                    let n = 8 + input.byte() as u64 % 57;
                    let len = 64 + input.byte() as usize * 4;
                    let seed = input.byte();
                    for _ in 0..n {
                        let k = format!("z{next_in_order:08}").into_bytes();
                        next_in_order += 1;
                        let v: Vec<u8> = (0..len).map(|i| seed ^ (i % 251) as u8).collect();
                        if how & 4 == 0 {
                            tree.append(&k, &v).expect("append");
                        } else {
                            tree.insert(&k, &v).expect("insert in key order");
                        }
                        m.insert(k, v);
                    }
                } else if how % 3 == 0 {
                    let got = tree.pop_first().expect("pop_first");
                    assert_eq!(got, m.pop_first(), "pop_first disagrees with the model");
                } else {
                    let n = tree.retain(|_, v| v.len() % 2 == 0).expect("retain");
                    let before = m.len();
                    m.retain(|_, v| v.len() % 2 == 0);
                    assert_eq!(n, (before - m.len()) as u64, "retain's count");
                }
            }
            _ => {
                let back = input.byte() as usize;
                let how = input.byte();
                let seed = input.u64();
                let k = trace.ops.lock().unwrap().len().saturating_sub(back);
                verify_cut(&trace, k, how, seed, &dir);
            }
        }
    }
    drop(tx);
    // Always end with a cut after everything, the durable part only and all of it.
    let k = trace.ops.lock().unwrap().len();
    verify_cut(&trace, k, 0, 0, &dir);
    verify_cut(&trace, k, 1, 0, &dir);
    drop(db);
}

/// 1..=max bytes; a small alphabet so keys collide, sometimes long.
fn key(input: &mut Input<'_>, max: usize) -> Vec<u8> {
    let b = input.byte();
    if b >= 0xf0 {
        let len = (input.byte() as usize * 8).clamp(1, max);
        vec![b'k'; len]
    } else {
        let n = b % 64;
        format!("k{n:02}").into_bytes()
    }
}

/// Mostly short; sometimes 4-60 KiB (overflow runs).
fn value(input: &mut Input<'_>) -> Vec<u8> {
    let b = input.byte();
    let len = if b >= 0xe0 {
        4096 + (b - 0xe0) as usize * 1800 + input.byte() as usize
    } else {
        b as usize * 2
    };
    let seed = input.byte();
    (0..len).map(|i| seed ^ (i % 251) as u8).collect()
}

fn verify_cut(trace: &Trace, k: usize, how: u8, seed: u64, dir: &Scratch) {
    let ops = trace.ops.lock().unwrap().clone();
    let page_size = trace.opts.get_page_size() as u64;
    let mut k = k;
    let image = match how % 4 {
        0 => Image::DurableOnly,
        1 => Image::Everything,
        // The cut moves back to just after the last meta write at or before it (a meta is
        // page 0 or 1), and one write before that meta and after the durable part is lost
        // whole, the rest landed: the meta may name the pages that write held (a leaf
        // written before the commit, a page of the commit), and the open must tell.
        3 => {
            if let Some(m) = (0..k).rev().find(|&i| {
                matches!(&ops[i], IoOp::Write { off, .. } | IoOp::DurableWrite { off, .. }
                    if *off < 2 * page_size)
            }) {
                k = m + 1;
            }
            let durable = durable_prefix(&ops[..k]);
            let writes: Vec<usize> = (durable..k)
                .filter(|&i| matches!(ops[i], IoOp::Write { .. }))
                .collect();
            match writes.len() {
                0 => Image::Everything,
                n => Image::AllBut(writes[(seed % n as u64) as usize]),
            }
        }
        _ => Image::Random(seed),
    };
    let img = image_at(&trace.initial, &ops, k, image, page_size as usize);
    let path = dir.path("cut.larch");
    std::fs::write(&path, &img).expect("write the image");
    let ctx = format!(
        "power cut after {k} of {} ops (image {how}, seed {seed})",
        ops.len()
    );
    check_recovered(&path, trace, &ops, k, &ctx);
    let _ = std::fs::remove_file(&path);
}

fn check_recovered(path: &Path, trace: &Trace, ops: &[IoOp], k: usize, ctx: &str) {
    let db = Db::open(path, trace.opts.create(false))
        .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
    if let Err(e) = db.check() {
        panic!("{ctx}: check failed: {e}");
    }
    let txid = db.begin_read().unwrap().txid();
    let min = min_durable(&trace.acks, ops, k);
    assert!(
        txid >= min,
        "{ctx}: opened at txid {txid}, but txid {min} was acknowledged durable"
    );
    let want = trace
        .states
        .get(&txid)
        .unwrap_or_else(|| panic!("{ctx}: opened at txid {txid}, which was never committed"));
    assert!(
        normalize(&contents(&db)) == normalize(want),
        "{ctx}: the contents at txid {txid} are not what that commit held"
    );
    takes_a_commit(&db).unwrap_or_else(|e| panic!("{ctx}: {e}"));
}

// ---- target 3: crafted metas over a real database ----------------------------------------------

/// A real database every crafted-meta input starts from (built once per process and page size):
/// several trees (one of depth 2), overflow runs of one and several pages, free pages, stale
/// copies of catalog and free-map pages among them, and a one-fsync meta with a manifest.
struct Base {
    /// The file cut to its high-water mark.
    image: Vec<u8>,
    /// Free pages that hold an older catalog / free-map node (valid checksums).
    stale_catalog: Vec<u64>,
    stale_freemap: Vec<u64>,
}

fn base(page_size: usize) -> &'static Base {
    static B4: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
    static B8: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
    let cell = if page_size == 4096 { &B4 } else { &B8 };
    cell.get_or_init(|| build_base(page_size))
}

fn build_base(page_size: usize) -> Base {
    use larch::raw::{PageHeader, PageRole, PageType};
    let dir = Scratch::new("meta-base");
    let path = dir.path("base.larch");
    // Every commit saves its free map (a commit carries its changes otherwise), so crafted
    // metas can mark live pages free in a map the open trusts.
    let db = Db::open(
        &path,
        Options::default()
            .page_size(page_size)
            .durability(Durability::Sync)
            .carried_max_bits(1),
    )
    .expect("create the base database");
    let put = |tree: &str, keys: std::ops::Range<u32>, vlen: usize| {
        let tx = db.begin_write().expect("begin_write");
        {
            let mut t = tx.open_tree(tree).expect("open_tree");
            for i in keys {
                let v: Vec<u8> = (0..vlen).map(|j| (i as usize * 7 + j) as u8).collect();
                t.insert(format!("{tree}{i:04}").as_bytes(), &v)
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    };
    put("alpha", 0..150, 120 * 4096 / page_size);
    put("beta", 0..2, 3 * page_size);
    put("beta", 2..3, page_size / 2);
    put("gamma", 0..5, 10);
    let tx = db.begin_write().expect("begin_write");
    {
        let mut a = tx.open_tree("alpha").expect("open_tree");
        for i in (0..150u32).step_by(5) {
            a.remove(format!("alpha{i:04}").as_bytes()).expect("remove");
        }
        tx.open_tree("beta")
            .expect("open_tree")
            .remove(b"beta0000")
            .expect("remove");
    }
    tx.commit().expect("commit");
    put("gamma", 5..8, 10);
    db.check().expect("the base database checks clean");
    drop(db);
    let img = std::fs::read(&path).expect("read the base database");
    let metas = [0, page_size].map(|at| larch::raw::Meta::decode(&img[at..at + 128]).ok());
    let newest = metas
        .iter()
        .flatten()
        .max_by_key(|m| m.txid)
        .copied()
        .expect("a valid meta");
    let image = img[..newest.high_water as usize * page_size].to_vec();
    let mut stale_catalog = Vec::new();
    let mut stale_freemap = Vec::new();
    for p in 2..newest.high_water {
        let page = &image[p as usize * page_size..(p as usize + 1) * page_size];
        let Some(h) = PageHeader::read(page) else {
            continue;
        };
        if h.page_type == PageType::Overflow {
            continue;
        }
        if h.role == PageRole::Catalog && p != newest.catalog.root {
            stale_catalog.push(p);
        }
        if h.role == PageRole::FreeMap && p != newest.freemap.root {
            stale_freemap.push(p);
        }
    }
    Base {
        image,
        stale_catalog,
        stale_freemap,
    }
}

/// One meta slot being crafted.
struct Slot {
    meta: larch::raw::Meta,
    manifest: Vec<larch::raw::ManifestRun>,
    /// Write this run count into the meta instead of the manifest's (a count the manifest's
    /// crc does not cover).
    raw_runs: Option<u32>,
    touched: bool,
    zeroed: bool,
}

/// Page or count values worth trying against a meta of high-water mark `hwm`.
fn crafted_value(input: &mut Input<'_>, hwm: u64, base_hwm: u64, ps: u64) -> u64 {
    match input.byte() % 16 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => hwm.wrapping_sub(1),
        4 => hwm,
        5 => hwm.wrapping_add(1),
        6 => base_hwm,
        7 => (1 << 31) - 1,
        // Just past a run of 2^31-1 pages from page 2.
        8 => (1 << 31) + 1,
        9 => 1 << 32,
        10 => u64::MAX,
        11 => u64::MAX / ps,
        12 => input.byte() as u64,
        13 => input.u64(),
        14 => 1 << (input.byte() % 64),
        _ => 2 + input.byte() as u64 % base_hwm.saturating_sub(2).max(1),
    }
}

/// Run lengths for a manifest: legal ones and the largest a run can say (2^31-1 pages).
fn crafted_run_len(input: &mut Input<'_>) -> u32 {
    match input.byte() % 6 {
        0 => 1,
        1 => 2,
        2 => (1 << 31) - 1,
        3 => input.byte() as u32,
        4 => 1 << (input.byte() % 31),
        _ => (input.u64() as u32) & ((1 << 31) - 1),
    }
}

/// Page `id` of `img`, if the image holds it.
fn page_of(img: &[u8], ps: usize, id: u64) -> Option<&[u8]> {
    let at = usize::try_from(id).ok()?.checked_mul(ps)?;
    img.get(at..at.checked_add(ps)?)
}

/// The leaf page and byte offset of free-map chunk `idx` in the free-map tree at `root` of
/// `img`, if that tree can be read that far.
fn find_chunk(img: &[u8], ps: usize, root: u64, depth: u32, idx: u64) -> Option<(u64, usize)> {
    use larch::raw::{NodePage, PageRole, ValRef};
    let key = idx.to_be_bytes();
    let mut id = root;
    for _ in 0..depth.min(8) {
        let bytes = page_of(img, ps, id)?;
        let node = NodePage::parse(id, bytes, PageRole::FreeMap).ok()?;
        if node.leaf {
            let i = node.search(&key).ok()?.ok()?;
            let ValRef::Inline(v) = node.entry(i).ok()?.1 else {
                return None;
            };
            let at = v.as_ptr() as usize - bytes.as_ptr() as usize;
            return (v.len() == larch::raw::CHUNK_BYTES).then_some((id, at));
        }
        id = node.child(node.child_index(&key).ok()?).ok()?;
    }
    None
}

/// The page and offset of catalog record `pick` (modulo the count) in the catalog at `root`,
/// when the catalog is one leaf holding it inline.
fn find_record(img: &[u8], ps: usize, root: u64, pick: u8) -> Option<(u64, usize)> {
    use larch::raw::{NodePage, PageRole, ValRef};
    let bytes = page_of(img, ps, root)?;
    let node = NodePage::parse(root, bytes, PageRole::Catalog).ok()?;
    if !node.leaf || node.count == 0 {
        return None;
    }
    let ValRef::Inline(v) = node.entry(pick as usize % node.count).ok()?.1 else {
        return None;
    };
    let at = v.as_ptr() as usize - bytes.as_ptr() as usize;
    (v.len() >= 20).then_some((root, at))
}

/// Set every run checksum of `manifest` to what its pages in `img` now hold: a crafted file can
/// be consistent in every checksum it carries, and a commit whose manifest disagrees with its
/// pages is taken for torn (open falls back to the meta before it).
fn refresh_manifest(manifest: &mut [larch::raw::ManifestRun], img: &[u8], ps: usize) {
    for r in manifest.iter_mut() {
        let first = r.start as usize;
        let Some(end) = first.checked_add(r.pages as usize) else {
            continue;
        };
        if end.checked_mul(ps).is_none_or(|e| e > img.len()) {
            continue;
        }
        let page = |i: usize| &img[i * ps..(i + 1) * ps];
        r.checksum = if r.overflow {
            larch::raw::stored_checksum(page(first))
        } else {
            larch::raw::node_run_checksum(
                (first..end).map(|i| larch::raw::stored_checksum(page(i))),
            )
        };
    }
}

/// Pages the free-map tree at `root` of `img` marks, if it can be read whole.
fn count_marked(img: &[u8], ps: usize, root: u64, depth: u32) -> Option<u64> {
    use larch::raw::{NodePage, PageRole, ValRef};
    if root == 0 {
        return Some(0);
    }
    let mut stack = vec![(root, depth)];
    let mut visits = 0;
    let mut marked = 0u64;
    while let Some((id, level)) = stack.pop() {
        visits += 1;
        if visits > img.len() / ps || level == 0 || level > 8 {
            return None;
        }
        let bytes = page_of(img, ps, id)?;
        let node = NodePage::parse(id, bytes, PageRole::FreeMap).ok()?;
        for i in 0..node.count {
            if node.leaf {
                if let ValRef::Inline(v) = node.entry(i).ok()?.1 {
                    marked += v.iter().map(|b| b.count_ones() as u64).sum::<u64>();
                }
            } else {
                stack.push((node.child(i).ok()?, level - 1));
            }
        }
    }
    Some(marked)
}

/// Counters that agree with the free map `m` points at (live: the rest of the pages), so open
/// gets past the count check to what the free map says.
fn consistent_counters(m: &mut larch::raw::Meta, img: &[u8], ps: usize) {
    if let Some(n) = count_marked(img, ps, m.freemap.root, m.freemap.depth) {
        m.unreachable_pages = n;
        m.live_pages = m.high_water.saturating_sub(n);
    }
}

fn fix_page_crc(img: &mut [u8], ps: usize, id: u64) {
    let at = id as usize * ps;
    let crc = larch::raw::run_checksum(&img[at..at + ps]);
    img[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A crafted file: the image, and the length to give the file (sparse past the image).
struct Crafted {
    image: Vec<u8>,
    len: u64,
    page_size: usize,
}

/// Bytes of one edit in a crafted-meta input: the edit, then its arguments.
pub const META_OP_BYTES: usize = 20;

/// Interpret `data` as edits to the base database's metas and free map (see
/// [`open_crafted_meta`]).
fn craft(data: &[u8]) -> Crafted {
    use larch::raw::{ManifestRun, Meta, CHUNK_BYTES, CHUNK_PAGES};
    let mut input = Input(data);
    let setup = input.byte();
    let ps = if setup & 1 == 0 { 4096 } else { 8192 };
    let b = base(ps);
    let mut img = b.image.clone();
    let psu = ps as u64;
    let base_hwm = (img.len() / ps) as u64;
    let mut len = img.len() as u64;
    let mut slots: Vec<Slot> = [0, ps]
        .iter()
        .map(|&at| {
            let page = &img[at..at + ps];
            let meta = Meta::decode(page).expect("the base metas are valid");
            Slot {
                manifest: meta.manifest(page).expect("the base manifests are valid"),
                meta,
                raw_runs: None,
                touched: false,
                zeroed: false,
            }
        })
        .collect();
    // Edit the newest meta first (setup bit 1: the older).
    let newest = if slots[1].meta.txid > slots[0].meta.txid {
        1
    } else {
        0
    };
    let mut cur = if setup & 2 == 0 { newest } else { 1 - newest };
    // One edit per META_OP_BYTES bytes (its arguments read as zeros past them), so a mutation
    // that changes one edit leaves the others alone.
    for chunk in input.0.chunks(META_OP_BYTES).take(64) {
        let mut input = Input(chunk);
        let op = input.byte() % META_OPS;
        let hwm = slots[cur].meta.high_water;
        let value = |input: &mut Input<'_>| crafted_value(input, hwm, base_hwm, psu);
        let s = &mut slots[cur];
        s.touched = true;
        let m = &mut s.meta;
        match op {
            0 => m.high_water = value(&mut input),
            1 => {
                // A high-water mark with the file extended (sparse) to hold it.
                m.high_water = value(&mut input);
                if let Some(n) = m.high_water.checked_mul(psu) {
                    len = len.max(n);
                }
            }
            2 => m.catalog.root = value(&mut input),
            3 => m.freemap.root = value(&mut input),
            4 => m.catalog.entries = value(&mut input),
            5 => m.catalog.depth = value(&mut input) as u32,
            6 => m.freemap.entries = value(&mut input),
            7 => m.freemap.depth = value(&mut input) as u32,
            8 => m.live_pages = value(&mut input),
            9 => m.unreachable_pages = value(&mut input),
            10 => match input.byte() % 2 {
                0 => consistent_counters(m, &img, ps),
                // Behind: open derives the free pages by the walk, whatever the map says.
                _ => m.freemap_behind = !m.freemap_behind,
            },
            11 => {
                let other = slots[1 - cur].meta.txid;
                let v = match input.byte() % 8 {
                    0 => other,
                    1 => other.wrapping_add(1),
                    2 => other.wrapping_sub(1),
                    3 => u64::MAX,
                    4 => u64::MAX - 1,
                    // The largest txid open takes, and one below: a writer must not commit
                    // past it (the file would no longer open).
                    6 => larch::raw::MAX_TXID,
                    7 => larch::raw::MAX_TXID - 1,
                    _ => value(&mut input),
                };
                slots[cur].meta.txid = v;
            }
            12 => {
                let start = value(&mut input);
                let pages = crafted_run_len(&mut input);
                let flags = input.byte();
                let txid = if flags & 2 == 0 { 0 } else { value(&mut input) };
                let checksum = if flags & 4 == 0 {
                    0
                } else {
                    value(&mut input) as u32
                };
                s.manifest.push(ManifestRun {
                    start,
                    pages,
                    overflow: flags & 1 != 0,
                    txid,
                    checksum,
                });
            }
            13 => s.manifest.clear(),
            14 => {
                m.manifest_first = match input.byte() % 4 {
                    0 => 0,
                    1 => m.txid,
                    2 => m.txid.wrapping_sub(1),
                    _ => value(&mut input),
                }
            }
            15 => s.raw_runs = Some(value(&mut input) as u32),
            16..=18 => {
                // The free map's bits: mark a page free (a live one, often), clear a bit, or
                // fill a chunk; the leaf's checksum recomputed so the free map loads.
                let page = value(&mut input);
                let fill = input.byte();
                let (root, depth) = (m.freemap.root, m.freemap.depth);
                let chunk = page / CHUNK_PAGES;
                if let Some((leaf, at)) = find_chunk(&img, ps, root, depth, chunk) {
                    let base = leaf as usize * ps + at;
                    let bit = (page % CHUNK_PAGES) as usize;
                    match op {
                        16 => img[base + bit / 8] |= 1 << (bit % 8),
                        17 => img[base + bit / 8] &= !(1 << (bit % 8)),
                        _ => img[base..base + CHUNK_BYTES].fill(fill),
                    }
                    fix_page_crc(&mut img, ps, leaf);
                }
                // Mostly with the counters made to agree, so the free map gets past them.
                if fill & 3 != 0 {
                    consistent_counters(m, &img, ps);
                }
            }
            19 => cur = 1 - cur,
            20 => {
                // The other slot gets a copy of this meta (two metas with one txid, or one
                // txid apart).
                let mut copy = *m;
                copy.txid = copy.txid.wrapping_add(input.byte() as u64 % 3);
                let manifest = s.manifest.clone();
                let o = &mut slots[1 - cur];
                o.meta = copy;
                o.manifest = manifest;
                o.touched = true;
            }
            21 => m.page_size = [4096, 8192, 16384, 65536, 4095][input.byte() as usize % 5],
            22 => {
                // Cut or extend the file.
                let pages = value(&mut input);
                len = pages.saturating_mul(psu).min(1 << 45);
            }
            23 => slots[1 - cur].zeroed = true,
            24 => {
                // Roots at older copies of the catalog and free map, whose checksums are right.
                let pick = |v: &Vec<u64>, i: u8| v.get(i as usize % v.len().max(1)).copied();
                let i = input.byte();
                if let Some(p) = pick(&b.stale_catalog, i) {
                    m.catalog.root = p;
                }
            }
            26 => {
                // A data tree's catalog record: its depth (mostly), root or entry count
                // rewritten, the catalog leaf's checksum fixed. Readers descend a tree by each
                // page's own type and the open's walk by the recorded depth, so a wrong depth
                // hides the pages below it from the walk (with ops 16-18, a current free map
                // could then mark them free).
                let pick = input.byte();
                let what = input.byte();
                if let Some((leaf, at)) = find_record(&img, ps, m.catalog.root, pick) {
                    let base = leaf as usize * ps + at;
                    let old =
                        u32::from_le_bytes(img[base + 16..base + 20].try_into().expect("4 bytes"));
                    let root = u64::from_le_bytes(img[base..base + 8].try_into().expect("8"));
                    match what % 5 {
                        4 if old >= 2 => {
                            // The attack whole: depth 1, and the root's children (now out of
                            // the walk's sight) marked free with the counters agreeing.
                            img[base + 16..base + 20].copy_from_slice(&1u32.to_le_bytes());
                            fix_page_crc(&mut img, ps, leaf);
                            let children: Vec<u64> = page_of(&img, ps, root)
                                .and_then(|b| {
                                    larch::raw::NodePage::parse(root, b, larch::raw::PageRole::Data)
                                        .ok()
                                })
                                .map(|n| (0..n.count).filter_map(|i| n.child(i).ok()).collect())
                                .unwrap_or_default();
                            let (fm, fdepth) = (m.freemap.root, m.freemap.depth);
                            for c in children {
                                if let Some((fl, at)) =
                                    find_chunk(&img, ps, fm, fdepth, c / CHUNK_PAGES)
                                {
                                    let bit = (c % CHUNK_PAGES) as usize;
                                    img[fl as usize * ps + at + bit / 8] |= 1 << (bit % 8);
                                    fix_page_crc(&mut img, ps, fl);
                                }
                            }
                            consistent_counters(m, &img, ps);
                            refresh_manifest(&mut s.manifest, &img, ps);
                            continue;
                        }
                        0 | 1 | 4 => {
                            let depth = match what / 5 % 6 {
                                0 => old.wrapping_sub(1),
                                1 => old.wrapping_add(1),
                                2 => 0,
                                3 => 1,
                                4 => u32::MAX,
                                _ => input.byte() as u32,
                            };
                            img[base + 16..base + 20].copy_from_slice(&depth.to_le_bytes());
                        }
                        2 => {
                            let root = value(&mut input);
                            img[base..base + 8].copy_from_slice(&root.to_le_bytes());
                        }
                        _ => {
                            let entries = value(&mut input);
                            img[base + 8..base + 16].copy_from_slice(&entries.to_le_bytes());
                        }
                    }
                    fix_page_crc(&mut img, ps, leaf);
                    refresh_manifest(&mut s.manifest, &img, ps);
                }
            }
            _ => {
                let pick = |v: &Vec<u64>, i: u8| v.get(i as usize % v.len().max(1)).copied();
                let i = input.byte();
                if let Some(p) = pick(&b.stale_freemap, i) {
                    m.freemap.root = p;
                    m.freemap.depth = 1;
                    if i & 0x80 == 0 {
                        consistent_counters(m, &img, ps);
                    }
                }
            }
        }
    }
    for (i, s) in slots.iter().enumerate() {
        let at = i * ps;
        if s.zeroed {
            img[at..at + ps].fill(0);
            continue;
        }
        if !s.touched {
            continue;
        }
        let mut page = s.meta.encode_page(&s.manifest, ps);
        if let Some(n) = s.raw_runs {
            let mut m = s.meta;
            m.manifest_runs = n;
            m.manifest_crc = Meta::decode(&page).map_or(0, |d| d.manifest_crc);
            page[..larch::raw::META_SIZE].copy_from_slice(&m.encode());
        }
        img[at..at + ps].copy_from_slice(&page);
    }
    Crafted {
        image: img,
        len,
        page_size: ps,
    }
}

type Scan = Vec<(Vec<u8>, Vec<u8>)>;

/// Every tree a forward scan reads whole, in scan order. Panics on a scan that does not end.
fn readable_trees(db: &Db) -> BTreeMap<String, Scan> {
    const CAP: usize = 10_000_000;
    let mut out = BTreeMap::new();
    let Ok(rx) = db.begin_read() else {
        return out;
    };
    let Ok(names) = rx.tree_names() else {
        return out;
    };
    for name in names {
        let Ok(t) = rx.open_tree(&name) else {
            continue;
        };
        let Ok(it) = t.iter() else {
            continue;
        };
        let mut scan = Scan::new();
        let mut whole = true;
        for e in it {
            assert!(scan.len() < CAP, "a scan of {name:?} does not end");
            match e {
                Ok((k, v)) => scan.push((k.to_vec(), v.to_vec())),
                Err(_) => {
                    whole = false;
                    break;
                }
            }
        }
        if whole {
            out.insert(name, scan);
        }
    }
    out
}

/// The tree the crafted-meta target writes (no base tree has this name).
const NEW_TREE: &str = "fuzz-new";

/// Write to `db`: the new tree gets 12 keys (some values in overflow runs), and when the file
/// checked clean each tree in `want` gets or loses a key too; `want` follows. False if the
/// engine returned an error (fine on a crafted file), true once the commit is acknowledged.
fn write_some(db: &Db, want: &mut BTreeMap<String, Scan>, round: u8, clean: bool) -> bool {
    let ps = db.page_size();
    let Ok(tx) = db.begin_write() else {
        return false;
    };
    let mut edits: BTreeMap<String, BTreeMap<Vec<u8>, Option<Vec<u8>>>> = BTreeMap::new();
    let value = |i: u32| -> Vec<u8> {
        let len = match i % 5 {
            0 => ps + 100,
            1 => 3 * ps,
            _ => 40 + i as usize,
        };
        (0..len)
            .map(|j| (j as u32 ^ i ^ round as u32) as u8)
            .collect()
    };
    {
        let new = edits.entry(NEW_TREE.to_string()).or_default();
        for i in 0..12u32 {
            let k = format!("n{:03}", i * 2 + round as u32 % 2).into_bytes();
            new.insert(k, Some(value(i)));
        }
        if round > 0 {
            for i in (0..24u32).step_by(3) {
                new.insert(format!("n{i:03}").into_bytes(), None);
            }
        }
        // Enough leaves to take every page the free set holds: a page the open wrongly took
        // for free is then overwritten here, and a tree that read it reads differently.
        let free = db.stats().map_or(0, |s| s.free_pages).min(256) as u32;
        for i in 0..2 * free + 8 {
            let k = format!("f{round}-{i:04}").into_bytes();
            new.insert(k, Some(vec![(i ^ round as u32) as u8; ps / 3]));
        }
    }
    if clean {
        for name in want.keys().filter(|n| *n != NEW_TREE) {
            let k = format!("zz-fuzz-{round}").into_bytes();
            let e = edits.entry(name.clone()).or_default();
            e.insert(k, Some(value(round as u32)));
            if round > 0 {
                e.insert(b"zz-fuzz-0".to_vec(), None);
            }
        }
    }
    for (name, keys) in &edits {
        let Ok(mut t) = tx.open_tree(name) else {
            return false;
        };
        for (k, v) in keys {
            let r = match v {
                Some(v) => t.insert(k, v),
                None => t.remove(k).map(|_| ()),
            };
            if r.is_err() {
                return false;
            }
        }
    }
    if tx.commit().is_err() {
        return false;
    }
    for (name, keys) in edits {
        let scan = want.entry(name).or_default();
        let mut sorted: BTreeMap<Vec<u8>, Vec<u8>> = std::mem::take(scan).into_iter().collect();
        for (k, v) in keys {
            match v {
                Some(v) => sorted.insert(k, v),
                None => sorted.remove(&k),
            };
        }
        *scan = sorted.into_iter().collect();
    }
    true
}

/// Every tree in `want` must read exactly that.
fn verify_trees(db: &Db, want: &BTreeMap<String, Scan>, ctx: &str) {
    let got = readable_trees(db);
    for (name, scan) in want {
        match got.get(name) {
            Some(g) if g == scan => {}
            Some(g) => panic!(
                "{ctx}: tree {name:?} read whole before and now reads {} entries, not its {}: \
                 a live page was overwritten",
                g.len(),
                scan.len()
            ),
            None if scan.is_empty() => {}
            None => panic!("{ctx}: tree {name:?} read whole before and now fails to read"),
        }
    }
}

/// Start from a real database (several trees, overflow runs, free pages, stale copies of
/// catalog and free-map pages), and let `data` rewrite fields of either or both metas with
/// hostile values, the metas' own checksums (and the manifest's) computed right so the values
/// get past them: the high-water mark (with the file extended sparse to match, or cut), the
/// catalog and free-map roots (at leaves, overflow pages, free pages, stale pages, 0, 1, past
/// the mark), entries and depths, the live and unreachable counters (also made consistent with
/// the free map they point at), the txid, the manifest (runs of up to 2^31-1 pages, the
/// overflow flag, txids, `manifest_first`, a count its crc does not cover), and the free map's
/// bits (marking live pages free, checksums recomputed). Then open it read-only and read-write,
/// `check` it, read every tree, and commit twice.
///
/// Panics (a bug) if the engine panics, or if a tree that read whole before the commits reads
/// differently after them or after a reopen: the writer overwrote a live page (the free map
/// was trusted where it should not have been). Errors from the engine are fine.
pub fn open_crafted_meta(data: &[u8]) {
    open_crafted_meta_outcome(data);
}

/// Kinds of edit `craft` knows (one input byte chooses, modulo this).
const META_OPS: u8 = 27;

/// How far a crafted-meta input got, for tests that want to know the generator reaches the
/// interesting places.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MetaOutcome {
    /// Neither a read-only nor a read-write open.
    NotOpened,
    /// Read-write open refused: the free map marks a page the trees reach.
    LiveMarkedFree,
    /// Read-write open refused: a page reached twice.
    Shared,
    /// Read-write open refused: the free map's count disagrees with the meta.
    CountMismatch,
    /// Read-write open refused: a tree's recorded depth disagrees with its pages.
    LevelMismatch,
    /// Read-write open refused for another reason.
    OtherRefusal,
    /// Opened read-write; the writes returned an error.
    WriteFailed,
    /// Opened read-write and took a commit.
    Committed,
}

/// [`open_crafted_meta`], saying how far the input got.
pub fn open_crafted_meta_outcome(data: &[u8]) -> MetaOutcome {
    let c = craft(data);
    let dir = Scratch::new_sparse("meta");
    let path = dir.path("crafted.larch");
    std::fs::write(&path, &c.image).expect("write the crafted file");
    if c.len != c.image.len() as u64 {
        let f = OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open the crafted file");
        if f.set_len(c.len).is_err() {
            // Longer than the file system allows: nothing to test.
            return MetaOutcome::NotOpened;
        }
    }
    let opts = Options::default()
        .page_size(c.page_size)
        .create(false)
        .durability(Durability::Sync);
    let mut refused = MetaOutcome::NotOpened;
    if let Ok(db) = Db::open(&path, opts.read_only(true)) {
        let _ = db.check_report();
        let _ = db.stats();
        let _ = readable_trees(&db);
        refused = MetaOutcome::OtherRefusal;
    }
    let db = match Db::open(&path, opts) {
        Ok(db) => db,
        Err(larch::Error::Corrupt { reason, .. }) if refused != MetaOutcome::NotOpened => {
            return if reason.contains("free map marks page") {
                MetaOutcome::LiveMarkedFree
            } else if reason.contains("reachable twice") {
                MetaOutcome::Shared
            } else if reason.contains("but the meta counts") {
                MetaOutcome::CountMismatch
            } else if reason.contains("readers descend by the pages' own types") {
                MetaOutcome::LevelMismatch
            } else {
                refused
            };
        }
        Err(_) => return refused,
    };
    let clean = matches!(db.check_report(), Ok(r) if r.is_ok());
    let _ = db.stats();
    let mut want = readable_trees(&db);
    let mut acknowledged = false;
    for round in 0..2 {
        if !write_some(&db, &mut want, round, clean) {
            break;
        }
        acknowledged = true;
        verify_trees(&db, &want, &format!("after commit {round}"));
    }
    let _ = db.check_report();
    drop(db);
    if !acknowledged {
        return MetaOutcome::WriteFailed;
    }
    let db = Db::open(&path, opts.read_only(true))
        .unwrap_or_else(|e| panic!("a file that took commits no longer opens: {e}"));
    verify_trees(&db, &want, "after reopening");
    MetaOutcome::Committed
}

/// An input for [`open_crafted_meta`] made from `seed`: a few edits, each of a kind the target
/// knows, with arguments biased to the interesting values (stable tests run thousands).
pub fn crafted_meta_input(seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = vec![rng.below(4) as u8];
    let edits = 1 + rng.below(6);
    for _ in 0..edits {
        out.push(rng.below(META_OPS as u64) as u8);
        for _ in 1..META_OP_BYTES {
            out.push(match rng.below(3) {
                0 => rng.below(16) as u8,
                1 => rng.below(256) as u8,
                _ => [0, 1, 0x7f, 0x80, 0xff][rng.below(5) as usize],
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_fixup_leaves_a_valid_meta_alone() {
        let meta = larch::raw::Meta::empty(4096).encode();
        let stored = u32::from_le_bytes(meta[124..128].try_into().unwrap());
        assert_eq!(crc32(&meta[..124]), stored);
        let mut file = vec![0u8; 8192];
        file[..128].copy_from_slice(&meta);
        assert_eq!(with_checksums_fixed(&file), None);
    }
}
