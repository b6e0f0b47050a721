//! Bodies of the fuzz targets in `fuzz/` (cargo fuzz), kept here so that a normal test
//! (`tests/fuzz_corpus.rs`) runs them over the checked-in seed corpora on stable Rust.
//!
//! Both functions panic only when they find a bug: an engine panic, or a broken promise
//! (a file that checks clean but reads inconsistently; a power cut that loses an acknowledged
//! commit or mixes two). Errors returned by the engine are fine.
//!
//! Not part of the public API.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Db, Durability, Options, Policy, Storage};

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;
type Model = BTreeMap<String, Tree>;

// ---- scratch files ---------------------------------------------------------------------

/// A fresh directory under `std::env::temp_dir()`, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
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
    use crate::raw::{run_checksum, MAGIC, META_SIZE, OVERFLOW_HEADER};
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
    let mut tx = db.begin_write().expect("begin_write on a clean file");
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
    let rx = db.begin_read().unwrap();
    let mut got = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        let tree: Tree = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .expect("scan after a commit");
        got.insert(name, tree);
    }
    assert!(
        normalize(&got) == normalize(&want),
        "after a commit on a clean file the contents are not what was written"
    );
}

fn normalize(m: &Model) -> Model {
    m.iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

// ---- target 2: operations with power cuts -------------------------------------------------

#[derive(Clone, Debug)]
enum IoOp {
    Write { off: u64, data: Vec<u8> },
    Sync,
    SetLen(u64),
}

/// Applies every operation to a real file (the engine reads it through a map) and records it.
#[derive(Debug)]
struct Recording {
    file: File,
    ops: Arc<Mutex<Vec<IoOp>>>,
}

impl Storage for Recording {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.ops.lock().unwrap().push(IoOp::SetLen(len));
        Ok(())
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let data = bufs.concat();
        self.file.write_all_at(&data, offset)?;
        self.ops
            .lock()
            .unwrap()
            .push(IoOp::Write { off: offset, data });
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        self.ops.lock().unwrap().push(IoOp::Sync);
        Ok(())
    }
    fn file(&self) -> &File {
        &self.file
    }
}

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

/// A xorshift generator for the per-block choices of a power-cut image.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

const TREES: [&str; 3] = ["a", "b", "ab"];
/// Operations per input, so one input stays fast.
const MAX_STEPS: usize = 400;

/// Everything a run has recorded so far, for building power-cut images.
struct Trace {
    initial: Vec<u8>,
    ops: Arc<Mutex<Vec<IoOp>>>,
    /// Committed states by txid (0: the empty database).
    states: BTreeMap<u64, Model>,
    /// (ops done when the call returned, txid, durability asked for).
    acks: Vec<(usize, u64, Durability)>,
    opts: Options,
}

/// Interpret `data` as operations (insert, remove, drop a tree, commit with a durability, abort,
/// `db.sync()`, power cut) against a `BTreeMap` model, with every write, sync and resize
/// recorded. At a power cut, build the image a disk could hold (everything up to the last sync,
/// plus an input-chosen subset of later 4 KiB blocks, some torn), open it, and require that
/// `check()` passes and the contents equal one committed state no older than the last commit
/// acknowledged as durable. Panics on a violation.
pub fn ops_with_power_cuts(data: &[u8]) {
    let mut input = Input(data);
    let setup = input.byte();
    let page_size = if setup & 1 == 0 { 4096 } else { 8192 };
    let policy = Policy::ALL[(setup >> 1) as usize % Policy::ALL.len()];
    let opts = Options::default().page_size(page_size).policy(policy);
    let dir = Scratch::new("ops");
    let path = dir.path("db.larch");
    drop(Db::open(&path, opts).expect("create a database"));
    let initial = std::fs::read(&path).expect("read the new file");
    let ops = Arc::new(Mutex::new(Vec::new()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open the new file");
    let db = Db::open_with_storage(
        &path,
        Box::new(Recording {
            file,
            ops: ops.clone(),
        }),
        opts,
    )
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
    let mut steps = 0;
    while !input.is_empty() && steps < MAX_STEPS {
        steps += 1;
        let op = input.byte();
        match op % 16 {
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
                    [(op % 16 - 10) as usize];
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
                // db.sync() may not be called with a transaction open on this thread.
                drop(tx.take());
                working = committed.clone();
                db.sync().expect("sync");
                trace
                    .acks
                    .push((trace.ops.lock().unwrap().len(), last_txid, Durability::Sync));
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

/// The oldest txid a cut after `k` ops may show.
fn min_durable(trace: &Trace, ops: &[IoOp], k: usize) -> u64 {
    let mut min = 0;
    for &(done, txid, d) in &trace.acks {
        if done > k {
            break;
        }
        let durable = match d {
            Durability::Sync => true,
            // Durable once a later sync completed.
            Durability::NoMetaSync => ops[done..k].iter().any(|o| matches!(o, IoOp::Sync)),
            Durability::Async => false,
        };
        if durable {
            min = min.max(txid);
        }
    }
    min
}

fn apply(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

/// The image after a power cut following op `k`: everything up to the last sync before it,
/// then per `how`: nothing more (0), everything (1), or for each later 4 KiB block a choice of
/// lost, written, torn at a sector or torn anywhere (seeded by `seed`).
fn build_image(trace: &Trace, ops: &[IoOp], k: usize, how: u8, seed: u64) -> Vec<u8> {
    let durable_end = ops[..k]
        .iter()
        .rposition(|o| matches!(o, IoOp::Sync))
        .map_or(0, |i| i + 1);
    let mut img = trace.initial.clone();
    for op in &ops[..durable_end] {
        match op {
            IoOp::Write { off, data } => apply(&mut img, *off, data),
            IoOp::SetLen(len) => img.resize(*len as usize, 0),
            IoOp::Sync => {}
        }
    }
    let mut rng = Rng(seed | 1);
    for op in &ops[durable_end..k] {
        match (op, how % 4) {
            (_, 0) | (IoOp::Sync, _) => {}
            (IoOp::Write { off, data }, 1) => apply(&mut img, *off, data),
            (IoOp::SetLen(len), 1) => img.resize(*len as usize, 0),
            (IoOp::Write { off, data }, _) => {
                for (i, block) in data.chunks(4096).enumerate() {
                    let at = off + (i * 4096) as u64;
                    match rng.below(5) {
                        0 | 1 => {}
                        2 | 3 => apply(&mut img, at, block),
                        _ => {
                            let n = if rng.below(2) == 0 {
                                512.min(block.len())
                            } else {
                                1 + rng.below(block.len() as u64) as usize
                            };
                            apply(&mut img, at, &block[..n]);
                        }
                    }
                }
            }
            (IoOp::SetLen(len), _) => {
                if rng.below(2) == 0 {
                    img.resize(*len as usize, 0);
                }
            }
        }
    }
    img
}

fn verify_cut(trace: &Trace, k: usize, how: u8, seed: u64, dir: &Scratch) {
    let ops = trace.ops.lock().unwrap().clone();
    let img = build_image(trace, &ops, k, how, seed);
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
    let rx = db.begin_read().unwrap();
    let txid = rx.txid();
    let min = min_durable(trace, ops, k);
    assert!(
        txid >= min,
        "{ctx}: opened at txid {txid}, but txid {min} was acknowledged durable"
    );
    let want = trace
        .states
        .get(&txid)
        .unwrap_or_else(|| panic!("{ctx}: opened at txid {txid}, which was never committed"));
    let mut got = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        let tree: Tree = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{ctx}: scan of {name:?} failed: {e}"));
        assert_eq!(
            t.len().unwrap(),
            tree.len() as u64,
            "{ctx}: len() of {name:?}"
        );
        got.insert(name, tree);
    }
    assert!(
        normalize(&got) == normalize(want),
        "{ctx}: the contents at txid {txid} are not what that commit held"
    );
    drop(rx);
    // The recovered file takes new commits.
    let mut tx = db.begin_write().unwrap();
    tx.open_tree("after-cut")
        .unwrap()
        .insert(b"k", b"v")
        .unwrap_or_else(|e| panic!("{ctx}: insert after recovery: {e}"));
    tx.commit()
        .unwrap_or_else(|e| panic!("{ctx}: commit after recovery: {e}"));
    if let Err(e) = db.check() {
        panic!("{ctx}: check after a commit on the recovered file: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_fixup_leaves_a_valid_meta_alone() {
        let meta = crate::raw::Meta::empty(4096).encode();
        let stored = u32::from_le_bytes(meta[124..128].try_into().unwrap());
        assert_eq!(crc32(&meta[..124]), stored);
        let mut file = vec![0u8; 8192];
        file[..128].copy_from_slice(&meta);
        assert_eq!(with_checksums_fixed(&file), None);
    }
}
