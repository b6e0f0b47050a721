//! Power cuts while two processes take turns writing one file (docs/format.md, "Several
//! processes"). Two handles opened with `Db::open_with_storage_as_process` stand for two
//! processes: each is attached to the lock file on its own (their locks exclude each other as
//! two processes' would), and their writes, syncs and resizes go to one log in the order the
//! file saw them. Every cut of that log, with what came after the last sync landing in several
//! ways, must open at a whole committed state no older than the newest commit acknowledged
//! durable, and take a new commit.
//!
//! The scripts hand the writer lock back and forth under every durability: a process that
//! follows another rebuilds its state from the file (syncing it first unless the lock file
//! says it is durable); one with Async commits keeps the lock until it syncs; readers hold
//! snapshots across handoffs. `LARCH_CRASH_CASES` sets the number of random scripts (default 3).

mod support;
use support::images::{contents, image_at, min_durable, normalize, takes_a_commit, Image, Model};
use support::recording::{open_rw, IoLog, IoOp, Recording};
use support::{scratch_dir, Rng};

use std::collections::BTreeMap;
use std::path::Path;

use larch::{Db, Durability, Error, Options, ReadTx};

struct Trace {
    initial: Vec<u8>,
    ops: Vec<IoOp>,
    /// Committed states by txid.
    states: BTreeMap<u64, Model>,
    /// (ops done when the call returned, txid, durability it made durable).
    acks: Vec<(usize, u64, Durability)>,
    page_size: usize,
    handoffs: usize,
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

fn run(seed: u64, steps: usize) -> Trace {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let opts = Options::default();
    drop(Db::open(&path, opts).unwrap());
    let initial = std::fs::read(&path).unwrap();
    let log: IoLog = Default::default();
    let open = || {
        Db::open_with_storage_as_process(
            &path,
            |p| Box::new(Recording::new(open_rw(p), &log)),
            opts,
        )
        .unwrap()
    };
    let dbs = [open(), open()];
    let mut rng = Rng(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut states = BTreeMap::new();
    states.insert(0u64, Model::new());
    let mut acks = Vec::new();
    // Newest commit each "process" made.
    let mut last = [0u64; 2];
    let mut held: Vec<ReadTx> = Vec::new();
    let mut writer_was = usize::MAX;
    let mut handoffs = 0;
    let ops_len = || log.lock().unwrap().len();
    for _ in 0..steps {
        let who = rng.below(2) as usize;
        let db = &dbs[who];
        match rng.below(10) {
            0..=5 => {
                let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                    [rng.below(3) as usize];
                let mut tx = match db.try_begin_write() {
                    Ok(tx) => tx,
                    Err(Error::WriterBusy { .. }) => {
                        // The other keeps the lock for its Async commits until it syncs.
                        dbs[1 - who].sync().unwrap();
                        acks.push((ops_len(), last[1 - who], Durability::Sync));
                        db.try_begin_write().unwrap()
                    }
                    Err(e) => panic!("begin_write: {e}"),
                };
                if writer_was != who {
                    handoffs += 1;
                    writer_was = who;
                }
                tx.set_durability(d);
                let mut next = model.clone();
                {
                    let mut t = tx.open_tree("t").unwrap();
                    for _ in 0..1 + rng.below(4) {
                        let k = key(rng.below(40));
                        if rng.below(4) == 0 {
                            t.remove(&k).unwrap();
                            next.remove(&k);
                        } else {
                            let len = if rng.below(5) == 0 { 6000 } else { 40 };
                            let v = vec![rng.below(256) as u8; len];
                            t.insert(&k, &v).unwrap();
                            next.insert(k, v);
                        }
                    }
                }
                let txid = tx.txid();
                tx.commit().unwrap();
                model = next;
                let mut m = Model::new();
                m.insert("t".to_string(), model.clone());
                states.insert(txid, m);
                last[who] = txid;
                acks.push((ops_len(), txid, d));
            }
            6 => {
                db.sync().unwrap();
                acks.push((ops_len(), last[who], Durability::Sync));
            }
            7 => {
                // An aborted transaction (its overflow value is written at insert time).
                if let Ok(tx) = db.try_begin_write() {
                    tx.open_tree("t")
                        .unwrap()
                        .insert(&key(rng.below(40)), &vec![9u8; 7000])
                        .unwrap();
                    tx.abort();
                }
            }
            _ => {
                // Take or drop a reader: snapshots held across handoffs pin pages.
                if held.len() < 3 && rng.below(2) == 0 {
                    held.push(db.begin_read().unwrap());
                } else if !held.is_empty() {
                    let i = rng.below(held.len() as u64) as usize;
                    check_snapshot(&held.swap_remove(i), &states);
                }
            }
        }
    }
    for rx in held {
        check_snapshot(&rx, &states);
    }
    let ops = log.lock().unwrap().clone();
    drop(dbs);
    Trace {
        initial,
        ops,
        states,
        acks,
        page_size: opts.get_page_size(),
        handoffs,
    }
}

/// A snapshot held across the other process's commits still shows its commit: no page it
/// reaches was reused (a writer that follows another process keeps every page free in the
/// file's newest commit until older readers are gone).
fn check_snapshot(rx: &ReadTx, states: &BTreeMap<u64, Model>) {
    let got: BTreeMap<Vec<u8>, Vec<u8>> = match rx.open_tree("t") {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let want = states[&rx.txid()].get("t").cloned().unwrap_or_default();
    assert!(
        got == want,
        "snapshot {} changed under its reader",
        rx.txid()
    );
}

fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path, label: &str) {
    let img = image_at(&trace.initial, &trace.ops, k, how, trace.page_size);
    let path = dir.join("cut.larch");
    std::fs::write(&path, &img).unwrap();
    let ctx = || format!("{label}: cut after {k} of {} ops, {how:?}", trace.ops.len());
    let db = Db::open(&path, Options::default())
        .unwrap_or_else(|e| panic!("{}: open failed: {e}", ctx()));
    db.check()
        .unwrap_or_else(|e| panic!("{}: check failed: {e}", ctx()));
    let txid = db.begin_read().unwrap().txid();
    let min = min_durable(&trace.acks, &trace.ops, k);
    assert!(
        txid >= min,
        "{}: opened at txid {txid}, but txid {min} was acknowledged durable",
        ctx()
    );
    let want = trace
        .states
        .get(&txid)
        .unwrap_or_else(|| panic!("{}: opened at txid {txid}, never committed", ctx()));
    assert!(
        normalize(&contents(&db)) == normalize(want),
        "{}: contents at txid {txid} differ from that commit's",
        ctx()
    );
    takes_a_commit(&db).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
    drop(db);
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(dir.join("cut.larch-lock"));
}

#[test]
fn every_cut_of_two_processes_taking_turns_opens_at_a_durable_whole_state() {
    let cases: u64 = std::env::var("LARCH_CRASH_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = scratch_dir();
    for seed in 0..cases {
        let trace = run(seed * 7 + 1, 40);
        assert!(
            trace.handoffs >= 4,
            "seed {seed}: the writer changed hands {} times",
            trace.handoffs
        );
        let label = format!("seed {seed}");
        let mut cuts = 0;
        for k in 0..=trace.ops.len() {
            for how in [
                Image::DurableOnly,
                Image::Everything,
                Image::Random(k as u64 * 7919 + seed),
            ] {
                verify_cut(&trace, k, how, dir.path(), &label);
                cuts += 1;
            }
        }
        eprintln!(
            "{label}: {cuts} cuts over {} ops, {} handoffs",
            trace.ops.len(),
            trace.handoffs
        );
    }
}
