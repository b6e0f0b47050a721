//! Adversarial power-cut and race tests: API call sequences that try to break the crash-safety
//! and durability promises of docs/format.md (commit protocol, group commit, the clean-close
//! marker, failed writes).
//!
//! The storage records every write, sync and resize, as tests/crash.rs does, with two stricter
//! rules: a sync is recorded when it *starts* (a write that lands while an fdatasync is in
//! flight is not assumed to be covered by it), and a failed write may leave its first half on
//! disk. A cut after operation k builds an image a disk could hold: everything up to the last
//! sync, plus any subset of the later writes. Every image must open (never `Corrupt`: no clean
//! close happened after the commit that a torn write belongs to) at a whole committed state no
//! older than the last commit acknowledged durable.
//!
//! Tests that fail are `#[ignore]`d with a `// FAILS:` comment saying why.

mod support;
use support::images::{contents, image_at, min_durable, normalize, takes_a_commit, Image, Model};
use support::recording::{open_rw, Call, Fault, FaultPlan, IoLog, IoOp, Recording, SyncRecorded};
use support::{scratch_dir, Rng};

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::{Db, Durability, Options, Policy};

/// A planned failure of the storage.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    /// Fail the write after this many more writes (0: the next one), leaving its first half
    /// on disk.
    write_in: Option<usize>,
    /// Fail the sync after this many more syncs.
    sync_in: Option<usize>,
}

#[derive(Debug, Default)]
struct Shared {
    ops: IoLog,
    faults: Mutex<Faults>,
}

impl Shared {
    fn len(&self) -> usize {
        self.ops.lock().unwrap().len()
    }
    fn arm(&self, f: Faults) {
        *self.faults.lock().unwrap() = f;
    }
}

fn countdown(slot: &mut Option<usize>) -> bool {
    match slot {
        Some(0) => {
            *slot = None;
            true
        }
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

impl FaultPlan for Shared {
    /// A failed write leaves its first half on disk (and in the trace).
    fn fault(&self, call: Call) -> Option<Fault> {
        let mut f = self.faults.lock().unwrap();
        let eio = || io::Error::from_raw_os_error(libc::EIO);
        match call {
            Call::Write if countdown(&mut f.write_in) => Some(Fault::Short(eio())),
            Call::Sync if countdown(&mut f.sync_in) => Some(Fault::Fail(eio())),
            _ => None,
        }
    }
}

/// Open `path` on a storage that applies every operation to the real file (the engine's map
/// reads it) and records it; a sync is recorded when it starts, then takes `delay`.
fn open_rec(path: &Path, sh: &Arc<Shared>, delay: Duration, opts: Options) -> Db {
    let storage = Recording::new(open_rw(path), &sh.ops)
        .faults(sh.clone())
        .sync_delay(delay, SyncRecorded::AtStart);
    Db::open_with_storage(path, Box::new(storage), opts).unwrap()
}

/// Everything a run recorded.
struct Trace {
    initial: Vec<u8>,
    ops: Vec<IoOp>,
    /// Committed states by txid (0: the empty database).
    states: BTreeMap<u64, Model>,
    /// (ops done when the call returned, txid made durable, durability).
    acks: Vec<(usize, u64, Durability)>,
    opts: Options,
}

/// Open the image of a cut and check it; Err says what broke.
fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path) -> Result<(), String> {
    let img = image_at(
        &trace.initial,
        &trace.ops,
        k,
        how,
        trace.opts.get_page_size(),
    );
    let path: PathBuf = dir.join("cut.larch");
    std::fs::write(&path, &img).unwrap();
    let ctx = format!("cut after {k} of {} ops, image {how:?}", trace.ops.len());
    let r = (|| {
        let db = Db::open(&path, trace.opts).map_err(|e| format!("{ctx}: open failed: {e}"))?;
        db.check()
            .map_err(|e| format!("{ctx}: check failed: {e}"))?;
        let txid = db.begin_read().unwrap().txid();
        let min = min_durable(&trace.acks, &trace.ops, k);
        if txid < min {
            return Err(format!(
                "{ctx}: opened at txid {txid}, but txid {min} was acknowledged durable"
            ));
        }
        let want = trace
            .states
            .get(&txid)
            .ok_or_else(|| format!("{ctx}: opened at txid {txid}, never committed"))?;
        if normalize(&contents(&db)) != normalize(want) {
            return Err(format!(
                "{ctx}: contents at txid {txid} differ from that commit's"
            ));
        }
        takes_a_commit(&db).map_err(|e| format!("{ctx}: {e}"))
    })();
    let _ = std::fs::remove_file(&path);
    r
}

/// Every cut with the four standard images, and every image that loses exactly one write
/// since the last sync at the cuts just before each sync (where the most is in flight).
/// Returns the first failure.
fn all_cuts(trace: &Trace, stride: usize) -> Result<usize, String> {
    let dir = scratch_dir();
    let mut n = 0;
    for k in (0..=trace.ops.len()).step_by(stride.max(1)) {
        for how in [
            Image::DurableOnly,
            Image::Everything,
            Image::Random(k as u64 * 7919 + 1),
            Image::Random(k as u64 * 104_729 + 3),
        ] {
            verify_cut(trace, k, how, dir.path())?;
            n += 1;
        }
    }
    for k in 0..=trace.ops.len() {
        let before_sync = k == trace.ops.len() || matches!(trace.ops[k], IoOp::Sync);
        if !before_sync {
            continue;
        }
        let from = trace.ops[..k]
            .iter()
            .rposition(|o| matches!(o, IoOp::Sync))
            .map_or(0, |i| i + 1);
        for j in from..k {
            if matches!(trace.ops[j], IoOp::Write { .. }) {
                verify_cut(trace, k, Image::AllBut(j), dir.path())?;
                n += 1;
            }
        }
    }
    Ok(n)
}

fn val(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// A change a commit made, for replaying states by txid.
#[derive(Clone, Debug)]
enum Change {
    Put(String, Vec<u8>, Vec<u8>),
    Del(String, Vec<u8>),
}

fn apply_changes(m: &mut Model, cs: &[Change]) {
    for c in cs {
        match c {
            Change::Put(t, k, v) => {
                m.entry(t.clone()).or_default().insert(k.clone(), v.clone());
            }
            Change::Del(t, k) => {
                if let Some(tree) = m.get_mut(t) {
                    tree.remove(k);
                }
            }
        }
    }
}

fn do_changes(tx: &mut larch::WriteTx<'_>, cs: &[Change]) -> larch::Result<()> {
    for c in cs {
        match c {
            Change::Put(t, k, v) => tx.open_tree(t)?.insert(k, v)?,
            Change::Del(t, k) => {
                tx.open_tree(t)?.remove(k)?;
            }
        }
    }
    Ok(())
}

/// States by txid from a log of (txid, changes): a txid not in the log (an in-place
/// compaction round) changed nothing.
fn replay(log: &[(u64, Vec<Change>)], max: u64) -> BTreeMap<u64, Model> {
    let by: BTreeMap<u64, &Vec<Change>> = log.iter().map(|(t, c)| (*t, c)).collect();
    let mut states = BTreeMap::new();
    let mut m = Model::new();
    states.insert(0, m.clone());
    for t in 1..=max {
        if let Some(cs) = by.get(&t) {
            apply_changes(&mut m, cs);
        }
        states.insert(t, m.clone());
    }
    states
}

fn random_changes(rng: &mut Rng, tag: &str, n: u64) -> Vec<Change> {
    let trees = ["a", "b"];
    let mut cs = Vec::new();
    for _ in 0..1 + rng.below(n) {
        let t = trees[rng.below(2) as usize].to_string();
        let k = format!("{tag}-{:04}", rng.below(300)).into_bytes();
        match rng.below(10) {
            0..=5 => {
                let len = match rng.below(12) {
                    0 => 5_000 + rng.below(20_000) as usize,
                    _ => rng.below(300) as usize,
                };
                cs.push(Change::Put(t, k, val(rng.next(), len)));
            }
            _ => cs.push(Change::Del(t, k)),
        }
    }
    cs
}

fn fresh_db(opts: Options) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    drop(Db::open(&path, opts).unwrap());
    let initial = std::fs::read(&path).unwrap();
    (dir, path, initial)
}

// ---- 1. Sessions with clean closes: the close marker must never turn a torn commit into
//         "damage" ----------------------------------------------------------------------------

/// What one session does.
#[derive(Clone, Copy, Debug)]
enum Act {
    Commit(Durability),
    Abort,
    Sync,
    Compact,
    /// Begin a read transaction and keep it over the next acts (pins what it sees).
    HoldReader,
    DropReaders,
}

/// Which acts a session draws from.
#[derive(Clone, Copy, Debug)]
enum Mix {
    Plain,
    /// Readers held over Async and NoMetaSync runs: the reader-pinned reuse path.
    Readers,
}

fn session_acts(rng: &mut Rng, n: usize, mix: Mix) -> Vec<Act> {
    (0..n)
        .map(|_| match mix {
            Mix::Plain => match rng.below(20) {
                0..=6 => Act::Commit(Durability::Async),
                7..=10 => Act::Commit(Durability::Sync),
                11..=12 => Act::Commit(Durability::NoMetaSync),
                13..=15 => Act::Abort,
                16..=17 => Act::Sync,
                18 => Act::Compact,
                _ => Act::Commit(Durability::Async),
            },
            Mix::Readers => match rng.below(20) {
                0..=7 => Act::Commit(Durability::Async),
                8..=10 => Act::Commit(Durability::NoMetaSync),
                11 => Act::Commit(Durability::Sync),
                12..=13 => Act::Abort,
                14 => Act::Sync,
                15..=16 => Act::HoldReader,
                17..=18 => Act::DropReaders,
                _ => Act::Compact,
            },
        })
        .collect()
}

/// Run `sessions` of random work on one file, each but the last ended by a clean close (the
/// marker), the last by a crash. Returns the trace.
fn run_sessions(seed: u64, sessions: usize, opts: Options, mix: Mix) -> Trace {
    let (_dir, path, initial) = fresh_db(opts);
    let sh = Arc::new(Shared::default());
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log: Vec<(u64, Vec<Change>)> = Vec::new();
    let mut acks = Vec::new();
    let mut last = 0u64;
    for s in 0..sessions {
        let db = open_rec(&path, &sh, Duration::ZERO, opts);
        // Vary how many commits each session makes so every slot parity is reopened.
        let n = 1 + rng.below(if matches!(mix, Mix::Plain) { 9 } else { 16 }) as usize;
        let acts = session_acts(&mut rng, n, mix);
        let mut readers = Vec::new();
        for act in acts {
            match act {
                Act::Commit(d) => {
                    let cs = random_changes(&mut rng, "s", 30);
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    tx.set_durability(d);
                    let t = tx.txid();
                    tx.commit().unwrap();
                    log.push((t, cs));
                    acks.push((sh.len(), t, d));
                    last = t;
                }
                Act::Abort => {
                    let cs = random_changes(&mut rng, "s", 30);
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    tx.abort();
                }
                Act::Sync => {
                    db.sync().unwrap();
                    acks.push((sh.len(), last, Durability::Sync));
                }
                Act::Compact => {
                    db.compact().unwrap();
                    last = db.begin_read().unwrap().txid();
                    acks.push((sh.len(), last, Durability::Sync));
                }
                Act::HoldReader => readers.push(db.begin_read().unwrap()),
                Act::DropReaders => readers.clear(),
            }
        }
        drop(readers);
        if s + 1 < sessions {
            drop(db);
            acks.push((sh.len(), last, Durability::Sync));
        } else {
            std::mem::forget(db);
        }
    }
    let ops = sh.ops.lock().unwrap().clone();
    Trace {
        initial,
        ops,
        states: replay(&log, last),
        acks,
        opts,
    }
}

/// Clean close writes a marker (closed_at) into the older meta. Later sessions reopen at
/// every parity, commit with every durability, abort, sync, compact, and close again; a cut
/// anywhere must open without a false `Corrupt` and without losing a durable commit.
#[test]
fn reopen_after_clean_close_then_crash_never_reports_damage_or_loses_a_commit() {
    let mut total = 0;
    for seed in 0..24u64 {
        let opts = match seed % 3 {
            0 => Options::default(),
            1 => Options::default().policy(Policy::Null),
            _ => Options::default().page_size(8192),
        };
        let trace = run_sessions(seed, 5, opts, Mix::Plain);
        match all_cuts(&trace, 1) {
            Ok(n) => total += n,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!("sessions: {total} cuts");
}

/// Readers held over runs of Async and NoMetaSync commits make freed pages wait for them
/// alone (pages written after every meta on disk: unpinned.rs), then a sync, close or
/// reopen moves the metas on disk past them; every cut keeps the durable state.
#[test]
fn readers_held_over_async_and_nometasync_runs_across_sessions_keep_the_durable_state() {
    let mut total = 0;
    for seed in 0..24u64 {
        let opts = match seed % 3 {
            0 => Options::default(),
            1 => Options::default().policy(Policy::BestFit),
            _ => Options::default().page_size(16384),
        };
        let trace = run_sessions(seed + 1000, 4, opts, Mix::Readers);
        match all_cuts(&trace, 1) {
            Ok(n) => total += n,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!("reader sessions: {total} cuts");
}

// ---- 2. Db::sync and group-commit followers racing a writer ---------------------------------

/// One writer makes Async, NoMetaSync and Sync commits and aborts (with overflow values and
/// deletes), a second makes Sync commits (group commit, followers that sync themselves), and a
/// third thread calls `Db::sync` in a loop, all on one recorded file whose sync takes 200 us.
/// Every cut keeps every acknowledged commit.
fn race_trace(seed: u64, opts: Options, compact: bool) -> Trace {
    race_sessions(seed, opts, compact, 1, 120)
}

/// `sessions` rounds of the race on one file, each but the last ended by a clean close.
fn race_sessions(seed: u64, opts: Options, compact: bool, sessions: usize, each: u64) -> Trace {
    let (_dir, path, initial) = fresh_db(opts);
    let sh = Arc::new(Shared::default());
    let log = Mutex::new(Vec::<(u64, Vec<Change>)>::new());
    let acks = Mutex::new(Vec::new());
    let mut last = 0;
    for session in 0..sessions as u64 {
        let db = open_rec(&path, &sh, Duration::from_micros(200), opts);
        let done = AtomicBool::new(false);
        let seed = seed * 1000 + session;
        std::thread::scope(|s| {
            let (db, log, acks, sh, done) = (&db, &log, &acks, &sh, &done);
            s.spawn(move || {
                let mut rng = Rng(seed * 7 + 1);
                let mut readers = Vec::new();
                for i in 0..each {
                    if compact && i % 40 == 39 {
                        db.compact().unwrap();
                        let t = db.begin_read().unwrap().txid();
                        acks.lock().unwrap().push((sh.len(), t, Durability::Sync));
                        continue;
                    }
                    match rng.below(10) {
                        0 => readers.push(db.begin_read().unwrap()),
                        1 => readers.clear(),
                        _ => {}
                    }
                    let cs = random_changes(&mut rng, "w1", 25);
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    let d = match rng.below(20) {
                        0..=10 => Durability::Async,
                        11..=13 => Durability::Sync,
                        14..=15 => Durability::NoMetaSync,
                        _ => {
                            // Hold the transaction a moment so a follower finds it busy.
                            if rng.below(2) == 0 {
                                std::thread::sleep(Duration::from_micros(rng.below(3000)));
                            }
                            tx.abort();
                            continue;
                        }
                    };
                    tx.set_durability(d);
                    let t = tx.txid();
                    if rng.below(4) == 0 {
                        std::thread::sleep(Duration::from_micros(rng.below(3000)));
                    }
                    tx.commit().unwrap();
                    log.lock().unwrap().push((t, cs));
                    acks.lock().unwrap().push((sh.len(), t, d));
                }
                done.store(true, Ordering::Release);
            });
            s.spawn(move || {
                let mut rng = Rng(seed * 13 + 5);
                let mut i = 0u64;
                while !done.load(Ordering::Acquire) && i < each + each / 4 {
                    i += 1;
                    let cs = vec![Change::Put(
                        "g".into(),
                        format!("w2-{seed}-{i:05}").into_bytes(),
                        val(i, 50 + rng.below(200) as usize),
                    )];
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    let t = tx.txid();
                    if rng.below(6) == 0 {
                        tx.abort();
                        continue;
                    }
                    tx.commit().unwrap();
                    log.lock().unwrap().push((t, cs));
                    acks.lock().unwrap().push((sh.len(), t, Durability::Sync));
                }
            });
            s.spawn(move || {
                let mut rng = Rng(seed * 17 + 3);
                while !done.load(Ordering::Acquire) {
                    let t = db.begin_read().unwrap().txid();
                    db.sync().unwrap();
                    acks.lock().unwrap().push((sh.len(), t, Durability::Sync));
                    std::thread::sleep(Duration::from_micros(rng.below(600)));
                }
            });
        });
        last = db.begin_read().unwrap().txid();
        if session + 1 < sessions as u64 {
            drop(db);
            acks.lock()
                .unwrap()
                .push((sh.len(), last, Durability::Sync));
        } else {
            std::mem::forget(db);
        }
    }
    let ops = sh.ops.lock().unwrap().clone();
    let log = log.into_inner().unwrap();
    let mut acks = acks.into_inner().unwrap();
    acks.sort_by_key(|&(d, t, _)| (d, t));
    Trace {
        initial,
        ops,
        states: replay(&log, last),
        acks,
        opts,
    }
}

#[test]
fn db_sync_and_group_followers_racing_a_writer_keep_every_acknowledged_commit() {
    for seed in 0..3u64 {
        let trace = race_trace(seed, Options::default(), false);
        let stride = 1 + trace.ops.len() / 1500;
        match all_cuts(&trace, stride) {
            Ok(n) => eprintln!("race seed {seed}: {n} cuts over {} ops", trace.ops.len()),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}

#[test]
fn db_sync_racing_in_place_compaction_keeps_every_acknowledged_commit() {
    for seed in 0..3u64 {
        let trace = race_trace(seed + 100, Options::default().policy(Policy::Null), true);
        let stride = 1 + trace.ops.len() / 1500;
        match all_cuts(&trace, stride) {
            Ok(n) => eprintln!(
                "compact race seed {seed}: {n} cuts over {} ops",
                trace.ops.len()
            ),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}

/// The race, over several sessions ended by clean closes (each leaves the closed-at
/// marker that a later torn commit must not be mistaken for damage against).
#[test]
fn racing_sessions_with_clean_closes_keep_every_acknowledged_commit() {
    for seed in 0..3u64 {
        let trace = race_sessions(seed + 200, Options::default(), false, 4, 40);
        let stride = 1 + trace.ops.len() / 1500;
        match all_cuts(&trace, stride) {
            Ok(n) => eprintln!(
                "race sessions seed {seed}: {n} cuts over {} ops",
                trace.ops.len()
            ),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}

// ---- 3. Failed writes -----------------------------------------------------------------------

/// A run of Async commits in which one commit's k-th write fails (half of it reaches the
/// file); the handle stays usable, the commit is retried, more Async commits follow and a
/// `Db::sync` (or a Sync commit) ends the run. Swept over k.
#[test]
fn failed_page_write_inside_an_async_run_then_sync_keeps_every_durable_commit() {
    for end_with_sync_commit in [false, true] {
        for k in 0..6usize {
            let opts = Options::default();
            let (_dir, path, initial) = fresh_db(opts);
            let sh = Arc::new(Shared::default());
            let db = open_rec(&path, &sh, Duration::ZERO, opts);
            let mut rng = Rng(k as u64 * 31 + 7);
            let mut log = Vec::new();
            let mut acks = Vec::new();
            let mut last = 0;
            for round in 0..6u64 {
                for i in 0..4u64 {
                    let cs = random_changes(&mut rng, "f", 30);
                    let failing = i == 2 && round % 2 == 1;
                    if failing {
                        sh.arm(Faults {
                            write_in: Some(k),
                            sync_in: None,
                        });
                        let mut tx = db.begin_write().unwrap();
                        let r = do_changes(&mut tx, &cs).and_then(|()| {
                            tx.set_durability(Durability::Async);
                            tx.commit()
                        });
                        sh.arm(Faults::default());
                        if r.is_ok() {
                            // The commit wrote fewer than k+1 times: it stands.
                            last += 1;
                            log.push((last, cs.clone()));
                            continue;
                        }
                    }
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    tx.set_durability(Durability::Async);
                    let t = tx.txid();
                    tx.commit().unwrap();
                    assert_eq!(t, last + 1);
                    last = t;
                    log.push((t, cs));
                }
                if end_with_sync_commit {
                    let cs = random_changes(&mut rng, "f", 5);
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    tx.set_durability(Durability::Sync);
                    let t = tx.txid();
                    tx.commit().unwrap();
                    last = t;
                    log.push((t, cs));
                } else {
                    db.sync().unwrap();
                }
                acks.push((sh.len(), last, Durability::Sync));
            }
            db.check().unwrap();
            std::mem::forget(db);
            let trace = Trace {
                initial,
                ops: sh.ops.lock().unwrap().clone(),
                states: replay(&log, last),
                acks,
                opts,
            };
            if let Err(e) = all_cuts(&trace, 1) {
                panic!("fail write {k}, sync commit {end_with_sync_commit}: {e}");
            }
        }
    }
}

/// `Db::sync` after a run of Async commits, with its k-th write or sync failing: the handle
/// is poisoned; the file (with the half write) reopens at a whole state no older than the
/// last durable commit, and so does every cut.
#[test]
fn failed_write_or_sync_during_db_sync_reopens_at_a_durable_state() {
    for fail_sync in [false, true] {
        for k in 0..3usize {
            let opts = Options::default();
            let (_dir, path, initial) = fresh_db(opts);
            let sh = Arc::new(Shared::default());
            let db = open_rec(&path, &sh, Duration::ZERO, opts);
            let mut rng = Rng(k as u64 * 131 + 3);
            let mut log = Vec::new();
            let mut acks = Vec::new();
            let mut last = 0;
            // A durable base, then runs of 1..=3 Async commits (both slot parities).
            for run in 1..=3u64 {
                for _ in 0..run {
                    let cs = random_changes(&mut rng, "y", 30);
                    let mut tx = db.begin_write().unwrap();
                    do_changes(&mut tx, &cs).unwrap();
                    tx.set_durability(Durability::Async);
                    last = tx.txid();
                    tx.commit().unwrap();
                    log.push((last, cs));
                }
                if run < 3 {
                    db.sync().unwrap();
                    acks.push((sh.len(), last, Durability::Sync));
                }
            }
            sh.arm(if fail_sync {
                Faults {
                    write_in: None,
                    sync_in: Some(k),
                }
            } else {
                Faults {
                    write_in: Some(k),
                    sync_in: None,
                }
            });
            let r = db.sync();
            sh.arm(Faults::default());
            if r.is_ok() {
                acks.push((sh.len(), last, Durability::Sync));
                std::mem::forget(db);
            } else {
                // Poisoned: every call fails until reopened.
                assert!(db.begin_write().is_err());
                drop(db);
                let db = Db::open(&path, opts).unwrap();
                db.check().unwrap();
                let t = db.begin_read().unwrap().txid();
                let min = acks.last().map_or(0, |a| a.1);
                assert!(t >= min, "reopened at {t}, {min} was durable");
            }
            let trace = Trace {
                initial,
                ops: sh.ops.lock().unwrap().clone(),
                states: replay(&log, last),
                acks,
                opts,
            };
            if let Err(e) = all_cuts(&trace, 1) {
                panic!("fail sync {fail_sync} at {k}: {e}");
            }
        }
    }
}

// ---- 4. Deterministic stories ---------------------------------------------------------------

/// Runs of 1..=4 Async commits that overwrite overflow values (so each frees the pages the
/// commit before it wrote), then a transaction that writes overflow runs at once (at insert
/// time) and aborts, then `Db::sync`, whose meta for an even run is first the commit before
/// the last: the abort must not have been handed pages that meta reaches.
#[test]
fn abort_writing_overflow_after_an_async_run_then_db_sync_keeps_the_fallback_intact() {
    for policy in [Policy::FirstFit, Policy::BestFit, Policy::AppendPreferring] {
        let opts = Options::default().policy(policy);
        let (_dir, path, initial) = fresh_db(opts);
        let sh = Arc::new(Shared::default());
        let db = open_rec(&path, &sh, Duration::ZERO, opts);
        let mut log = Vec::new();
        let mut acks = Vec::new();
        let mut last = 0;
        let mut n = 0u64;
        for run in 1..=8u64 {
            for _ in 0..(run % 4) + 1 {
                n += 1;
                let cs = vec![
                    Change::Put("o".into(), b"big".to_vec(), val(n, 9_000)),
                    Change::Put("o".into(), format!("k{}", n % 7).into_bytes(), val(n, 900)),
                ];
                let mut tx = db.begin_write().unwrap();
                do_changes(&mut tx, &cs).unwrap();
                tx.set_durability(Durability::Async);
                last = tx.txid();
                tx.commit().unwrap();
                log.push((last, cs));
            }
            // Overflow runs are written when inserted: the abort writes pages.
            let tx = db.begin_write().unwrap();
            for i in 0..6u64 {
                tx.open_tree("o")
                    .unwrap()
                    .insert(format!("junk{i}").as_bytes(), &vec![0xEE; 6_000])
                    .unwrap();
            }
            tx.abort();
            db.sync().unwrap();
            acks.push((sh.len(), last, Durability::Sync));
        }
        std::mem::forget(db);
        let trace = Trace {
            initial,
            ops: sh.ops.lock().unwrap().clone(),
            states: replay(&log, last),
            acks,
            opts,
        };
        if let Err(e) = all_cuts(&trace, 1) {
            panic!("{policy:?}: {e}");
        }
    }
}

/// The Sync commit that ends a run of Async commits (a one-fsync batch commit, or the
/// two-step when parity says so) fails on its k-th write; it is retried and the run made
/// durable. Swept over k and run lengths 1..=4.
#[test]
fn failed_write_in_the_sync_commit_ending_an_async_run_keeps_every_durable_commit() {
    for run in 1..=4u64 {
        for k in 0..5usize {
            let opts = Options::default();
            let (_dir, path, initial) = fresh_db(opts);
            let sh = Arc::new(Shared::default());
            let db = open_rec(&path, &sh, Duration::ZERO, opts);
            let mut rng = Rng(run * 100 + k as u64);
            let mut log = Vec::new();
            let mut acks = Vec::new();
            let mut last = 0;
            // Logged before the commit: a commit whose meta write failed may still be on
            // disk whole (the handle is poisoned), and open may pick it.
            let commit = |cs: &[Change], d: Durability, log: &mut Vec<(u64, Vec<Change>)>| {
                let mut tx = db.begin_write().unwrap();
                do_changes(&mut tx, cs)?;
                tx.set_durability(d);
                let t = tx.txid();
                log.retain(|(x, _)| *x != t);
                log.push((t, cs.to_vec()));
                tx.commit()?;
                Ok::<u64, larch::Error>(t)
            };
            for round in 0..3 {
                for _ in 0..run {
                    let cs = random_changes(&mut rng, "z", 20);
                    last = commit(&cs, Durability::Async, &mut log).unwrap();
                }
                let cs = random_changes(&mut rng, "z", 20);
                if round == 1 {
                    sh.arm(Faults {
                        write_in: Some(k),
                        sync_in: None,
                    });
                }
                let r = commit(&cs, Durability::Sync, &mut log);
                sh.arm(Faults::default());
                match r {
                    Ok(t) => last = t,
                    // A failed meta write poisons; a failed page write does not.
                    Err(_) if db.begin_write().is_err() => {
                        last = log.last().map_or(last, |l| l.0);
                        break;
                    }
                    Err(_) => last = commit(&cs, Durability::Sync, &mut log).unwrap(),
                }
                acks.push((sh.len(), last, Durability::Sync));
            }
            std::mem::forget(db);
            let trace = Trace {
                initial,
                ops: sh.ops.lock().unwrap().clone(),
                states: replay(&log, last),
                acks,
                opts,
            };
            if let Err(e) = all_cuts(&trace, 1) {
                panic!("run {run}, failing write {k}: {e}");
            }
        }
    }
}
