//! Power-cut simulation: every write, sync and resize the engine makes is recorded through a
//! `Storage`; for a cut after operation k we build an image a real disk could hold (everything
//! up to the last completed sync, plus any subset of later 4 KiB blocks, some torn), open it with
//! the real engine, and require a valid database holding exactly one committed state, no older
//! than the last commit acknowledged as durable.
//!
//! Scripted workloads run exhaustively (every k, three images each); random workloads run over
//! many seeds. `LARCH_CRASH_CASES` raises the number of random workloads (default 160, 40 cuts each).

mod support;
use support::{apply, apply_some, scratch_dir, Rng};

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use larch::{Db, Durability, Options, Policy, Storage};

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Clone, Debug)]
enum IoOp {
    Write { off: u64, data: Vec<u8> },
    Sync,
    SetLen(u64),
}

/// A storage that applies every operation to a real file (so the engine's map sees it) and
/// records it.
#[derive(Debug)]
struct Recording {
    file: File,
    ops: Arc<Mutex<Vec<IoOp>>>,
    /// How long a sync takes (so concurrent writers pile up as they do on a disk).
    sync_delay: std::time::Duration,
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
        std::thread::sleep(self.sync_delay);
        self.ops.lock().unwrap().push(IoOp::Sync);
        Ok(())
    }
    fn file(&self) -> &File {
        &self.file
    }
}

#[derive(Clone, Debug)]
enum Step {
    Put(&'static str, Vec<u8>, Vec<u8>),
    Del(&'static str, Vec<u8>),
    DropTree(&'static str),
    Commit(Durability),
    Abort,
    Sync,
    /// In-place compaction (several Sync commits, then truncation of the file).
    Compact,
}

/// Everything a run recorded.
struct Trace {
    initial: Vec<u8>,
    ops: Vec<IoOp>,
    /// Committed states by txid (txid 0: the empty database).
    states: BTreeMap<u64, Model>,
    /// (number of ops done when the call returned, txid, durability asked for).
    acks: Vec<(usize, u64, Durability)>,
    opts: Options,
}

fn run(steps: &[Step], opts: Options) -> Trace {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    drop(Db::open(&path, opts).unwrap());
    let initial = std::fs::read(&path).unwrap();
    let ops = Arc::new(Mutex::new(Vec::new()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let db = Db::open_with_storage(
        &path,
        Box::new(Recording {
            file,
            ops: ops.clone(),
            sync_delay: std::time::Duration::ZERO,
        }),
        opts,
    )
    .unwrap();
    let mut states = BTreeMap::new();
    states.insert(0u64, Model::new());
    let mut committed = Model::new();
    let mut working = committed.clone();
    let mut acks = Vec::new();
    let mut tx = None;
    let mut last_txid = 0;
    for step in steps {
        match step {
            Step::Put(t, k, v) => {
                let w = tx.get_or_insert_with(|| db.begin_write().unwrap());
                w.open_tree(t).unwrap().insert(k, v).unwrap();
                working
                    .entry(t.to_string())
                    .or_default()
                    .insert(k.clone(), v.clone());
            }
            Step::Del(t, k) => {
                let w = tx.get_or_insert_with(|| db.begin_write().unwrap());
                w.open_tree(t).unwrap().remove(k).unwrap();
                working.entry(t.to_string()).or_default().remove(k);
            }
            Step::DropTree(t) => {
                let w = tx.get_or_insert_with(|| db.begin_write().unwrap());
                w.delete_tree(t).unwrap();
                working.remove(*t);
            }
            Step::Commit(d) => {
                let mut w = tx.take().unwrap_or_else(|| db.begin_write().unwrap());
                let txid = w.txid();
                w.set_durability(*d);
                states.insert(txid, working.clone());
                w.commit().unwrap();
                acks.push((ops.lock().unwrap().len(), txid, *d));
                committed = working.clone();
                last_txid = txid;
            }
            Step::Abort => {
                drop(tx.take());
                working = committed.clone();
            }
            Step::Compact => {
                assert!(tx.is_none(), "script compacts with a transaction open");
                db.compact().unwrap();
                let now = db.begin_read().unwrap().txid();
                for t in last_txid + 1..=now {
                    states.insert(t, committed.clone());
                }
                last_txid = now;
                acks.push((ops.lock().unwrap().len(), now, Durability::Sync));
            }
            Step::Sync => {
                assert!(tx.is_none(), "script syncs with a transaction open");
                db.sync().unwrap();
                acks.push((ops.lock().unwrap().len(), last_txid, Durability::Sync));
            }
        }
    }
    drop(tx);
    // Leave the close-time sync out of the trace: cuts before it are the interesting ones.
    let ops = ops.lock().unwrap().clone();
    std::mem::forget(db);
    Trace {
        initial,
        ops,
        states,
        acks,
        opts,
    }
}

/// The oldest state a cut after `k` ops may show.
fn min_durable(trace: &Trace, k: usize) -> u64 {
    let mut min = 0;
    for &(done, txid, d) in &trace.acks {
        if done > k {
            break;
        }
        match d {
            Durability::Sync => min = min.max(txid),
            Durability::NoMetaSync => {
                // Durable once any later sync completed.
                if trace.ops[done..k].iter().any(|o| matches!(o, IoOp::Sync)) {
                    min = min.max(txid);
                }
            }
            Durability::Async => {}
        }
    }
    min
}

#[derive(Clone, Copy, Debug)]
enum Image {
    /// Nothing after the last sync reached the disk.
    DurableOnly,
    /// Every write reached the disk.
    Everything,
    /// Each 4 KiB block of each later write: lost, written, torn (a prefix), or one sector.
    Random(u64),
    /// Every later write but the one at this index of the trace (lost whole).
    AllBut(usize),
}

fn build_image(trace: &Trace, k: usize, how: Image) -> Vec<u8> {
    let last_sync = trace.ops[..k].iter().rposition(|o| matches!(o, IoOp::Sync));
    let durable_end = last_sync.map_or(0, |i| i + 1);
    let mut img = trace.initial.clone();
    for op in &trace.ops[..durable_end] {
        match op {
            IoOp::Write { off, data } => apply(&mut img, *off, data),
            IoOp::SetLen(len) => img.resize(*len as usize, 0),
            IoOp::Sync => {}
        }
    }
    let mut rng = match how {
        Image::Random(seed) => Some(Rng(seed | 1)),
        _ => None,
    };
    for (i, op) in trace.ops[durable_end..k].iter().enumerate() {
        match (op, how) {
            (_, Image::DurableOnly) => {}
            (IoOp::Write { off, data }, Image::AllBut(j)) => {
                if durable_end + i != j {
                    apply(&mut img, *off, data)
                }
            }
            (IoOp::Write { off, data }, Image::Everything) => apply(&mut img, *off, data),
            (IoOp::SetLen(len), Image::Everything | Image::AllBut(_)) => {
                img.resize(*len as usize, 0)
            }
            (IoOp::Write { off, data }, Image::Random(_)) => {
                apply_some(&mut img, *off, data, rng.as_mut().unwrap());
            }
            (IoOp::SetLen(len), Image::Random(_)) => {
                if rng.as_mut().unwrap().below(2) == 0 {
                    img.resize(*len as usize, 0);
                }
            }
            (IoOp::Sync, _) => {}
        }
    }
    img
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let mut m = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        let entries: BTreeMap<Vec<u8>, Vec<u8>> = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            t.len().unwrap(),
            entries.len() as u64,
            "len() disagrees with a scan"
        );
        m.insert(name, entries);
    }
    m
}

/// Trees that exist but are empty compare equal to trees that do not exist.
fn normalize(m: &Model) -> Model {
    m.iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path, label: &str) {
    let img = build_image(trace, k, how);
    let path: PathBuf = dir.join("cut.larch");
    std::fs::write(&path, &img).unwrap();
    let ctx = || {
        format!(
            "{label}: cut after {k} of {} ops, image {how:?}",
            trace.ops.len()
        )
    };
    let db = Db::open(&path, trace.opts).unwrap_or_else(|e| panic!("{}: open failed: {e}", ctx()));
    if let Err(e) = db.check() {
        panic!("{}: check failed: {e}", ctx());
    }
    let txid = db.begin_read().unwrap().txid();
    let min = min_durable(trace, k);
    assert!(
        txid >= min,
        "{}: opened at txid {txid}, but txid {min} was acknowledged durable",
        ctx()
    );
    let want = trace
        .states
        .get(&txid)
        .unwrap_or_else(|| panic!("{}: opened at txid {txid}, never committed", ctx()));
    let got = contents(&db);
    assert!(
        normalize(&got) == normalize(want),
        "{}: contents at txid {txid} differ from what that commit held",
        ctx()
    );
    // The recovered database must also take new commits.
    let mut tx = db.begin_write().unwrap();
    tx.open_tree("after-crash")
        .unwrap()
        .insert(b"k", b"v")
        .unwrap();
    tx.commit().unwrap();
    db.check()
        .unwrap_or_else(|e| panic!("{}: check after a new commit failed: {e}", ctx()));
    drop(db);
    std::fs::remove_file(&path).unwrap();
}

fn exhaustive(label: &str, steps: &[Step], opts: Options) -> usize {
    let trace = run(steps, opts);
    let dir = scratch_dir();
    let mut cuts = 0;
    for k in 0..=trace.ops.len() {
        for how in [
            Image::DurableOnly,
            Image::Everything,
            Image::Random(k as u64 * 7919 + 1),
            Image::Random(k as u64 * 104_729 + 3),
        ] {
            verify_cut(&trace, k, how, dir.path(), label);
            cuts += 1;
        }
    }
    eprintln!(
        "{label}: {cuts} power cuts over {} operations",
        trace.ops.len()
    );
    cuts
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

fn val(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// First commit of a new file, splits, file growth past the first preallocation, overflow
/// values, merges, tree creation and deletion, reuse of freed pages.
fn script_structure(d: Durability) -> Vec<Step> {
    let mut s = vec![
        Step::Put("a", b"first".to_vec(), b"commit".to_vec()),
        Step::Commit(d),
    ];
    for batch in 0..6u64 {
        for i in 0..120 {
            let n = batch * 120 + i;
            s.push(Step::Put("a", key(n), val(n, 300)));
        }
        s.push(Step::Commit(d));
    }
    s.push(Step::Put("big", b"overflow".to_vec(), val(7, 50_000)));
    s.push(Step::Put("big", b"small".to_vec(), val(8, 10)));
    s.push(Step::Commit(d));
    for n in (0..720).step_by(2) {
        s.push(Step::Del("a", key(n)));
    }
    s.push(Step::Commit(d));
    s.push(Step::Put("big", b"overflow".to_vec(), val(9, 20_000)));
    s.push(Step::DropTree("a"));
    s.push(Step::Commit(d));
    s.push(Step::Put("c", b"x".to_vec(), b"y".to_vec()));
    s.push(Step::Abort);
    for n in 0..200 {
        s.push(Step::Put("c", key(n), val(n, 100)));
    }
    s.push(Step::Commit(d));
    s
}

#[test]
fn every_cut_of_sync_commits_opens_at_a_whole_committed_state() {
    let n = exhaustive(
        "sync/first-fit",
        &script_structure(Durability::Sync),
        Options::default(),
    );
    assert!(n > 100);
}

#[test]
fn every_cut_of_sync_commits_under_null_policy_opens_at_a_whole_committed_state() {
    exhaustive(
        "sync/null",
        &script_structure(Durability::Sync),
        Options::default().policy(Policy::Null),
    );
}

#[test]
fn every_cut_of_one_fsync_commits_with_overflow_values_finds_any_missing_page() {
    // One-fsync commits list every page they wrote, overflow runs included; a cut that loses
    // any of them must fall back to the previous commit.
    let mut s = Vec::new();
    for round in 0..24u64 {
        let big = 5_000 + (round as usize * 7_919) % 60_000;
        s.push(Step::Put(
            "o",
            format!("big{}", round % 5).into_bytes(),
            val(round, big),
        ));
        s.push(Step::Put("o", key(round), val(round, 40)));
        if round % 3 == 0 {
            s.push(Step::Del(
                "o",
                format!("big{}", (round + 2) % 5).into_bytes(),
            ));
        }
        s.push(Step::Commit(Durability::Sync));
    }
    exhaustive("one-fsync/overflow", &s, Options::default());
    exhaustive(
        "two-fsync/overflow",
        &s,
        Options::default().one_fsync_commit(false),
    );
}

#[test]
fn every_cut_of_nometasync_commits_keeps_all_but_possibly_the_last() {
    exhaustive(
        "nometasync",
        &script_structure(Durability::NoMetaSync),
        Options::default(),
    );
}

#[test]
fn every_cut_of_mixed_durabilities_and_db_sync_opens_at_or_after_the_last_durable_commit() {
    let mut s = Vec::new();
    let ds = [
        Durability::Async,
        Durability::Async,
        Durability::Sync,
        Durability::NoMetaSync,
        Durability::Async,
    ];
    for round in 0..30u64 {
        for i in 0..25 {
            let n = (round * 37 + i * 11) % 400;
            if (round + i) % 4 == 0 {
                s.push(Step::Del("m", key(n)));
            } else {
                s.push(Step::Put(
                    "m",
                    key(n),
                    val(n + round, 150 + (n as usize % 200)),
                ));
            }
        }
        s.push(Step::Commit(ds[round as usize % ds.len()]));
        if round % 7 == 6 {
            s.push(Step::Sync);
        }
    }
    exhaustive("mixed", &s, Options::default().page_size(4096));
}

#[test]
fn every_cut_of_async_batches_made_durable_by_one_fsync_keeps_every_durable_commit() {
    // Runs of Async commits, then a Sync commit or db.sync: one fdatasync makes the whole run
    // durable when its meta lists every object the run wrote that the tree still holds (pages
    // rewritten within the run are freed and reused before the sync; overflow values come
    // and go). Run lengths 1..=4 make both meta-slot parities happen.
    let mut s = Vec::new();
    let mut n = 0u64;
    for round in 0..16u64 {
        for _ in 0..((round / 2) % 4) {
            for i in 0..6 {
                let k = (round * 5 + i * 3) % 24;
                s.push(Step::Put("b", key(k), val(n, 200)));
                n += 1;
            }
            if round % 3 == 1 {
                s.push(Step::Put(
                    "b",
                    b"big".to_vec(),
                    val(n, 9_000 + 700 * round as usize),
                ));
            }
            if round % 5 == 2 {
                s.push(Step::Del("b", b"big".to_vec()));
                s.push(Step::Del("b", key(round % 24)));
            }
            s.push(Step::Commit(Durability::Async));
        }
        s.push(Step::Put("b", key(100 + round), val(n, 60)));
        if round % 2 == 0 {
            s.push(Step::Commit(Durability::Sync));
        } else {
            s.push(Step::Commit(Durability::Async));
            s.push(Step::Sync);
        }
    }
    let trace = run(&s, Options::default());
    let syncs = trace.ops.iter().filter(|o| matches!(o, IoOp::Sync)).count();
    eprintln!(
        "async batches: {syncs} fdatasyncs for 16 durable points ({} ops)",
        trace.ops.len()
    );
    exhaustive("async batches", &s, Options::default());
    // The adversary that finds an unlisted page: every write since the last sync reached the
    // disk but one.
    let dir = scratch_dir();
    let mut cuts = 0;
    for k in 0..=trace.ops.len() {
        cuts += lose_one_write(&trace, k, dir.path(), "async batches, one lost");
    }
    eprintln!("async batches: {cuts} cuts losing one write each");
    // One per durable point when the meta slot allows, else two (the commit before it takes
    // the other slot first); the two-sync protocol would need three.
    assert!(
        syncs < 16 * 2,
        "{syncs} fdatasyncs: the one-fsync batch path never ran"
    );
    exhaustive(
        "async batches, two-fsync",
        &s,
        Options::default().one_fsync_commit(false),
    );
}

#[test]
fn every_cut_with_16k_pages_and_reuse_opens_at_a_whole_committed_state() {
    // Steady overwrites with Sync commits: freed pages are reused once durable.
    let mut s = Vec::new();
    for round in 0..25u64 {
        for i in 0..40 {
            s.push(Step::Put("r", key(i), val(round * 100 + i, 500)));
        }
        s.push(Step::Commit(Durability::Sync));
    }
    exhaustive("reuse/16k", &s, Options::default().page_size(16384));
}

fn random_steps(seed: u64) -> Vec<Step> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let trees = ["a", "b", "c"];
    let mut s = Vec::new();
    let n = 20 + rng.below(40);
    for _ in 0..n {
        let ops = 1 + rng.below(60);
        for _ in 0..ops {
            let t = trees[rng.below(3) as usize];
            let k = key(rng.below(500));
            match rng.below(10) {
                0..=5 => {
                    let len = match rng.below(20) {
                        0 => 5_000 + rng.below(30_000) as usize,
                        _ => rng.below(400) as usize,
                    };
                    s.push(Step::Put(t, k, val(rng.next(), len)));
                }
                6..=8 => s.push(Step::Del(t, k)),
                _ => {
                    if rng.below(10) == 0 {
                        s.push(Step::DropTree(t));
                    }
                }
            }
        }
        if rng.below(25) == 0 {
            s.push(Step::Commit(Durability::Sync));
            s.push(Step::Compact);
            continue;
        }
        match rng.below(12) {
            0 => s.push(Step::Abort),
            1 => {
                s.push(Step::Commit(Durability::Async));
                s.push(Step::Sync);
            }
            2..=4 => s.push(Step::Commit(Durability::Async)),
            5..=6 => s.push(Step::Commit(Durability::NoMetaSync)),
            _ => s.push(Step::Commit(Durability::Sync)),
        }
    }
    s
}

#[test]
fn every_cut_of_in_place_compaction_and_tail_truncation_keeps_the_data() {
    // Grow a fragmented file under the Null policy, then compact it in place (relocation
    // commits, the free tail given back, the file truncated), then write again.
    let mut s = Vec::new();
    for round in 0..8u64 {
        for i in 0..60 {
            let n = (round * 17 + i * 5) % 300;
            s.push(Step::Put(
                "f",
                key(n),
                val(n + round, 120 + (n as usize % 250)),
            ));
        }
        s.push(Step::Put(
            "f",
            format!("big{round}").into_bytes(),
            val(round, 9_000),
        ));
        s.push(Step::Commit(if round % 2 == 0 {
            Durability::Sync
        } else {
            Durability::Async
        }));
    }
    for n in 0..250 {
        s.push(Step::Del("f", key(n)));
    }
    s.push(Step::DropTree("g"));
    s.push(Step::Commit(Durability::Sync));
    s.push(Step::Compact);
    for n in 0..40 {
        s.push(Step::Put("f", key(n), val(n, 64)));
    }
    s.push(Step::Commit(Durability::Sync));
    let trace = run(&s, Options::default().policy(Policy::Null));
    let mut longest = 0;
    let mut shrank = false;
    for op in &trace.ops {
        if let IoOp::SetLen(len) = op {
            shrank |= *len < longest;
            longest = longest.max(*len);
        }
    }
    assert!(shrank, "the scenario should truncate the file");
    drop(trace);
    exhaustive("compact/null", &s, Options::default().policy(Policy::Null));
    exhaustive("compact/first-fit", &s, Options::default());
}

#[test]
fn random_workloads_survive_random_cuts() {
    let cases: u64 = std::env::var("LARCH_CRASH_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(160);
    let dir = scratch_dir();
    for seed in 0..cases {
        let opts = match seed % 4 {
            0 => Options::default(),
            1 => Options::default().policy(Policy::Null),
            2 => Options::default().page_size(8192),
            _ => Options::default().page_size(16384),
        };
        let trace = run(&random_steps(seed), opts);
        let mut rng = Rng(seed + 12345);
        for c in 0..40 {
            let k = rng.below(trace.ops.len() as u64 + 1) as usize;
            let how = match c % 3 {
                0 => Image::DurableOnly,
                1 => Image::Everything,
                _ => Image::Random(rng.next()),
            };
            verify_cut(&trace, k, how, dir.path(), &format!("random seed {seed}"));
        }
    }
    eprintln!("random workloads: {cases} seeds x 40 power cuts");
}

/// Group commit: four threads make Sync commits of one key each. A commit made while others
/// wait for the writer lock is written without a sync and acknowledged once a later sync
/// covers it. Every cut must open at a whole committed state holding every acknowledged key.
#[test]
fn every_cut_of_group_commits_keeps_every_acknowledged_commit() {
    const THREADS: u64 = 4;
    const EACH: u64 = 30;
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let opts = Options::default();
    drop(Db::open(&path, opts).unwrap());
    let initial = std::fs::read(&path).unwrap();
    let ops = Arc::new(Mutex::new(Vec::new()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let storage = Box::new(Recording {
        file,
        ops: ops.clone(),
        sync_delay: std::time::Duration::from_micros(300),
    });
    let db = Db::open_with_storage(&path, storage, opts).unwrap();
    // (txid, key number, ops done when the commit returned)
    let log = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, log, ops) = (&db, &log, &ops);
            s.spawn(move || {
                for i in 0..EACH {
                    let n = t * 1000 + i;
                    let mut tx = db.begin_write().unwrap();
                    let txid = tx.txid();
                    tx.open_tree("g")
                        .unwrap()
                        .insert(&key(n), &val(i, 100))
                        .unwrap();
                    tx.commit().unwrap();
                    let done = ops.lock().unwrap().len();
                    log.lock().unwrap().push((txid, n, done));
                }
            });
        }
    });
    let ops = ops.lock().unwrap().clone();
    std::mem::forget(db);
    let log = log.into_inner().unwrap();
    let syncs = ops.iter().filter(|o| matches!(o, IoOp::Sync)).count();
    eprintln!(
        "group commit: {} commits, {syncs} fdatasyncs, {} ops",
        log.len(),
        ops.len()
    );
    // Writers pile up behind a 300 us sync, so some commits must have shared one.
    assert!(
        syncs < log.len(),
        "{syncs} fdatasyncs for {} commits: no group formed",
        log.len()
    );
    // State after txid T: the keys of every commit <= T.
    let mut states = BTreeMap::new();
    let mut m = Model::new();
    states.insert(0u64, m.clone());
    let mut by_txid: Vec<_> = log.iter().map(|&(t, n, _)| (t, n)).collect();
    by_txid.sort();
    for (t, k) in by_txid {
        // Thread t's i-th commit wrote key(t * 1000 + i) = val(i, 100).
        m.entry("g".to_string())
            .or_default()
            .insert(key(k), val(k % 1000, 100));
        states.insert(t, m.clone());
    }
    let mut acks: Vec<(usize, u64, Durability)> = log
        .iter()
        .map(|(t, _, done)| (*done, *t, Durability::Sync))
        .collect();
    acks.sort_by_key(|&(done, t, _)| (done, t));
    let trace = Trace {
        initial,
        ops,
        states,
        acks,
        opts,
    };
    let cut_dir = scratch_dir();
    let mut cuts = 0;
    for k in 0..=trace.ops.len() {
        for how in [
            Image::DurableOnly,
            Image::Everything,
            Image::Random(k as u64 * 31 + 7),
        ] {
            verify_cut(&trace, k, how, cut_dir.path(), "group");
            cuts += 1;
        }
        // And every image that loses exactly one write since the last sync.
        cuts += lose_one_write(&trace, k, cut_dir.path(), "group, one lost");
    }
    eprintln!("group commit: {cuts} power cuts");
}

/// Verify the cut after `k` ops with every image that has all writes since the last sync but
/// one (the adversary that finds a page a manifest failed to list); the number of images.
fn lose_one_write(trace: &Trace, k: usize, dir: &Path, label: &str) -> usize {
    let from = trace.ops[..k]
        .iter()
        .rposition(|o| matches!(o, IoOp::Sync))
        .map_or(0, |i| i + 1);
    let mut n = 0;
    for j in from..k {
        if matches!(trace.ops[j], IoOp::Write { .. }) {
            verify_cut(trace, k, Image::AllBut(j), dir, label);
            n += 1;
        }
    }
    n
}
