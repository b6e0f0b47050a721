//! Background compaction with each of its file-system operations failing in turn: the k-th
//! link, rename, removal or directory fsync of a run fails (alone, or with every one after
//! it), for every k a clean run reaches, with and without a lock file. Whatever fails, every commit acknowledged before the first
//! error is in the file the path names at the next open, nothing acknowledged later is lost,
//! and the file checks clean. (A directory fsync that failed after the switch's rename was
//! the first of this class: the switch was abandoned and the handle went on writing an inode
//! no name reached.) At the default cap every meta of these files leaves its free map behind;
//! the second test lowers the cap so that commits, NoMetaSync ones among them, save it every
//! few commits while compactions copy, catch up and switch (docs/format.md, "A free map
//! behind its meta").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use larch::{Db, Durability, Options};
use larch_testkit::file_storage;

/// Compaction's file-system operations, counted; call number `fail_at` (from 1) fails, and
/// with `sticky` every call after it too.
#[derive(Debug)]
struct FailNth {
    calls: AtomicUsize,
    fail_at: usize,
    sticky: bool,
    failed: AtomicBool,
    /// What each call was, in order (for the failure message).
    log: std::sync::Mutex<Vec<&'static str>>,
}

impl FailNth {
    fn new(fail_at: usize, sticky: bool) -> FailNth {
        FailNth {
            calls: AtomicUsize::new(0),
            fail_at,
            sticky,
            failed: AtomicBool::new(false),
            log: Default::default(),
        }
    }

    fn turn(&self, what: &'static str) -> std::io::Result<()> {
        self.log.lock().unwrap().push(what);
        let n = self.calls.fetch_add(1, SeqCst) + 1;
        if n == self.fail_at || (self.sticky && n > self.fail_at) {
            self.failed.store(true, SeqCst);
            return Err(std::io::Error::other(format!("{what} refused by the test")));
        }
        Ok(())
    }
}

impl larch::CompactionFs for FailNth {
    fn hard_link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.turn("hard_link")?;
        std::fs::hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.turn("rename")?;
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.turn("remove")?;
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.turn("sync_dir")?;
        std::fs::File::open(dir)?.sync_all()
    }
}

type Model = BTreeMap<u32, u8>;

/// A file with most of it free, then small commits that call for compactions (a `Db::sync`
/// after each looks at the threshold too), until `commits` are done or one fails. Returns
/// the model of what was acknowledged and the key a failed commit wrote, if one failed.
/// With `nometasync`, the durable commits are NoMetaSync ones: acknowledged with their meta
/// written, which the next open finds (nothing here cuts the power).
fn run(db: &Db, commits: u32, nometasync: bool) -> (Model, Option<(u32, u8)>) {
    let mut model = Model::new();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..6_000u32 {
            t.insert(&i.to_be_bytes(), &[1u8; 200]).unwrap();
            model.insert(i, 1);
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..6_000u32 {
            if i % 10 != 0 {
                t.remove(&i.to_be_bytes()).unwrap();
                model.remove(&i);
            }
        }
    }
    tx.commit().unwrap();
    for c in 0..commits {
        let key = 100_000 + c;
        let byte = (c % 250) as u8 + 2;
        let Ok(mut tx) = db.begin_write() else {
            return (model, None);
        };
        // Async and Sync commits both: the switch carries Async ones over.
        tx.set_durability(if c % 3 == 0 {
            Durability::Async
        } else if nometasync {
            Durability::NoMetaSync
        } else {
            Durability::Sync
        });
        let wrote = tx
            .open_tree("t")
            .and_then(|mut t| t.insert(&key.to_be_bytes(), &[byte; 200]));
        if wrote.is_err() {
            return (model, None);
        }
        if tx.commit().is_err() {
            return (model, Some((key, byte)));
        }
        if db.sync().is_err() {
            // Every commit before this sync was acknowledged; Async ones only as written,
            // and this sync failing says nothing of them: they may be lost, as any Async
            // commit a failed sync leaves. Keep only the durable ones.
            if c % 3 == 0 {
                return (model, Some((key, byte)));
            }
            model.insert(key, byte);
            return (model, None);
        }
        model.insert(key, byte);
        let _ = db.wait_for_compaction();
    }
    (model, None)
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let t = match rx.open_tree("t") {
        Ok(t) => t,
        Err(larch::Error::TreeNotFound(_)) => return Model::new(),
        Err(e) => panic!("open_tree: {e}"),
    };
    t.iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (u32::from_be_bytes(k.try_into().unwrap()), v[0])
        })
        .collect()
}

fn open(path: &Path, fs: Arc<FailNth>, as_process: bool, cap: Option<usize>) -> larch::Result<Db> {
    let opts = Options::default()
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600));
    let opts = match cap {
        Some(bits) => opts.carried_max_bits(bits),
        None => opts,
    };
    if as_process {
        Db::open_with_storage_as_process_and_fs(path, file_storage, opts, fs)
    } else {
        Db::open_with_storage_and_fs(path, file_storage(path), opts, fs)
    }
}

#[test]
fn every_failing_file_system_operation_of_compaction_keeps_every_acknowledged_commit() {
    every_failing_operation_keeps_every_acknowledged_commit(None);
}

#[test]
fn every_failing_file_system_operation_of_compaction_with_free_map_saves_keeps_every_acknowledged_commit(
) {
    every_failing_operation_keeps_every_acknowledged_commit(Some(24));
}

/// With at most `cap` free-map bits carried past a commit (and then NoMetaSync commits in
/// place of the Sync ones), or the default cap.
fn every_failing_operation_keeps_every_acknowledged_commit(cap: Option<usize>) {
    const COMMITS: u32 = 40;
    let nometasync = cap.is_some();
    for as_process in [false, true] {
        // A clean run: how many operations there are to fail, and that compaction runs.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults.larch");
        drop(Db::open(&path, Options::default()).unwrap());
        let fs = Arc::new(FailNth::new(usize::MAX, false));
        let db = open(&path, fs.clone(), as_process, cap).unwrap();
        let (model, _) = run(&db, COMMITS, nometasync);
        assert!(
            db.compactions() >= 1,
            "cap {cap:?}, as_process {as_process}: no compaction"
        );
        drop(db);
        let total = fs.calls.load(SeqCst);
        eprintln!(
            "cap {cap:?}, as_process {as_process}: {total} operations in a clean run: {:?}",
            fs.log.lock().unwrap()
        );
        assert_eq!(
            contents(&Db::open(&path, Options::default()).unwrap()),
            model
        );
        assert!(
            total >= 2,
            "cap {cap:?}, as_process {as_process}: {total} operations"
        );
        for (fail_at, sticky) in (1..=total).flat_map(|k| [(k, false), (k, true)]) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("faults.larch");
            drop(Db::open(&path, Options::default()).unwrap());
            let fs = Arc::new(FailNth::new(fail_at, sticky));
            // The open's own directory fsync may be the one that fails: nothing was
            // acknowledged, and the file must open as it was.
            let (model, maybe) = match open(&path, fs.clone(), as_process, cap) {
                Ok(db) => run(&db, COMMITS, nometasync),
                Err(_) => (Model::new(), None),
            };
            let ctx = format!(
                "cap {cap:?}, as_process {as_process}, call {fail_at} of {total} failing, sticky \
                 {sticky} ({:?})",
                fs.log.lock().unwrap()
            );
            let db = Db::open(&path, Options::default())
                .unwrap_or_else(|e| panic!("{ctx}: the file no longer opens: {e}"));
            db.check().unwrap_or_else(|e| panic!("{ctx}: check: {e}"));
            let mut got = contents(&db);
            if let Some((k, v)) = maybe {
                // A commit that failed may or may not have reached the file.
                if got.get(&k) == Some(&v) {
                    got.remove(&k);
                }
            }
            assert!(
                got == model,
                "{ctx}: the reopened file holds {} entries, the acknowledged commits {}; \
                 missing {:?}",
                got.len(),
                model.len(),
                model
                    .keys()
                    .filter(|k| !got.contains_key(k))
                    .take(5)
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// Compaction's file-system operations, with the first directory fsync after a rename (the
/// switch's) failing once: the new file's name is not durable until a later fsync of the
/// directory succeeds.
#[derive(Debug, Default)]
struct SwitchSyncDirFailsOnce {
    renamed: AtomicBool,
    failed: AtomicBool,
    sync_dirs_after_failure: AtomicUsize,
}

impl larch::CompactionFs for SwitchSyncDirFailsOnce {
    fn hard_link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        self.renamed.store(true, SeqCst);
        Ok(())
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        if self.failed.load(SeqCst) {
            self.sync_dirs_after_failure.fetch_add(1, SeqCst);
        } else if self.renamed.load(SeqCst) {
            self.failed.store(true, SeqCst);
            return Err(std::io::Error::other("sync_dir refused by the test"));
        }
        std::fs::File::open(dir)?.sync_all()
    }
}

/// After a switch whose directory fsync failed, only a sync that fsyncs the directory too
/// makes anything durable under the file's name. Async commits past `max_unsynced_bytes`
/// still make durable points: the first point whose background sync is done fsyncs the
/// directory before it writes its meta, so the bound keeps working (the commits waiting at
/// the bound for a point's sync once found it done and never finished it, and the replaced
/// pages piled up without limit), and every commit is in the file at the next open.
#[test]
fn durable_points_after_a_switch_whose_directory_fsync_failed_fsync_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.larch");
    let fs = Arc::new(SwitchSyncDirFailsOnce::default());
    let bound = 64 << 10;
    let opts = Options::default()
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600))
        .max_unsynced_bytes(Some(bound));
    drop(Db::open(&path, Options::default()).unwrap());
    let db = Db::open_with_storage_and_fs(&path, file_storage(&path), opts, fs.clone()).unwrap();
    // Mostly free after the second commit: its sync calls for a compaction.
    // One commit, then a `Db::sync` that calls for a compaction, which switches (its
    // directory fsync failing) before `run` returns; nothing syncs after it.
    let (mut model, failed) = run(&db, 1, false);
    assert_eq!(failed, None);
    assert!(
        db.compactions() == 1
            && fs.failed.load(SeqCst)
            && fs.sync_dirs_after_failure.load(SeqCst) == 0,
        "the switch did not leave the name to fsync: {} compactions, {fs:?}",
        db.compactions()
    );
    let before = db.io_stats();
    let rounds = 40u32;
    for r in 0..rounds {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Async);
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..20u32 {
                let key = (r * 20 + i) * 10 % 6_000;
                t.insert(&key.to_be_bytes(), &[r as u8 + 3; 200]).unwrap();
                model.insert(key, r as u8 + 3);
            }
        }
        tx.commit().unwrap();
    }
    let io = db.io_stats().since(&before);
    // 800 overwrites of 200 bytes replace far more than the bound's pages: durable points
    // were made, finished in the background or in the foreground, and the directory was
    // fsynced for them.
    assert!(
        io.durable_meta_writes + io.syncs >= 1 && fs.sync_dirs_after_failure.load(SeqCst) >= 1,
        "{io:?}, {} directory fsyncs since the failure",
        fs.sync_dirs_after_failure.load(SeqCst)
    );
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    assert_eq!(contents(&db), model);
}

/// After a switch whose directory fsync failed, with `max_unsynced_age` and no commit after
/// it: the handle's age timer fsyncs the directory. The new file's state starts durable, so
/// no commit's age calls for it; without the timer looking at the name too, the commits the
/// switch carried over stay durable only in a file a power cut can take away, for as long as
/// the handle stays quiet.
#[test]
fn the_age_timer_fsyncs_the_directory_a_switch_left_unsynced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.larch");
    let fs = Arc::new(SwitchSyncDirFailsOnce::default());
    let opts = Options::default()
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(std::time::Duration::from_secs(3600))
        .max_unsynced_age(Some(std::time::Duration::from_millis(20)));
    drop(Db::open(&path, Options::default()).unwrap());
    let db = Db::open_with_storage_and_fs(&path, file_storage(&path), opts, fs.clone()).unwrap();
    let (model, failed) = run(&db, 1, false);
    assert_eq!(failed, None);
    assert!(db.compactions() == 1 && fs.failed.load(SeqCst));
    let start = std::time::Instant::now();
    while fs.sync_dirs_after_failure.load(SeqCst) == 0
        && start.elapsed() < std::time::Duration::from_secs(30)
    {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        fs.sync_dirs_after_failure.load(SeqCst) >= 1,
        "no directory fsync in 30 s after the switch: {fs:?}"
    );
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    assert_eq!(contents(&db), model);
}
