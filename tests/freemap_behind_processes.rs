//! A free map behind its meta (docs/format.md, "A free map behind its meta") as two processes
//! hand the writer to each other: random scripts of Async, Sync and NoMetaSync commits of
//! small, bulk and overflow edits, aborts, savepoints rolled back, held readers, syncs of
//! either process, closes and reopens, in-place compactions, under every policy and several
//! page sizes. Two handles opened with `Db::open_with_storage_as_process` stand for the two
//! processes. After every step the handle that wrote checks clean and reads the model; at
//! durable points a copy of the file (what a power cut then leaves) must open read-write,
//! check clean, hold the model of that point, and take more commits (a reused live page
//! shows as a wrong read or a checksum `check` finds) through a reopen.
//! `LARCH_BEHIND_CASES` sets the number of scripts (default 24).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use larch::{Db, Durability, Error, FileStorage, Options, Policy, ReadTx, WriteMode};
use larch_testkit::{scratch_dir, Rng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn open_rw(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

fn process(path: &Path, opts: Options) -> Db {
    Db::open_with_storage_as_process(
        path,
        |_| Box::new(FileStorage::new(open_rw(path), WriteMode::Pwrite)),
        opts,
    )
    .unwrap()
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    read_all(&rx)
}

fn read_all(rx: &ReadTx) -> Model {
    match rx.open_tree("t") {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap(),
        Err(Error::TreeNotFound(_)) => Model::new(),
        Err(e) => panic!("{e}"),
    }
}

fn value(rng: &mut Rng, ps: usize) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => ps * (1 + rng.below(6) as usize) + rng.below(100) as usize,
        1 => ps / 3 + rng.below(200) as usize,
        _ => 10 + rng.below(120) as usize,
    };
    let b = rng.below(256) as u8;
    (0..len).map(|i| b ^ (i % 251) as u8).collect()
}

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("k{:05}", rng.below(3000)).into_bytes()
}

/// One write transaction of random edits on `db`; the model follows if it commits.
fn write(db: &Db, rng: &mut Rng, model: &mut Model, ps: usize, log: &mut Vec<String>) {
    let mut tx = db.try_begin_write().unwrap();
    let mut work = model.clone();
    let mut kept = work.clone();
    let mut sp = None;
    {
        let mut t = tx.open_tree("t").unwrap();
        let edits = match rng.below(8) {
            0 => 300 + rng.below(600),
            1 | 2 => 20 + rng.below(60),
            _ => 1 + rng.below(6),
        };
        for _ in 0..edits {
            match rng.below(10) {
                0..=5 => {
                    let (k, v) = (key(rng), value(rng, ps));
                    t.insert(&k, &v).unwrap();
                    work.insert(k, v);
                }
                6..=8 => {
                    let k = key(rng);
                    assert_eq!(t.remove(&k).unwrap(), work.remove(&k).is_some());
                }
                _ => {
                    let lo = key(rng);
                    let mut hi = lo.clone();
                    hi[1] = hi[1].saturating_add(1);
                    t.remove_range(&lo[..]..&hi[..]).unwrap();
                    work.retain(|k, _| !(lo <= *k && *k < hi));
                }
            }
        }
    }
    if rng.below(5) == 0 {
        sp = Some(tx.savepoint());
        kept = work.clone();
        let mut t = tx.open_tree("t").unwrap();
        for _ in 0..1 + rng.below(40) {
            let (k, v) = (key(rng), value(rng, ps));
            t.insert(&k, &v).unwrap();
            work.insert(k, v);
        }
    }
    if let Some(sp) = sp {
        if rng.below(2) == 0 {
            tx.rollback_to(&sp).unwrap();
            work = kept;
        }
    }
    if rng.below(8) == 0 {
        log.push("abort".into());
        tx.abort();
        return;
    }
    let d = match rng.below(10) {
        0..=5 => Durability::Async,
        6..=7 => Durability::Sync,
        _ => Durability::NoMetaSync,
    };
    log.push(format!("commit {d:?}"));
    tx.set_durability(d);
    tx.commit().unwrap();
    *model = work;
}

/// A copy of the file taken at a durable point must open read-write and hold `model`,
/// and take commits through a reopen without harm.
fn check_copy(path: &Path, opts: Options, model: &Model, ctx: &str) {
    let db = Db::open(path, opts).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    db.check().unwrap_or_else(|e| panic!("{ctx}: check: {e}"));
    assert!(contents(&db) == *model, "{ctx}: contents");
    let mut m = model.clone();
    let mut rng = Rng(path.as_os_str().len() as u64 * 7919 + 1);
    for i in 0..6u32 {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for j in 0..20u32 {
                let k = format!("c{i:02}{j:03}").into_bytes();
                let v = value(&mut rng, 4096);
                t.insert(&k, &v).unwrap();
                m.insert(k, v);
            }
        }
        tx.set_durability(if i % 3 == 2 {
            Durability::Sync
        } else {
            Durability::Async
        });
        tx.commit().unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after commit {i}: {e}"));
        assert!(contents(&db) == m, "{ctx}: contents after commit {i}");
    }
    drop(db);
    let db = Db::open(path, opts).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check after reopen: {e}"));
    assert!(contents(&db) == m, "{ctx}: contents after reopen");
}

/// Is the newest meta of the file at `path` behind its free map?
fn newest_is_behind(path: &Path, ps: usize) -> bool {
    let img = std::fs::read(path).unwrap();
    let metas = [0, ps].map(|at| larch::raw::Meta::decode(&img[at..at + 128]).ok());
    metas
        .into_iter()
        .flatten()
        .max_by_key(|m| m.txid)
        .unwrap()
        .freemap_behind
}

/// Copies taken (all, with a behind newest meta), commits made, reopens.
#[derive(Debug, Default)]
struct Stats {
    copies: usize,
    behind: usize,
    commits: usize,
    reopens: usize,
}

fn run(seed: u64, dir: &Path, stats: &mut Stats) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let policy = [
        Policy::FirstFit,
        Policy::BestFit,
        Policy::Null,
        Policy::AppendPreferring,
    ][seed as usize % 4];
    let ps = [4096usize, 8192, 16384][(seed / 4) as usize % 3];
    let mut opts = Options::default().page_size(ps).policy(policy);
    if rng.below(3) == 0 {
        // Forced durable points often.
        opts = opts.max_unsynced_bytes(Some(64 << 10));
    }
    if seed % 3 == 2 {
        // Review of exp-sync-behind: Sync and NoMetaSync commits leave the free map behind
        // too, so the processes hand each other behind metas; a lowered cap makes commits of
        // either process cross it after the other's behind ones, and every catch-up and open
        // checks the carried bits against it.
        opts = opts.carried_max_bits([8, 64, 512][(seed / 3) as usize % 3]);
    }
    let path = dir.join(format!("p{seed}.larch"));
    drop(Db::open(&path, opts).unwrap());
    let mut dbs = [Some(process(&path, opts)), Some(process(&path, opts))];
    let mut model = Model::new();
    let mut held: Vec<(ReadTx, Model)> = Vec::new();
    let mut copies: Vec<(PathBuf, Model, String)> = Vec::new();
    let mut log: Vec<String> = Vec::new();
    // The handle that wrote last (it may hold the writer lock with Async commits).
    let mut writer = 0usize;
    for step in 0..160 {
        let h = rng.below(2) as usize;
        let ctx = |log: &Vec<String>| {
            format!(
                "seed {seed} step {step}: {:?}",
                &log[log.len().saturating_sub(12)..]
            )
        };
        match rng.below(20) {
            0..=11 => {
                if h != writer {
                    // The other process keeps the writer lock while its Async commits have no
                    // meta: its sync writes them and lets the lock go.
                    dbs[writer].as_ref().unwrap().sync().unwrap();
                    log.push(format!("sync {writer} (hand over)"));
                }
                log.push(format!("write {h}"));
                write(dbs[h].as_ref().unwrap(), &mut rng, &mut model, ps, &mut log);
                writer = h;
            }
            12 | 13 => {
                log.push(format!("sync {h}"));
                dbs[h].as_ref().unwrap().sync().unwrap();
                if h == writer && rng.below(2) == 0 {
                    let copy = dir.join(format!("p{seed}-{step}.larch"));
                    std::fs::copy(&path, &copy).unwrap();
                    stats.copies += 1;
                    stats.behind += usize::from(newest_is_behind(&copy, ps));
                    copies.push((copy, model.clone(), ctx(&log)));
                }
            }
            14 => {
                log.push(format!("check {h}"));
                let db = dbs[writer].as_ref().unwrap();
                db.check()
                    .unwrap_or_else(|e| panic!("{}: check: {e}", ctx(&log)));
            }
            15 => {
                if held.len() >= 2 {
                    held.remove(0);
                }
                let rx = dbs[writer].as_ref().unwrap().begin_read().unwrap();
                held.push((rx, model.clone()));
            }
            16 => {
                log.push(format!("reopen {h}"));
                held.clear();
                if h != writer {
                    dbs[writer].as_ref().unwrap().sync().unwrap();
                }
                dbs[h] = None;
                dbs[h] = Some(process(&path, opts));
                stats.reopens += 1;
                if h == writer {
                    writer = 1 - h;
                }
            }
            17 => {
                if h != writer {
                    dbs[writer].as_ref().unwrap().sync().unwrap();
                }
                log.push(format!("compact {h}"));
                dbs[h].as_ref().unwrap().compact().unwrap();
                writer = h;
            }
            _ => {
                held.pop();
            }
        }
        for (rx, m) in &held {
            assert!(read_all(rx) == *m, "{}: a held snapshot changed", ctx(&log));
        }
        let db = dbs[writer].as_ref().unwrap();
        assert!(contents(db) == model, "{}: contents", ctx(&log));
        if step % 16 == 0 {
            db.check()
                .unwrap_or_else(|e| panic!("{}: check: {e}", ctx(&log)));
        }
    }
    held.clear();
    stats.commits += log.iter().filter(|l| l.starts_with("commit")).count();
    dbs[writer].as_ref().unwrap().sync().unwrap();
    let copy = dir.join(format!("p{seed}-end.larch"));
    std::fs::copy(&path, &copy).unwrap();
    copies.push((copy, model.clone(), format!("seed {seed}: at the end")));
    drop(dbs);
    check_copy(
        &path,
        opts,
        &model,
        &format!("seed {seed}: the file after both closed"),
    );
    for (copy, m, ctx) in copies {
        check_copy(&copy, opts, &m, &format!("copy after {ctx}"));
        std::fs::remove_file(&copy).unwrap();
    }
}

#[test]
fn two_processes_handing_over_behind_free_maps_keep_every_copy_whole() {
    let cases: u64 = std::env::var("LARCH_BEHIND_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let dir = scratch_dir();
    let mut stats = Stats::default();
    for seed in 0..cases {
        run(seed, dir.path(), &mut stats);
    }
    eprintln!("{cases} scripts: {stats:?}");
    assert!(stats.behind > 0 && stats.behind < stats.copies, "{stats:?}");
}

/// A process that opens a live file whose newest meta is behind, holds a snapshot while the
/// first process keeps committing (every durability, overwrites and deletes that free the
/// snapshot's pages), and goes on after the first one closes: the snapshot reads what it
/// read, at every step, while the second process then writes over the file itself, and the
/// file reopens clean with every commit. At the default cap (every meta behind) and with
/// commits that save the free map every commit or two.
#[test]
fn a_snapshot_taken_by_a_second_process_of_a_behind_file_outlives_the_first_process() {
    for saving in [false, true] {
        let dir = scratch_dir();
        let path = dir.path().join("live.larch");
        let opts = if saving {
            Options::default().carried_max_bits(8)
        } else {
            Options::default()
        };
        let ctx = |step: &str| format!("saving {saving}: {step}");
        let mut rng = Rng(if saving { 11 } else { 7 });
        let mut model = Model::new();
        let a = {
            drop(Db::open(&path, opts).unwrap());
            process(&path, opts)
        };
        let put = |db: &Db, model: &mut Model, rng: &mut Rng, d: Durability, n: u64| {
            let mut tx = db.begin_write().unwrap();
            tx.set_durability(d);
            {
                let mut t = tx.open_tree("t").unwrap();
                for _ in 0..n {
                    let k = key(rng);
                    if rng.below(4) == 0 {
                        t.remove(&k).unwrap();
                        model.remove(&k);
                    } else {
                        let v = value(rng, 4096);
                        t.insert(&k, &v).unwrap();
                        model.insert(k, v);
                    }
                }
            }
            tx.commit().unwrap();
        };
        for _ in 0..20 {
            put(&a, &mut model, &mut rng, Durability::Sync, 40);
        }
        if !saving {
            assert!(newest_is_behind(&path, 4096), "{}", ctx("not behind"));
        }
        // The second process opens the live file and holds a snapshot of it.
        let b = process(&path, opts);
        let held = b.begin_read().unwrap();
        let seen = model.clone();
        assert!(read_all(&held) == seen, "{}", ctx("snapshot at open"));
        for (i, d) in [Durability::Sync, Durability::NoMetaSync, Durability::Async]
            .into_iter()
            .cycle()
            .take(30)
            .enumerate()
        {
            let n = 1 + rng.below(60);
            put(&a, &mut model, &mut rng, d, n);
            if i % 5 == 4 {
                a.sync().unwrap();
            }
            assert!(
                read_all(&held) == seen,
                "{}",
                ctx(&format!("snapshot after the first process's commit {i}"))
            );
        }
        drop(a);
        assert!(read_all(&held) == seen, "{}", ctx("after the first closed"));
        // The second process takes the writer: it builds on the file the first left.
        for i in 0..20 {
            let d = [Durability::Sync, Durability::Async][i % 2];
            let n = 1 + rng.below(60);
            put(&b, &mut model, &mut rng, d, n);
            assert!(
                read_all(&held) == seen,
                "{}",
                ctx(&format!("snapshot after its own commit {i}"))
            );
            assert!(contents(&b) == model, "{}", ctx("the newest state"));
        }
        b.check().unwrap();
        drop(held);
        drop(b);
        let db = Db::open(&path, opts).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("check after reopen: {e}"))));
        assert!(contents(&db) == model, "{}", ctx("contents after reopen"));
    }
}
