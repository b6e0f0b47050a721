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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::{Db, Durability, Options, Policy};
use larch_testkit::file_storage;

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

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
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

/// Sixty commits of overwrites under Null, without a threshold: dead space, left there.
fn leave_dead_space(path: &Path) {
    let db = Db::open(path, Options::default().policy(Policy::Null)).unwrap();
    overwrite(&db, &mut 7, 60, Durability::Sync);
}

fn as_process(path: &Path, o: Options) -> Db {
    Db::open_with_storage_as_process(path, file_storage, o).unwrap()
}

/// Processes that open the file, make one commit and close it at once, as a command-line
/// tool does, under the policy that never reuses a page: every one leaves dead space. The
/// compaction one of them starts (at open, where the file's free pages less the working
/// space are past the threshold) finishes when it closes, so the file stays within the bound
/// and is replaced by compacted copies along the way (its inode changes).
#[test]
fn processes_that_close_right_after_one_commit_keep_a_null_policy_file_bounded() {
    for d in [Durability::Sync, Durability::Async] {
        let dir = tempfile::tempdir().unwrap();
        let path = loaded(dir.path());
        let o = opts(Policy::Null, d);
        let (mut x, mut largest, mut live, mut switched) = (7u64, 0, 0, 0);
        let mut ino = inode(&path);
        for _ in 0..80 {
            let db = Db::open(&path, o).unwrap();
            overwrite(&db, &mut x, 1, d);
            db.sync().unwrap();
            live = live.max(live_bytes(&db));
            drop(db);
            largest = largest.max(len(&path));
            if inode(&path) != ino {
                switched += 1;
                ino = inode(&path);
            }
        }
        let copy = compacted_size(&path);
        eprintln!(
            "{d:?}: largest {largest}, end {}, compacted copy {copy}, live {live}, bound {}, \
             files switched {switched}",
            len(&path),
            bound(live)
        );
        assert!(switched >= 1, "{d:?}: the file was never compacted");
        assert!(
            largest <= bound(live),
            "{d:?}: the file reached {largest}; live {live}, bound {}",
            bound(live)
        );
    }
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

/// A process that opens a file another process left mostly free compacts it without
/// writing anything: at open its free pages, less the working space, are past the threshold.
/// A reader begun at once keeps its snapshot of the old file.
#[test]
fn a_process_that_opens_a_file_left_with_dead_space_compacts_it_without_writing() {
    const MANY: u64 = 10 * KEYS;
    let dir = tempfile::tempdir().unwrap();
    let path = loaded_with(dir.path(), MANY);
    let db = Db::open(&path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for k in 0..MANY {
            if k % 10 != 0 {
                t.remove(&k.to_be_bytes()).unwrap();
            }
        }
    }
    tx.commit().unwrap();
    drop(db);
    let before = len(&path);
    let db = Db::open(&path, opts(Policy::FirstFit, Durability::Sync)).unwrap();
    let rx = db.begin_read().unwrap();
    let report = db.wait_for_compaction().unwrap();
    assert_eq!(db.compactions(), 1, "opening did not compact: {report:?}");
    assert_eq!(rx.open_tree("t").unwrap().len().unwrap(), MANY / 10);
    drop(rx);
    let after = len(&path);
    let copy = compacted_size_while_open(&db, &path);
    eprintln!("{before} -> {after}, compacted copy {copy}");
    assert!(after * 3 < before, "{before} -> {after}");
    assert!(
        after <= copy + (256 << 10),
        "{after} against a copy of {copy}"
    );
    db.check().unwrap();
    drop(db);
    // Opened again, the compacted file is not compacted again.
    let db = Db::open(&path, opts(Policy::FirstFit, Durability::Sync)).unwrap();
    assert_eq!(db.wait_for_compaction().unwrap(), None);
    assert_eq!((db.compactions(), db.compactions_refused()), (0, 0));
}

fn compacted_size_while_open(db: &Db, path: &Path) -> u64 {
    let copy = path.with_extension("copy");
    db.compact_to(&copy).unwrap();
    let n = len(&copy);
    std::fs::remove_file(&copy).unwrap();
    n
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

/// A process that keeps the file open without writing, while others open it, write and close
/// it: they cannot compact (it is attached), so it must. Its `Db::sync` (as its timer would)
/// finds the others' commits, takes the free writer lock, rebuilds its writer state and
/// compacts. While another process is attached the compaction is refused, and the next look
/// once it has gone compacts.
#[test]
fn a_handle_left_open_compacts_what_processes_that_came_and_went_wrote() {
    for d in [Durability::Sync, Durability::Async] {
        let dir = tempfile::tempdir().unwrap();
        let path = loaded(dir.path());
        let o = opts(Policy::Null, d);
        let a = as_process(&path, o);
        let (mut x, mut largest, mut live) = (7u64, 0, 0);
        for turn in 0..40 {
            let b = as_process(&path, o);
            overwrite(&b, &mut x, if turn == 20 { 30 } else { 10 }, d);
            b.sync().unwrap();
            if turn == 20 {
                // Still attached: the look is refused, and counted.
                let refused = a.compactions_refused();
                a.sync().unwrap();
                assert!(a.wait_for_compaction().is_err());
                assert_eq!(a.compactions_refused(), refused + 1);
            }
            drop(b);
            a.sync().unwrap();
            let _ = a.wait_for_compaction().unwrap();
            live = live.max(live_bytes(&a));
            largest = largest.max(len(&path));
        }
        let n = a.compactions();
        drop(a);
        let copy = compacted_size(&path);
        eprintln!(
            "{d:?}: {n} compactions in 40 turns; largest {largest}, compacted copy {copy}, \
             live {live}, bound {}",
            bound(live)
        );
        assert!(n >= 1, "{d:?}: never compacted");
        assert!(largest <= bound(live), "{d:?}: reached {largest}");
    }
}

/// A read-only handle of another process is attached: opening the file read-write does not
/// start a compaction (nor count a refusal) however much dead space it holds; once the
/// reader has gone, the writer's next look compacts.
#[test]
fn a_read_only_process_attached_keeps_the_compaction_at_open_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let path = loaded(dir.path());
    let o = opts(Policy::Null, Durability::Sync);
    leave_dead_space(&path);
    let ro = as_process(&path, Options::default().read_only(true));
    let rx = ro.begin_read().unwrap();
    let w = as_process(&path, o);
    assert_eq!(w.wait_for_compaction().unwrap(), None);
    assert_eq!((w.compactions(), w.compactions_refused()), (0, 0));
    drop(rx);
    drop(ro);
    w.sync().unwrap();
    w.wait_for_compaction().unwrap();
    assert_eq!(w.compactions(), 1);
    w.check().unwrap();
}

/// A compaction file system that, when the copy's file is created, has another process
/// open the database and commit one key; the other process closes at once, or stays open
/// until the test lets it go.
#[derive(Debug)]
struct OpenDuringCopy {
    path: PathBuf,
    stay: bool,
    armed: Mutex<bool>,
    other: Mutex<Option<Db>>,
}

impl larch::CompactionFs for OpenDuringCopy {
    fn storage(
        &self,
        _path: &Path,
        file: std::fs::File,
        mode: larch::WriteMode,
    ) -> Box<dyn larch::Storage> {
        if std::mem::take(&mut *self.armed.lock().unwrap()) {
            let db = as_process(&self.path, Options::default());
            let tx = db.begin_write().unwrap();
            tx.open_tree("t").unwrap().insert(b"other", b"1").unwrap();
            tx.commit().unwrap();
            if self.stay {
                *self.other.lock().unwrap() = Some(db);
            }
        }
        Box::new(larch::FileStorage::new(file, mode))
    }
}

/// The compaction that open starts runs while another process opens the file and commits.
/// If that process has gone by the switch, its commit is in the compacted file; if it is
/// still attached, the switch is abandoned and the old file kept, and a later look compacts.
/// Either way nothing is lost.
#[test]
fn a_compaction_started_at_open_keeps_the_commit_of_a_process_that_opened_meanwhile() {
    for stay in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = loaded(dir.path());
        let o = opts(Policy::Null, Durability::Sync);
        leave_dead_space(&path);
        let fs = Arc::new(OpenDuringCopy {
            path: path.clone(),
            stay,
            armed: Mutex::new(true),
            other: Mutex::new(None),
        });
        let ino = inode(&path);
        let db =
            Db::open_with_storage_as_process_and_fs(&path, file_storage, o, fs.clone()).unwrap();
        let r = db.wait_for_compaction();
        assert!(!*fs.armed.lock().unwrap(), "no compaction started at open");
        if stay {
            assert!(r.is_err(), "switched with another process attached: {r:?}");
            assert_eq!(inode(&path), ino);
            drop(fs.other.lock().unwrap().take());
            db.sync().unwrap();
            db.wait_for_compaction().unwrap();
        } else {
            r.unwrap();
        }
        assert_eq!(db.compactions(), 1, "stay {stay}");
        assert_ne!(inode(&path), ino);
        let rx = db.begin_read().unwrap();
        assert_eq!(
            rx.open_tree("t").unwrap().get(b"other").unwrap(),
            Some(&b"1"[..]),
            "stay {stay}: the other process's commit is lost"
        );
        drop(rx);
        db.check().unwrap();
        drop(db);
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(
            db.begin_read()
                .unwrap()
                .open_tree("t")
                .unwrap()
                .len()
                .unwrap(),
            KEYS + 1
        );
    }
}
