//! Threshold compaction of a file that more than one process writes, or that processes open,
//! write a little and close (docs/format.md, "Across opens and processes"): a writer state
//! without history (at open, or rebuilt after another process committed) counts the free
//! pages less the working space, so dead space others left is compacted and working space is
//! not; a handle left open looks after others have gone; a compaction a process started
//! finishes when it closes.
//!
//! Two handles opened with `Db::open_with_storage_as_process` stand for two processes. Only
//! commits, `Db::sync` and open look at the threshold here (the timer's interval is an hour),
//! and every figure is a file size or a count, never a duration.

use std::path::{Path, PathBuf};
use std::time::Duration;

use larch::{Db, Durability, Options, Policy};

const T: f64 = 0.3;
const UNSYNCED: u64 = 256 << 10;
const KEYS: u64 = 2000;

fn opts(policy: Policy, d: Durability) -> Options {
    opts_unsynced(policy, d, UNSYNCED)
}

fn opts_unsynced(policy: Policy, d: Durability, unsynced: u64) -> Options {
    Options::default()
        .policy(policy)
        .durability(d)
        .max_unsynced_bytes(Some(unsynced))
        .compaction_threshold(Some(T))
        .compaction_min_bytes(256 << 10)
        .compaction_check_every(Duration::from_secs(3600))
}

/// The bound docs/format.md states for steady overwrites ("The bound"): what crash safety
/// keeps (the live data, up to `max_unsynced_bytes` of replaced pages, one commit) over
/// (1 - t), times the pager's growth step, plus 512 KiB.
fn bound(live: u64) -> u64 {
    bound_unsynced(live, UNSYNCED)
}

fn bound_unsynced(live: u64, unsynced: u64) -> u64 {
    let keep = live + unsynced + 40 * 4096;
    (keep as f64 / (1.0 - T) * 1.125) as u64 + (512 << 10)
}

/// A fresh database holding `KEYS` keys of 200 bytes in tree "t", closed.
fn loaded(dir: &Path) -> PathBuf {
    loaded_with(dir, KEYS)
}

fn loaded_with(dir: &Path, keys: u64) -> PathBuf {
    let path = dir.join("db.larch");
    let db = Db::open(&path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for k in 0..keys {
            t.insert(&k.to_be_bytes(), &[0; 200]).unwrap();
        }
    }
    tx.commit().unwrap();
    drop(db);
    path
}

/// `commits` commits of 20 random overwrites each, with durability `d`.
fn overwrite(db: &Db, x: &mut u64, commits: u32, d: Durability) {
    for _ in 0..commits {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..20 {
                *x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = (*x >> 33) % KEYS;
                t.insert(&k.to_be_bytes(), &[(*x % 251) as u8; 200])
                    .unwrap();
            }
        }
        tx.set_durability(d);
        tx.commit().unwrap();
    }
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn live_bytes(db: &Db) -> u64 {
    db.stats().unwrap().live_pages * 4096
}

/// The size of a compacted copy of the database at `path` (opened and closed here).
fn compacted_size(path: &Path) -> u64 {
    let db = Db::open(path, Options::default()).unwrap();
    let copy = path.with_extension("copy");
    db.compact_to(&copy).unwrap();
    let n = len(&copy);
    std::fs::remove_file(&copy).unwrap();
    n
}

fn file_storage(p: &Path) -> Box<dyn larch::Storage> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    Box::new(larch::FileStorage::new(f, larch::WriteMode::Pwrite))
}

fn as_process(path: &Path, o: Options) -> Db {
    Db::open_with_storage_as_process(path, file_storage, o).unwrap()
}

/// Short-lived processes overwriting keys under a policy that reuses pages: what is free when
/// one closes is the working space the next one reuses (the pages that waited for a durable
/// commit, those it had not reused yet), not dead space. Compacting it at every open would
/// rewrite the file for nothing; a few compactions at most, and the file stays bounded. With
/// a `max_unsynced_bytes` larger than the live data too, where that working space is most
/// of the file.
#[test]
fn short_lived_processes_do_not_compact_a_file_whose_free_pages_are_working_space() {
    for (d, unsynced, commits) in [
        (Durability::Sync, UNSYNCED, 10),
        (Durability::Async, UNSYNCED, 10),
        (Durability::Async, 4 * UNSYNCED, 60),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = loaded(dir.path());
        let o = opts_unsynced(Policy::FirstFit, d, unsynced);
        let (mut x, mut largest, mut live, mut compactions) = (7u64, 0, 0, 0);
        for _ in 0..40 {
            let db = Db::open(&path, o).unwrap();
            overwrite(&db, &mut x, commits, d);
            db.sync().unwrap();
            let _ = db.wait_for_compaction().unwrap();
            compactions += db.compactions();
            live = live.max(live_bytes(&db));
            drop(db);
            largest = largest.max(len(&path));
        }
        let copy = compacted_size(&path);
        let bound = bound_unsynced(live, unsynced);
        eprintln!(
            "{d:?}, max_unsynced {unsynced}: {compactions} compactions in 40 opens; largest \
             {largest}, compacted copy {copy}, live {live}, bound {bound}"
        );
        assert!(
            compactions <= 2,
            "{d:?} {unsynced}: {compactions} compactions in 40 opens of a file of working space"
        );
        assert!(
            largest <= bound,
            "{d:?} {unsynced}: the file reached {largest}"
        );
    }
}

/// Two processes writing in turn: one keeps the file open, the other opens it, makes ten
/// commits and closes it; then the first makes one. Each time the first takes the writer
/// lock after the other's commits it rebuilds its writer state from the file, and counts the
/// dead space the other left (the other could not compact: the first was attached). Under
/// Null the file is compacted and stays within the bound; under FirstFit, whose free pages
/// are working space, it is not compacted turn after turn.
#[test]
fn two_processes_writing_in_turn_compact_dead_space_and_not_working_space() {
    for (policy, d) in [
        (Policy::Null, Durability::Sync),
        (Policy::Null, Durability::Async),
        (Policy::FirstFit, Durability::Sync),
        (Policy::FirstFit, Durability::Async),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = loaded(dir.path());
        let o = opts(policy, d);
        let a = as_process(&path, o);
        let (mut x, mut largest, mut live) = (7u64, 0, 0);
        for _ in 0..40 {
            let b = as_process(&path, o);
            overwrite(&b, &mut x, 10, d);
            b.sync().unwrap();
            drop(b);
            overwrite(&a, &mut x, 1, d);
            a.sync().unwrap();
            let _ = a.wait_for_compaction().unwrap();
            live = live.max(live_bytes(&a));
            largest = largest.max(len(&path));
        }
        let (n, refused) = (a.compactions(), a.compactions_refused());
        drop(a);
        let copy = compacted_size(&path);
        eprintln!(
            "{policy:?} {d:?}: {n} compactions ({refused} refused) in 40 turns; largest \
             {largest}, compacted copy {copy}, live {live}, bound {}",
            bound(live)
        );
        assert!(
            largest <= bound(live),
            "{policy:?} {d:?}: reached {largest}"
        );
        if policy == Policy::Null {
            assert!(n >= 1, "{policy:?} {d:?}: never compacted");
        } else {
            assert!(n <= 2, "{policy:?} {d:?}: {n} compactions of working space");
        }
    }
}
